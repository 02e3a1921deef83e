// Worker::Impl, shared by the worker's files: worker.cc (set-up and the
// training loop), worker_state.cc (checkpoints, snapshots, restoring run
// state) and worker_elastic.cc (membership generations). Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "adaptation_protocol.h"
#include "frugal/comm/membership/membership.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"
#include "frugal/data/batch_plan.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/checkpoint_manifest.h"
#include "frugal/engine/checkpoint_writer.h"
#include "frugal/engine/elastic_session.h"
#include "frugal/engine/sync_strategy.h"
#include "frugal/engine/worker.h"
#include "frugal/models/model.h"
#include "frugal/train/run_reporter.h"
#include "frugal/train/training_data.h"

namespace frugal::engine {

// How the iterations of one generation ended.
enum class LoopEnd { kFinished, kSwitch, kStop };

// Adds the counters of `d` (one generation's) to `total`; the traffic's
// messages_in_flight becomes d's (a current value, not a count).
void Accumulate(PipelineStats* total, const PipelineStats& d);
void Accumulate(comm::TransportStats* total, const comm::TransportStats& d);
// The pipeline times of a WorkerResult (wait, sparsify, exchange, optimizer) from `st`.
void SetPipelineTimes(const PipelineStats& st, WorkerResult* result);

// Threads: every field belongs to the thread that runs Worker::Run and is
// guarded by no lock, except those that say otherwise: leave_signal
// (atomic: another thread may set it), the transport and the
// strategy (their own locks, for their own threads) and checkpoint_writer
// (its own thread and lock; this thread only hands it work and waits).
class Worker::Impl {
 public:
  // What the worker's timings, metrics clock and elastic waits run on.
  Clock& clock = Env::Default();
  // The run: its resolved configuration and what it trains.
  RunConfig config;
  const train::TrainOptions& options = config.train;
  const DistributedOptions& dist = config.distributed;
  std::unique_ptr<comm::Transport> transport;
  std::unique_ptr<AdaptationPolicy> policy;  // handed to the protocol at Init
  torch::Device device{torch::kCPU};
  train::TrainingData data;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<data::BatchCursor> cursor;  // the data position; batch sizes may change
  std::unique_ptr<train::LrSchedule> schedule;
  std::unique_ptr<SyncStrategy> sync;  // how the replicas stay in step (sync_strategy.h)
  std::unique_ptr<AdaptationProtocol> protocol;  // with adapt on or batch
  std::unique_ptr<train::RunReporter> reporter;

  // Progress and the metrics' counters.
  int64_t total_steps = 0;
  int64_t start_step = 0;  // > 0 when resumed from a checkpoint or a snapshot
  std::chrono::milliseconds timeout{60000};  // --timeout-s, for every wait
  // Metrics window counters at the last record.
  PipelineStats window_stats;
  comm::TransportStats window_traffic;
  // Totals over the whole run (all generations).
  double compute_s = 0;
  double samples_total = 0;
  // Counters of the generations that ended before the current one
  // (elastic; zero for a fixed world). Conclude adds the current one's.
  PipelineStats finished_stats;
  comm::TransportStats finished_traffic;
  const Clock::time_point started = clock.Now();
  // When the first generation's training started: the metrics' clock
  // (Note [Training clock] in worker.cc).
  std::optional<Clock::time_point> training_started;

  // Elastic membership (worker_elastic.cc, frugal/engine/elastic_session.h):
  // the session holds the membership client, the snapshots and the leave
  // request; null for a fixed world. `generation` is the current one's
  // (number 0 for a fixed world).
  std::unique_ptr<ElasticSession> elastic;
  comm::Generation generation;
  std::atomic<bool> leave_signal{false};  // a fixed world's (nothing reads it)
  Clock::time_point left_world_at;  // when the last generation's loop ended
  std::optional<OuterStep> resumed_outer;  // Note [Outer step on resume]
  int64_t join_state_bytes = 0;  // rank 0: bytes of state sent to each joiner of this generation
  // Background checkpoint writes (Note [Background checkpoints]); the
  // snapshot and wait seconds of the write in flight, for its event.
  CheckpointWriter checkpoint_writer;
  double checkpoint_snapshot_s = 0;
  double checkpoint_wait_s = 0;

  int rank() const { return transport->rank(); }
  PipelineStats Stats() const { return sync->stats(); }
  Status Init();
  Status Prepare();
  Status BuildModel();
  Status PlanSteps();
  Status BuildSync(bool broadcast_initial = true);  // ReplicaOptions::broadcast_initial
  // --sync local's outer step for this run: the checkpoint's, for a resumed
  // run with --outer-lr auto (Note [Outer step on resume]); else OuterOf (an
  // elastic run's length follows its membership:
  // Note [Local mode across worlds]).
  OuterStep RunOuterStep() const {
    return resumed_outer ? *resumed_outer : RunOuterOf(config, total_steps);
  }
  Status OpenReporter();
  std::vector<torch::Tensor> Buffers(bool floating_only) const;
  Result<WorkerResult> Run();
  Result<LoopEnd> Loop();
  Result<LoopEnd> Gate(int64_t t, int64_t* evaluated_epoch);
  Result<double> ComputeStep(int64_t t, int64_t* samples);
  Status Evaluate(int64_t t, int64_t epoch);
  Status Record(int64_t t, int64_t epoch);
  Result<WorkerResult> Conclude(int64_t t, const comm::TransportStats& traffic_at_start);
  void PrintHeader() const;

  // worker_state.cc: run state as named sections (Note [Checkpoints]).
  Result<CheckpointSections> StateSections(int64_t t, StateScope scope);
  Status RestoreSections(CheckpointSections& shared, const CheckpointSections* mine, bool residuals,
                         const std::string& what);
  Status CheckpointGate(int64_t t);
  // Rank 0, and with per-site checkpoints each cluster's leader: the worker
  // that clears its checkpoint directory's leftovers at the start.
  bool ClearsCheckpoints() const;
  // --resume-from a per-site checkpoint (Note [Per-site checkpoints]): the
  // shared part and this rank's seat by its cluster.
  Status ResumeFromSites(const std::string& step_dir);
  Result<CheckpointSections> SharedPartFromSite(const CheckpointManifest& m, const std::string& step_name,
                                                int64_t step);
  Status SaveCheckpoint(int64_t t);
  Status ReportCheckpoint(bool wait);
  // BuildSync, and with --resume the checkpoint's state: rank 0's file
  // is read first, so that the strategy is built with its outer step
  // (AdoptOuterStep, Note [Outer step on resume]).
  Status BuildAndResume();
  Status AdoptOuterStep(const CheckpointSections& s, const std::string& what);

  // worker_elastic.cc
  Status EnterGeneration(const comm::Generation& g);
  Result<LoopEnd> MembershipCheck(int64_t t);
  Status TakeSnapshot(int64_t t);
  bool HasSnapshot(int64_t t) const { return elastic->HasSnapshot(t); }
  Status RestoreGeneration(const comm::Generation& g);
  void CloseGenerationCounters(const comm::TransportStats& traffic_at_start);
  WorkerResult LeftResult(int last_rank) const;
  void TearDown(bool abort);
  Result<WorkerResult> RunElastic();
};

}  // namespace frugal::engine
