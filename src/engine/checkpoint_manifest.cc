#include "frugal/engine/checkpoint_manifest.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "control_kinds.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

namespace fs = std::filesystem;

// Note [Per-site checkpoints]: across sites, one directory that every rank
// writes is a network file system over the slow link. With "{cluster}" in
// --checkpoint-dir each rank writes its file (atomically, checksummed, as
// in a shared directory) into its own cluster's directory, reads it back
// and sends rank 0 one line: its rank, cluster, file name, size and
// checksum (kind kCheckpoint). Rank 0 cannot see the other sites' files, so
// these reports replace its read-back of them: once every rank has
// reported it writes the manifest as COMPLETE in its own directory and
// sends the same text to the leader of every other cluster, which writes it
// into its directory and prunes there (newest K per site). A report that
// does not come within the writer's wait leaves the step abandoned: no
// COMPLETE anywhere (the leaders are sent an empty manifest), the previous
// step stays the newest. Every site's directory thus describes the whole
// step, so a resume can start from whichever site rank 0 is in now. On a
// resume the k-th member of a cluster takes the k-th file of that cluster's
// directory (ranks are reassigned by site, SeatOf), and the shared part,
// rank 0's old file, is read by one worker of the cluster that holds it
// and sent to the others (Worker's BuildAndResume), so no host reads
// another site's directory. The cost: a step completes one round trip to
// rank 0 and back later than in a shared directory.

bool IsPerSiteCheckpointDir(const std::string& dir) { return dir.find(kClusterPlaceholder) != std::string::npos; }

std::string SiteCheckpointDir(const std::string& dir, const std::string& cluster) {
  std::string out = dir;
  const std::string key = kClusterPlaceholder;
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + cluster.size())) {
    out.replace(at, key.size(), cluster);
  }
  return out;
}

Status CheckSiteName(const std::string& cluster) {
  const bool spaces = std::any_of(cluster.begin(), cluster.end(), [](unsigned char c) { return std::isspace(c); });
  if (cluster.empty() || cluster == "." || cluster == ".." || spaces || cluster.find('/') != std::string::npos) {
    return Status::InvalidArgument("cluster name '" + cluster +
                                   "' cannot name a per-site checkpoint directory (no '/', spaces, '.' or '..')");
  }
  return Status::Ok();
}

std::vector<CheckpointFileEntry> CheckpointManifest::FilesOf(const std::string& cluster) const {
  std::vector<CheckpointFileEntry> out;
  for (const CheckpointFileEntry& e : files) {
    if (e.cluster == cluster) out.push_back(e);
  }
  return out;
}

std::string EncodeFileEntry(const CheckpointFileEntry& e) {
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016" PRIx64, e.checksum);
  return "file " + std::to_string(e.rank) + " " + e.cluster + " " + e.name + " " + std::to_string(e.size) + " " + sum;
}

Result<CheckpointFileEntry> ParseFileEntry(const std::string& line, const std::string& what) {
  std::istringstream in(line);
  std::string word, size, sum, extra;
  CheckpointFileEntry e;
  const bool read = static_cast<bool>(in >> word >> e.rank >> e.cluster >> e.name >> size >> sum) && !(in >> extra);
  auto all = [](const std::string& s, int (*ok)(int)) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [ok](unsigned char c) { return ok(c) != 0; });
  };
  if (!read || word != "file" || e.rank < 0 || !all(size, ::isdigit) || sum.size() != 16 || !all(sum, ::isxdigit) ||
      e.name != "rank-" + std::to_string(e.rank) + ".ckpt" || !CheckSiteName(e.cluster).ok()) {
    return Status::Corruption(what + ": bad file line '" + line + "'");
  }
  e.size = std::stoull(size);
  e.checksum = std::stoull(sum, nullptr, 16);
  return e;
}

std::string EncodeManifest(const CheckpointManifest& m) {
  std::string text = std::to_string(m.world) + "\n";
  for (const CheckpointFileEntry& e : m.files) text += EncodeFileEntry(e) + "\n";
  return text;
}

