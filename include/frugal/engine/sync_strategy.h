// SyncStrategy: how the replicas of a distributed run stay in step. Each way
// of synchronising is one class behind this interface, built by one factory
// from the resolved run configuration, so the Worker's loop and its state
// code call the strategy and never ask which one it is:
//   - the step pipeline (--sync step): every iteration's gradients go
//     through the Replica's GradientPipeline (sparsify, exchange, CPU
//     optimizer), include/frugal/engine/replica.h;
//   - local updates (--sync local): inner steps on every rank, compressed
//     outer rounds every local_steps, include/frugal/engine/local_sync.h.
//   - site replicas (--sync site): local updates with one replica per
//     cluster, whose members average their gradients every step
//     (include/frugal/engine/cluster_average.h, Note [Site replicas]).
// A new way of synchronising is one new class and one line in
// CreateSyncStrategy.
//
// Both hold the Replica: the bucket layout of the parameters, rank 0's
// initial values broadcast, the model buffers' averaging and the parameters
// of a checkpoint are the same in every strategy.
//
// Per iteration t, on the thread that runs forward and backward:
//   BeginIteration(t, check)   the parameters forward t uses are in the model
//   forward, loss.backward()
//   EndBackward(t)
// and Finish(t) once the run is over, then CheckReplicas(t).
//
// Note [State at rest]
// A snapshot or checkpoint of iteration t holds the run's state "after
// t-1", saved where nothing in flight has to be waited for. The step mode
// reaches that point only in BeginIteration(t), which drains its pipeline.
// The local modes reach it earlier: once Settle(t) took the outer steps due
// before t, and before BeginIteration(t) starts the round that ends at t.
// With the default delay (a fragment's outer step lands when the next
// fragment syncs) no exchange is in flight there when t is a sync point, so
// the save copies the state and waits for no link; after BeginIteration(t)
// it would wait for t's whole round (Note [Elastic gates] in
// run_config.cc). Restoring it, BeginIteration(t) starts that round again.
// A save elsewhere in an iteration waits for the rounds in flight.
//
// Thread safety: one thread calls it, as for Replica and LocalSync.
// Lifetime: the transport outlives the strategy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/status.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/engine/replica.h"
#include "frugal/engine/run_config.h"

namespace frugal::engine {

// Which run state SaveState collects (Note [Checkpoints] in worker_state.cc).
//   kRank0File: rank 0's checkpoint file, the whole state shared by the
//               ranks plus rank 0's own part;
//   kOwnFile:   another rank's file, only its own part;
//   kSnapshot:  an elastic snapshot, the shared part and this rank's own
//               part apart (a joiner is sent only the shared part).
enum class StateScope { kRank0File, kOwnFile, kSnapshot };

class LocalSync;

// The checkpoint sections of each mode's run state and their restore, for a
// Replica or LocalSync that the strategies below hold and that
// frugal.DistributedModel holds (frugal.save / frugal.load): one copy of
// what a checkpoint of either mode contains (Note [Checkpoints] in
// worker_state.cc). The step mode: "pipeline" (rank 0: whole; kSnapshot:
// shared), "local" (this rank's residuals), "parameters". The local mode:
// LocalSync's sections, "parameters" and "outer_step". Restoring: rank 0's
// `shared` sections, this rank's own part from `mine` when given, else from
// `shared` with `residuals` (rank 0 restoring its own file). The local
// mode keeps a rank's own part as `own` says (Note [Local mode across
// worlds]), and reads the saved world and rank from the "meta" section
// (CheckpointMeta).
//
// Which restored ranks keep their own part (inner parameters and optimizer
// state since the round began, the exchange state); a rank that does not
// starts the round at the anchor with fresh inner state.
enum class OwnPart {
  kKeep,          // every rank that has one, in another world too (--sync local)
  kKeepSameSeat,  // only a rank restored into the world and rank it was saved in
  kDrop,          // none (--sync site in an elastic run: Note [Elastic site replicas])
};
Status SaveStepState(Replica& replica, StateScope scope, CheckpointSections* sections);
Status RestoreStepState(Replica& replica, const CheckpointSections& shared, const CheckpointSections* mine,
                        bool residuals, const std::string& what);
Status SaveLocalState(LocalSync& local, Replica& replica, OuterStep outer, StateScope scope,
                      CheckpointSections* sections);
Status RestoreLocalState(LocalSync& local, const comm::Transport& transport, const CheckpointSections& shared,
                         const CheckpointSections* mine, bool residuals, OwnPart own,
                         const std::string& what);

// What a joiner of a --sync local run rebuilds itself rather than receives
// from rank 0's snapshot (LocalRounds::PrepareForJoiners; the Python
// package's elastic local mode).
void SkipLocalStateForJoiners(std::set<std::string>* skip);
// The same for --sync step (StepSync::PrepareForJoiners; the Python
// package's elastic step mode): a joiner starts with empty residuals, and
// at staleness 0 sets its parameters from the masters (Note [Parameters
// from masters]).
void PrepareStepStateForJoiners(Replica& replica, CheckpointSections* snapshot, std::set<std::string>* skip);

// What a strategy is built from.
struct SyncInputs {
  RunConfig config;                      // REQUIRES: Validate Ok, sync resolved (SyncOf)
  std::function<double(int64_t)> lr_at;  // learning rate of iteration t
  OuterStep outer;                       // --sync local's outer step for this run (RunOuterOf)
  std::vector<std::pair<std::string, torch::Tensor>> params;  // the model's, in registration order
  comm::Transport* transport = nullptr;
  bool broadcast_initial = true;  // ReplicaOptions::broadcast_initial
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;

