// Checkpoints per site (Note [Per-site checkpoints] in checkpoint_manifest.cc):
// a --checkpoint-dir containing "{cluster}" gives each cluster its own
// directory; every rank writes its file into its cluster's directory and
// reports (file, size, checksum) to rank 0 over the transport, and rank 0's
// COMPLETE marker is a manifest naming every rank's file and its cluster,
// which rank 0 sends back to every other cluster's leader. Torch-free.
//
// Layout with --checkpoint-dir /ckpt/{cluster}, clusters A (ranks 0, 1)
// and B (ranks 2, 3):
//   /ckpt/A/step-<t>/rank-0.ckpt rank-1.ckpt COMPLETE
//   /ckpt/B/step-<t>/rank-2.ckpt rank-3.ckpt COMPLETE   (the same manifest)
// COMPLETE's first line is the world size (as in a shared directory, whose
// COMPLETE has only that line); then one line per rank:
//   file <rank> <cluster> <name> <size> <checksum, 16 hex digits>
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/clock.h"
#include "frugal/common/status.h"
#include "frugal/engine/checkpoint.h"

namespace frugal::engine {

inline constexpr const char kClusterPlaceholder[] = "{cluster}";

// Does `dir` (a --checkpoint-dir) name one directory per cluster?
bool IsPerSiteCheckpointDir(const std::string& dir);
// `dir` with every "{cluster}" replaced by `cluster`.
std::string SiteCheckpointDir(const std::string& dir, const std::string& cluster);
// InvalidArgument unless `cluster` can name a directory (non-empty, no '/',
// no whitespace, not "." or "..").
Status CheckSiteName(const std::string& cluster);

// One rank's file of a step.
struct CheckpointFileEntry {
  int rank = 0;
  std::string cluster;  // the cluster whose directory holds it
  std::string name;     // "rank-<r>.ckpt", in step-<t>/ of that directory
  uint64_t size = 0;
  uint64_t checksum = 0;  // the file's trailing checksum (Note [Checkpoint checksum])
  bool operator==(const CheckpointFileEntry& o) const {
    return rank == o.rank && cluster == o.cluster && name == o.name && size == o.size && checksum == o.checksum;
  }
};

// What a COMPLETE marker says. `files` is empty for a shared directory
// (every rank's file is in the marker's step directory); otherwise it
// holds one entry per rank, in rank order.
struct CheckpointManifest {
  int world = 1;
  std::vector<CheckpointFileEntry> files;
  bool per_site() const { return !files.empty(); }
  // The entries of `cluster`'s directory, in rank order.
  std::vector<CheckpointFileEntry> FilesOf(const std::string& cluster) const;
};

std::string EncodeFileEntry(const CheckpointFileEntry& e);  // one line, no newline
Result<CheckpointFileEntry> ParseFileEntry(const std::string& line, const std::string& what);
std::string EncodeManifest(const CheckpointManifest& m);
// Corruption naming `what` for a malformed marker, a missing or repeated
// rank, or a file line for a world other than the first line's.
Result<CheckpointManifest> ParseManifest(const std::string& text, const std::string& what);
// The COMPLETE marker of `step_dir` (NotFound when it has none).
Result<CheckpointManifest> ReadCheckpointManifest(const std::string& step_dir);
// Writes `m` as `step_dir`/COMPLETE (temporary file, fsync, rename, directory fsync).
Status WriteCheckpointManifest(const std::string& step_dir, const CheckpointManifest& m);

// Reads `path` back whole (checksum verified) and describes it as rank
// `rank`'s file in `cluster`'s directory; `check`, when given, vets its sections.
Result<CheckpointFileEntry> VerifyCheckpointFile(const std::string& path, int rank, const std::string& cluster,
                                                 const std::function<Status(const CheckpointSections&)>& check);
// Reads `path` and checks it is the file `entry` describes (size, checksum,
// sections intact): Corruption naming the difference otherwise.
Result<CheckpointSections> ReadManifestFile(const std::string& path, const CheckpointFileEntry& entry);

// The messages of a per-site checkpoint of step `step` (control kind
// kCheckpoint): each rank's entry to rank 0, and rank 0's manifest (or an
// empty payload: the step was abandoned) to each other cluster's leader.
// The waits give up at `deadline` on the transport's clock, or as soon as
// `cancel` is set.
using SteadyTime = Clock::time_point;
Status SendFileReport(comm::Transport& t, int64_t step, const CheckpointFileEntry& e);
Result<CheckpointFileEntry> RecvFileReport(comm::Transport& t, int src, int64_t step, SteadyTime deadline,
                                           const std::atomic<bool>& cancel);
Status SendManifest(comm::Transport& t, int dst, int64_t step, const std::string& text);
// The manifest's text; empty when rank 0 abandoned the step.
Result<std::string> RecvManifest(comm::Transport& t, int64_t step, SteadyTime deadline, const std::atomic<bool>& cancel);

// A complete step of a per-site checkpoint directory for a resume: the
// newest step complete in any of `clusters`' directories that exist on this
// host, whose files in those directories read back as the manifest says
// (files in a directory this host does not have are not checked here; the
// worker of that cluster checks them). Returns that step directory. Each
// step passed over is added to `skipped` as "<step dir>: <why>".
Result<std::string> NewestIntactSiteCheckpoint(const std::string& dir, const std::vector<std::string>& clusters,
                                               std::vector<std::string>* skipped);

// Which file of a per-site checkpoint a rank of a new world restores: the
// k-th file of its cluster's directory for the k-th member of that cluster
// in the new world (ranks are reassigned; a rank's state comes from its own
// site). nullptr when its cluster wrote fewer files than it has members now
// (the extra ranks start with empty residuals).
const CheckpointFileEntry* SeatOf(const CheckpointManifest& m, const std::string& cluster, int index_in_cluster);

}  // namespace frugal::engine