Result<CheckpointManifest> ParseManifest(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line;
  CheckpointManifest m;
  {
    std::getline(in, line);
    std::istringstream first(line);
    std::string extra;
    if (!(first >> m.world) || m.world < 1 || (first >> extra)) {
      return Status::Corruption(what + " has no valid COMPLETE marker (first line: '" + line + "')");
    }
  }
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    FRUGAL_ASSIGN_OR_RETURN(CheckpointFileEntry e, ParseFileEntry(line, what));
    if (e.rank != static_cast<int>(m.files.size())) {
      return Status::Corruption(what + ": file line for rank " + std::to_string(e.rank) + " where rank " +
                                std::to_string(m.files.size()) + " was due");
    }
    m.files.push_back(std::move(e));
  }
  if (m.per_site() && static_cast<int>(m.files.size()) != m.world) {
    return Status::Corruption(what + " lists " + std::to_string(m.files.size()) + " files for a world of " +
                              std::to_string(m.world));
  }
  return m;
}

Result<CheckpointManifest> ReadCheckpointManifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / "COMPLETE").string();
  std::ifstream in(path);
  if (!in) return Status::NotFound(step_dir + " has no COMPLETE marker");
  std::stringstream text;
  text << in.rdbuf();
  return ParseManifest(text.str(), "checkpoint " + step_dir);
}

Status WriteCheckpointManifest(const std::string& step_dir, const CheckpointManifest& m) {
  const std::string text = EncodeManifest(m);
  return WriteFileAtomically((fs::path(step_dir) / "COMPLETE").string(), std::vector<uint8_t>(text.begin(), text.end()));
}

namespace {

uint64_t TrailingChecksum(const std::vector<uint8_t>& data) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(data[data.size() - 8 + i]) << (8 * i);
  return v;
}

}  // namespace

Result<CheckpointFileEntry> VerifyCheckpointFile(const std::string& path, int rank, const std::string& cluster,
                                                 const std::function<Status(const CheckpointSections&)>& check) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> data, ReadCheckpointBytes(path));
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections sections, ParseCheckpoint(data, path));  // >= 24 bytes once parsed
  if (check) FRUGAL_RETURN_IF_ERROR(check(sections).WithContext(path));
  CheckpointFileEntry e;
  e.rank = rank;
  e.cluster = cluster;
  e.name = fs::path(path).filename().string();
  e.size = data.size();
  e.checksum = TrailingChecksum(data);
  return e;
}

Result<CheckpointSections> ReadManifestFile(const std::string& path, const CheckpointFileEntry& entry) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> data, ReadCheckpointBytes(path));
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections sections, ParseCheckpoint(data, path));
  if (data.size() != entry.size || TrailingChecksum(data) != entry.checksum) {
    return Status::Corruption("checkpoint " + path + " is not the file its COMPLETE marker lists (" +
                              std::to_string(data.size()) + " bytes, listed " + std::to_string(entry.size) +
                              "; or another checksum)");
  }
  return sections;
}

namespace {

// Waits for one message from `src` in slices, so that `cancel` is seen.
Result<comm::Message> RecvUntil(comm::Transport& t, int src, comm::Tag tag, SteadyTime deadline,
                                const std::atomic<bool>& cancel) {
  constexpr auto kSlice = std::chrono::milliseconds(100);
  for (;;) {
    if (cancel.load()) return Status::Unavailable("cancelled");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - t.clock().Now());
    if (left.count() <= 0) return Status::Timeout("no message from " + t.topology().DescribeRank(src) + " in time");
    Result<comm::Message> m = t.Recv(src, tag, std::min(left, std::chrono::milliseconds(kSlice)));
    if (m.ok() || m.status().code() != Status::Code::kTimeout) return m;
  }
}

comm::Bytes TextBytes(const std::string& s) { return comm::Bytes(s.begin(), s.end()); }

}  // namespace

Status SendFileReport(comm::Transport& t, int64_t step, const CheckpointFileEntry& e) {
  return t.Send(0, ControlTag(step, kCheckpoint), TextBytes(EncodeFileEntry(e)));
}