  // The parameters forward t uses are in the model; with check_replicas the
  // ranks then compare checksums of the synchronised state.
  virtual Status BeginIteration(int64_t t, bool check_replicas) = 0;
  // After backward of iteration t (a parameter without a gradient counts
  // as zero).
  virtual Status EndBackward(int64_t t) = 0;
  // Drains what is in flight; afterwards the model holds parameters equal
  // on every rank. t: the iteration count reached.
  virtual Status Finish(int64_t t) = 0;
  // All-gathers the checksum of the synchronised state under t's tag; an
  // error names the ranks that differ.
  virtual Result<uint64_t> CheckReplicas(int64_t t) = 0;
  // Runs fn with the parameters every rank shares in the model (for
  // evaluation), then puts this rank's own back.
  virtual Status WithSyncedParameters(const std::function<Status()>& fn) = 0;

  // Counters for the metrics records and the run's result.
  virtual PipelineStats stats() const = 0;
  // The exchange the strategy runs, for the run's header line.
  virtual comm::ExchangeAlgorithm exchange() const = 0;
  // A second header line describing the strategy's schedule ("" for none).
  virtual std::string Describe() const = 0;
  // The strategy's part of the progress line; `density` is the window's
  // share of values sent.
  virtual std::string Progress(double density) const = 0;
  // The pipeline a bandwidth controller steers (AdaptationProtocol), or null
  // where the strategy has none that a controller can steer.
  virtual GradientPipeline* pipeline() { return nullptr; }

  // Takes what is due before iteration t without starting t's own work,
  // where SavesBeforeBegin() (Note [State at rest]); BeginIteration(t)
  // follows.
  virtual Status Settle(int64_t) { return Status::Ok(); }
  // Whether the state at rest of t is after Settle(t), before
  // BeginIteration(t) (the local modes), or after BeginIteration(t).
  virtual bool SavesBeforeBegin() const { return false; }

  // Adds the strategy's run state to `sections` (the parameters included
  // for the shared scopes). REQUIRES: at the state at rest of an iteration
  // (Note [State at rest]).
  virtual Status SaveState(StateScope scope, CheckpointSections* sections) = 0;
  // Restores rank 0's shared sections `shared` and, if given, this rank's
  // own part `mine`; with `residuals` and no `mine`, this rank's own part
  // from `shared` (rank 0 restoring its own file). Corruption names `what`.
  // REQUIRES: before the first BeginIteration.
  virtual Status RestoreState(const CheckpointSections& shared, const CheckpointSections* mine, bool residuals,
                              const std::string& what) = 0;
  // Rank 0, before sending a snapshot to joiners: marks in `snapshot` and
  // adds to `skip` what a joiner rebuilds itself instead of receiving.
  virtual void PrepareForJoiners(CheckpointSections* snapshot, std::set<std::string>* skip) = 0;

  Replica& replica() { return *replica_; }
  const Replica& replica() const { return *replica_; }

 protected:
  explicit SyncStrategy(std::unique_ptr<Replica> replica) : replica_(std::move(replica)) {}

 private:
  std::unique_ptr<Replica> replica_;
};

// The strategy that inputs.config.distributed.sync names.
Result<std::unique_ptr<SyncStrategy>> CreateSyncStrategy(SyncInputs inputs);

}  // namespace frugal::engine
