// Writes a checkpoint in the background (Note [Background checkpoints] in
// checkpoint_writer.cc): the worker hands over the sections it copied at
// the gate and trains on while a thread writes this rank's file; rank 0's
// thread then waits for every rank's file, fsyncs the step directory once
// and marks the step COMPLETE. At most one write is in flight. Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "frugal/comm/transport/transport.h"
#include "frugal/engine/checkpoint.h"

namespace frugal::engine {

struct CheckpointJob {
  std::string root;  // the run's checkpoint directory
  int64_t step = 0;
  int rank = 0;
  int world = 1;
  int keep = 3;  // rank 0: complete steps kept
  // Rank 0: how long to wait for the other ranks' files before the step is
  // abandoned (left incomplete, so never resumed from).
  std::chrono::milliseconds wait_for_ranks{60000};
  CheckpointSections sections;
  // Rank 0: is rank r's file (read back whole, checksum verified) the one of
  // this step and this generation, not a leftover? Called on the writer's thread.
  std::function<Status(int rank, const CheckpointSections&)> check_rank_file;
  // Per-site checkpoints (Note [Per-site checkpoints] in
  // checkpoint_manifest.cc): when set, `root` is this rank's cluster's
  // directory; every rank checks its own file with check_rank_file and
  // reports it to rank 0 over this transport, rank 0 writes the manifest
  // and sends it to the other clusters' leaders, which write it too and
  // prune their directory. Null: one shared directory, rank 0 reads every
  // file back. REQUIRES: the transport outlives the write (Take or the
  // destructor); it is used from the writer's thread.
  comm::Transport* transport = nullptr;
};

struct CheckpointOutcome {
  int64_t step = -1;
  Status status = Status::Ok();  // writing this rank's file; an error fails the run
  bool complete = false;         // rank 0: COMPLETE written
  std::string abandoned;         // rank 0 (per site: also a cluster's leader): why the step was left incomplete
  uint64_t bytes = 0;            // this rank's file
  double write_s = 0;            // this rank's file: encode, write, fsync, rename
  double complete_s = 0;         // rank 0: the other ranks' files, directory fsync, COMPLETE, pruning
};

class CheckpointWriter {
 public:
  CheckpointWriter() = default;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  ~CheckpointWriter();  // finishes this rank's file in flight, then Cancel

  // Starts writing `job` on a new thread. The previous write must have been
  // taken (Take); Internal error otherwise.
  Status Start(CheckpointJob job);
  // The outcome of the write started last, once: with `wait`, blocks until it
  // is done; without, only if it is already done. nullopt when there is none.
  std::optional<CheckpointOutcome> Take(bool wait);
  // Rank 0 stops waiting for the other ranks' files: the step in flight is
  // abandoned (e.g. the world changed). Its own file is still finished.
  void Cancel() { cancel_.store(true); }

 private:
  void Write(CheckpointJob job);
  Status Complete(const CheckpointJob& job, const std::string& step_dir);
  Status CompleteSite(const CheckpointJob& job, const std::string& step_dir, const std::string& file);
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::atomic<bool> cancel_{false};
  CheckpointOutcome outcome_;  // written by the thread before done_
};

}  // namespace frugal::engine