Result<CheckpointFileEntry> RecvFileReport(comm::Transport& t, int src, int64_t step, SteadyTime deadline,
                                           const std::atomic<bool>& cancel) {
  auto m = RecvUntil(t, src, ControlTag(step, kCheckpoint), deadline, cancel);
  if (!m.ok()) return m.status().WithContext("the checkpoint report of " + t.topology().DescribeRank(src));
  FRUGAL_ASSIGN_OR_RETURN(CheckpointFileEntry e,
                          ParseFileEntry(std::string(m->payload.begin(), m->payload.end()),
                                         "the checkpoint report of " + t.topology().DescribeRank(src)));
  if (e.rank != src || e.cluster != t.topology().cluster_name_of(src)) {
    return Status::Corruption("the checkpoint report of " + t.topology().DescribeRank(src) + " names rank " +
                              std::to_string(e.rank) + " of cluster " + e.cluster);
  }
  return e;
}

Status SendManifest(comm::Transport& t, int dst, int64_t step, const std::string& text) {
  return t.Send(dst, ControlTag(step, kCheckpoint), TextBytes(text));
}

Result<std::string> RecvManifest(comm::Transport& t, int64_t step, SteadyTime deadline, const std::atomic<bool>& cancel) {
  auto m = RecvUntil(t, 0, ControlTag(step, kCheckpoint), deadline, cancel);
  if (!m.ok()) return m.status().WithContext("rank 0's checkpoint manifest");
  return std::string(m->payload.begin(), m->payload.end());
}

Result<std::string> NewestIntactSiteCheckpoint(const std::string& dir, const std::vector<std::string>& clusters,
                                               std::vector<std::string>* skipped) {
  // Step number -> a directory where it is complete.
  std::vector<std::pair<int64_t, std::string>> steps;
  std::vector<std::string> seen;
  for (const std::string& c : clusters) {
    const std::string site = SiteCheckpointDir(dir, c);
    std::error_code ec;
    if (!fs::is_directory(site, ec)) continue;
    seen.push_back(c);
    for (const std::string& step_dir : CompleteCheckpoints(site)) {
      const std::string name = fs::path(step_dir).filename().string();
      steps.emplace_back(std::stoll(name.substr(5)), step_dir);
    }
  }
  if (seen.empty()) return Status::NotFound("no checkpoint directory of " + dir + " exists on this host");
  std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  Status last = Status::NotFound("no complete checkpoint in " + dir);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0 && steps[i].first == steps[i - 1].first) continue;  // the same step in another site
    const std::string& step_dir = steps[i].second;
    const std::string name = fs::path(step_dir).filename().string();
    Status bad = Status::Ok();
    auto m = ReadCheckpointManifest(step_dir);
    if (!m.ok()) bad = m.status();
    if (bad.ok() && !m->per_site()) bad = Status::Corruption(step_dir + " was written to one shared directory");
    for (size_t f = 0; bad.ok() && f < m->files.size(); ++f) {
      const CheckpointFileEntry& e = m->files[f];
      if (std::find(seen.begin(), seen.end(), e.cluster) == seen.end()) continue;  // not on this host
      const std::string path = (fs::path(SiteCheckpointDir(dir, e.cluster)) / name / e.name).string();
      bad = ReadManifestFile(path, e).status();
    }
    if (bad.ok()) return step_dir;
    if (skipped != nullptr) skipped->push_back(step_dir + ": " + bad.message());
    last = Status::Corruption("no intact checkpoint in " + dir + " (newest damage: " + bad.message() + ")");
  }
  return last;
}

const CheckpointFileEntry* SeatOf(const CheckpointManifest& m, const std::string& cluster, int index_in_cluster) {
  int k = 0;
  for (const CheckpointFileEntry& e : m.files) {
    if (e.cluster != cluster) continue;
    if (k++ == index_in_cluster) return &e;
  }
  return nullptr;
}

}  // namespace frugal::engine
