#include "frugal/engine/checkpoint_writer.h"

#include "frugal/engine/checkpoint_manifest.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace frugal::engine {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Note [Background checkpoints]: at the gate of step t every rank copies
// its state into sections (the only part that stalls training: snapshot_s
// in the checkpoint event) and hands them to this writer. Its thread, at a
// lower CPU priority than training, streams them to
// step-<t>/rank-<r>.ckpt.tmp, fsyncs the file and renames it, so a rank
// file is never seen half-written. Rank 0's thread then waits for every
// other rank's file, reads each back whole (checksum) and checks that it is
// this step's and this generation's (check_rank_file), fsyncs the step
// directory once (making all renames durable), and writes COMPLETE (file
// fsync, rename, directory fsync); only then is the step offered for
// resuming (CompleteCheckpoints), and old steps are pruned. A crash at any
// point before leaves the step without COMPLETE and the previous complete
// step intact. At most one write is in flight: a checkpoint due while the
// previous one is still being written waits for it (wait_s in the event);
// none is skipped. If another rank's file does not come within
// wait_for_ranks, or Cancel is called, the step is abandoned: no COMPLETE,
// a logged reason, and training goes on. A run ends by taking the write in
// flight (it completes); one that ends otherwise (an error, an elastic
// leave) finishes its own file in the destructor but abandons the step.
CheckpointWriter::~CheckpointWriter() {
  cancel_.store(true);  // a run that ends without Take (an error, a leave) does not wait for the others
  if (thread_.joinable()) thread_.join();
}

Status CheckpointWriter::Start(CheckpointJob job) {
  if (thread_.joinable()) return Status::Internal("a checkpoint write is still in flight");
  done_.store(false);
  cancel_.store(false);
  outcome_ = CheckpointOutcome{};
  thread_ = std::thread([this, job = std::move(job)]() mutable { Write(std::move(job)); });
  return Status::Ok();
}

std::optional<CheckpointOutcome> CheckpointWriter::Take(bool wait) {
  if (!thread_.joinable() || (!wait && !done_.load())) return std::nullopt;
  thread_.join();
  return std::move(outcome_);
}

void CheckpointWriter::Write(CheckpointJob job) {
  // Training keeps the CPU: this thread runs 10 nice levels lower.
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  errno = 0;
  const int nice_now = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0) ::setpriority(PRIO_PROCESS, tid, std::min(19, nice_now + 10));
  const auto t0 = Clock::now();
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  outcome_.step = job.step;
  const std::string step_dir = CheckpointStepDir(job.root, job.step);
  const std::string file = CheckpointRankFile(step_dir, job.rank);
  outcome_.status = WriteCheckpointFileUnsynced(file, job.sections);
  for (auto& [name, bytes] : job.sections) RecycleCheckpointBuffer(std::move(bytes));  // for the next snapshot
  job.sections.clear();
  std::error_code ec;
  outcome_.bytes = outcome_.status.ok() ? fs::file_size(file, ec) : 0;
  const auto written = Clock::now();
  outcome_.write_s = seconds(written - t0);
  if (outcome_.status.ok() && (job.rank == 0 || job.transport != nullptr)) {
    Status s = job.transport != nullptr ? CompleteSite(job, step_dir, file) : Complete(job, step_dir);
    outcome_.complete = s.ok() && job.rank == 0;
    if (!s.ok()) outcome_.abandoned = s.ToString();
    outcome_.complete_s = seconds(Clock::now() - written);
  }
  done_.store(true);
}

// Rank 0: every rank's file, verified, then the directory's fsync, COMPLETE
// and pruning.
Status CheckpointWriter::Complete(const CheckpointJob& job, const std::string& step_dir) {
  const auto deadline = Clock::now() + job.wait_for_ranks;
  for (int r = 1; r < job.world; ++r) {
    const std::string path = CheckpointRankFile(step_dir, r);
    Status last = Status::NotFound(path + " was not written");
    fs::file_time_type seen{};
    for (;;) {
      if (cancel_.load()) return Status::Unavailable("cancelled while waiting for " + path);
      std::error_code ec;
      const fs::file_time_type mtime = fs::last_write_time(path, ec);
      if (!ec && mtime != seen) {  // a new file (or a new version of it): read it back
        seen = mtime;
        auto read = ReadCheckpointFile(path);
        last = read.ok() ? (job.check_rank_file ? job.check_rank_file(r, *read) : Status::Ok()) : read.status();
        if (last.ok()) break;
      }
      if (Clock::now() >= deadline) return last.WithContext("waiting for rank " + std::to_string(r) + "'s file");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  FRUGAL_RETURN_IF_ERROR(SyncDirectory(step_dir));
  FRUGAL_RETURN_IF_ERROR(MarkCheckpointComplete(step_dir, job.world));
  return PruneCheckpoints(job.root, job.keep);
}

// Note [Per-site checkpoints] in checkpoint_manifest.cc: this rank's file
// read back and reported; rank 0 gathers the reports, writes the manifest
// and sends it to the other clusters' leaders; a leader writes it.
Status CheckpointWriter::CompleteSite(const CheckpointJob& job, const std::string& step_dir, const std::string& file) {
  comm::Transport& t = *job.transport;
  const comm::Topology& topo = t.topology();
  const auto deadline = t.clock().Now() + job.wait_for_ranks;
  auto own = VerifyCheckpointFile(file, job.rank, topo.cluster_name_of(job.rank), [&](const CheckpointSections& s) {
    return job.check_rank_file ? job.check_rank_file(job.rank, s) : Status::Ok();
  });
  if (job.rank != 0) {
    FRUGAL_RETURN_IF_ERROR(own.status());
    FRUGAL_RETURN_IF_ERROR(SendFileReport(t, job.step, *own));
    if (!topo.is_leader(job.rank) || topo.cluster_id(job.rank) == topo.cluster_id(0)) return Status::Ok();
    // Rank 0 waits up to wait_for_ranks from about now; its answer follows.
    FRUGAL_ASSIGN_OR_RETURN(const std::string text, RecvManifest(t, job.step, deadline + job.wait_for_ranks, cancel_));
    if (text.empty()) return Status::Unavailable("rank 0 abandoned the step");
    FRUGAL_ASSIGN_OR_RETURN(const CheckpointManifest m, ParseManifest(text, "rank 0's checkpoint manifest"));
    FRUGAL_RETURN_IF_ERROR(SyncDirectory(step_dir));
    FRUGAL_RETURN_IF_ERROR(WriteCheckpointManifest(step_dir, m));
    return PruneCheckpoints(job.root, job.keep);
  }
  CheckpointManifest m;
  m.world = job.world;
  Status s = own.status();
  if (s.ok()) m.files.push_back(*own);
  for (int r = 1; s.ok() && r < job.world; ++r) {
    auto e = RecvFileReport(t, r, job.step, deadline, cancel_);
    if (e.ok()) m.files.push_back(*e);
    s = e.status();
  }
  if (s.ok()) s = SyncDirectory(step_dir);
  if (s.ok()) s = WriteCheckpointManifest(step_dir, m);
  const std::string text = s.ok() ? EncodeManifest(m) : std::string();  // empty: abandoned
  for (int c = 0; c < topo.num_clusters(); ++c) {
    if (c == topo.cluster_id(0)) continue;
    (void)SendManifest(t, topo.leader(c), job.step, text);  // a leader gone misses it and writes no COMPLETE
  }
  FRUGAL_RETURN_IF_ERROR(s);
  return PruneCheckpoints(job.root, job.keep);
}

}  // namespace frugal::engine
