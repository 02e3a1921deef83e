// LocalSync: the local-update mode of a worker (--sync local), DiLoCo-style
// outer steps over Frugal's sparse, error-fed exchange. The Worker calls it
// instead of its Replica's pipeline, and so does the Python package's
// DistributedModel(sync="local") (python/src/replica.cc).
//
// Each worker keeps, per gradient bucket of the Replica's layout:
//   anchor   the parameters at the last sync (equal on every rank)
//   master   its own inner parameters (copied into the model after each step)
//   inner    the run's optimizer (SGD/Adam/AdamW, optim::SparseOptimizer
//            stepping densely), this rank's own state
//   outer    SGD with Nesterov momentum (--outer-lr, --outer-momentum)
// and one CompressedAllReduce (error-feedback residual + sparsifier state per
// bucket, the topology-aware SparseExchange).
//
// Per iteration t, on the compute thread:
//   BeginIteration(t): takes the outer steps due before t; then, if
//     local_steps / P inner steps were taken since the last sync point,
//     syncs the next of the P fragments (--local-fragments, default 1: the
//     whole model every local_steps; Note [Fragments] in local_sync.cc). By
//     default the exchange blocks, as below; with --local-overlap it runs on
//     a thread during the next inner steps and its outer step lands
//     --local-delay steps later (Note [Overlapped rounds]).
//   forward, backward (the model's .grad tensors)
//   EndBackward(t): inner step on master with lr_at(t); master -> model.
//     With --local-inner device (auto off the CPU) the model's own tensors
//     take the step on their device, and master is downloaded only when a
//     round needs it (Note [Inner steps on the device] in device_inner.cc).
// Blocking sync (one fragment, the round that ends before iteration t):
//   delta_b = anchor_b - master_b               (the pseudo-gradient)
//   delta_b <- CompressedAllReduce(delta_b)     (residual added, sparsified,
//               encoded, exchanged, decoded and averaged over the ranks)
//   outer step: anchor_b <- NesterovSGD(anchor_b, delta_b)
//   master_b <- anchor_b; model <- master
// Every rank applies the same merged bytes with the same outer state, so
// the anchors (and the models right after a sync) are bit-identical.
// Finish(t) takes the outer steps in flight and syncs a last, shorter round
// of every fragment with steps since its last sync, applied as a plain
// average (no outer step), so every run ends on identical replicas.
//
// With local_steps 1, density 1, fp32 values, outer lr 1 and outer momentum
// 0, a round is one synchronous step: the mean of the workers' inner updates
// (equal to the update of the mean gradient for SGD with or without momentum,
// which are linear), up to float rounding.
//
// Thread safety: one thread (the worker's compute thread) calls it; an
// overlapped fragment's exchange runs on a thread of its own (it touches
// only its fragment's slices), which only this object joins.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/status.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/engine/replica.h"
#include "frugal/engine/run_config.h"

namespace frugal::engine {

// Who takes the inner steps (Note [Inner steps by the caller] in
// local_sync.cc).
enum class InnerSteps {
  kOwn,     // EndBackward steps the run's optimizer (config.train), on the host or the device
  kCaller,  // the caller steps the model's tensors itself before EndBackward (a Python user's torch.optim
            // optimizer); LocalSync reads them at a round and never touches their gradients
};

class LocalSync {
 public:
  // params: the model's tensors in the layout's slot order. Broadcasts rank
  // 0's values to every rank (as the Replica does; not with
  // broadcast_initial false, for a state about to be restored,
  // Note [No broadcast on restore] in worker_elastic.cc) and copies them in.
  // lr_at(t): the inner learning rate of iteration t (with InnerSteps::kCaller
  // only the outer annealing reads it, Note [Outer annealing]).
  // REQUIRES: config.distributed.sync == SyncMode::kLocal, Validate(config)
  // Ok; the transport outlives this object.
  static Result<std::unique_ptr<LocalSync>> Create(const RunConfig& config, std::function<double(int64_t)> lr_at,
                                                   const BucketLayout& layout, std::vector<torch::Tensor> params,
                                                   comm::Transport* transport, bool broadcast_initial = true,
                                                   InnerSteps inner_steps = InnerSteps::kOwn);
  ~LocalSync();
  LocalSync(const LocalSync&) = delete;
  LocalSync& operator=(const LocalSync&) = delete;

  // Takes the outer steps due before iteration t (waiting for their
  // rounds); the model then holds the inner parameters. BeginIteration(t)
  // does it too; called first, it leaves the state "after t-1" with no
  // round in flight when t is a sync point (Note [State at rest] in
  // sync_strategy.h), so SaveSections then waits for nothing.
  Status Settle(int64_t t);
  // Settle(t), then starts the round that ended before iteration t if one
  // did; with check_replicas, then compares the anchors' checksums over the
  // ranks.
  Status BeginIteration(int64_t t, bool check_replicas);
  // The inner step of iteration t from the model's gradients (a parameter
  // without a gradient counts as zero); clears the gradients. With
  // InnerSteps::kCaller: records that the caller stepped the model's
  // tensors at iteration t (a step it skipped, as GradScaler does on a
  // non-finite gradient, counts the same).
  Status EndBackward(int64_t t);
  // Syncs the last round if it has steps; the model then holds the anchor.
  // t: the iteration count reached.
  Status Finish(int64_t t);
  // All-gathers the checksum of the anchor under t's tag; an error names
  // the ranks that differ.
  Result<uint64_t> CheckReplicas(int64_t t);

  // Runs fn with the anchor (the synced parameters) in the model, then puts
  // this rank's inner parameters back: evaluations see the global model.
  template <class F>
  auto OnAnchor(F&& fn) {
    CopyIn(/*anchor=*/true);
    auto result = fn();
    CopyIn(/*anchor=*/false);
    return result;
  }

  // Counters for the metrics: sparsify_s and exchange_s of the syncs,
  // optimizer_s of inner and outer steps, sent/total values of the syncs.
  PipelineStats stats() const;
  int64_t rounds() const;  // fragment syncs so far
  // anchor, master, base, sending, gradients, inner optimizer, outer
  // optimizer, residuals (Note [Host memory] in local_sync.cc).
  HostMemory host_memory() const;
  // Whether the inner steps run on the model's device
  // (Note [Inner steps on the device] in device_inner.cc; --local-inner); always with
  // InnerSteps::kCaller.
  bool inner_on_device() const;

  // Run state (Note [Local-update state] in local_sync.cc), as checkpoint
  // sections: "local_sync" (rank 0 only: anchors, outer state, round
  // counters) and "local_sync_own" (every rank: its inner parameters and
  // optimizer state, its residuals). With InnerSteps::kCaller the inner
  // optimizer's state is the caller's to save; the section then holds a
  // fresh state in its place.
  // Waits for a round in flight first (its merged pseudo-gradient is then
  // saved as pending).
  Status SaveSections(bool shared, CheckpointSections* sections);
  // Restores rank 0's shared section from `s`, and this rank's own part
  // from `own` (null: this rank starts the round from the anchor, with
  // fresh inner state and no residual). Without keep_residuals the own
  // part's exchange state (residuals, sparsifier states) is dropped: it
  // belongs to the rank and world it was saved in (a shard's owner, a
  // cluster's leader), Note [Local mode across worlds]. Corruption names
  // `what`.
  Status RestoreSections(const CheckpointSections& s, const std::vector<uint8_t>* own, const std::string& what,
                         bool keep_residuals = true);

  class Impl;

 private:
  explicit LocalSync(std::unique_ptr<Impl> impl);
  void CopyIn(bool anchor);
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::engine
