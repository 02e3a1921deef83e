// frugal::engine::Replica: one rank's model replica inside Frugal's pipeline.
// It owns the parts of a distributed worker that touch the model's
// parameters, and nothing else (no data, no loop, no logging), so the C++
// Worker and the Python DistributedModel share it:
//   - BucketLayout: parameters packed into flat gradient buckets, in reverse
//     registration order (the order backward produces their gradients);
//   - autograd hooks that copy each gradient into its bucket and submit a
//     bucket to the GradientPipeline once it is complete;
//   - ReplicaSync: rank 0's initial values broadcast to every rank, replica
//     checksums, averaging of non-gradient buffers (batch norm).
//
// Per iteration t, on the thread that runs forward and backward:
//   BeginIteration(t)  -> the params hold the version after t-1-staleness
//   forward, loss.backward()    (hooks hand gradients to the pipeline)
//   EndBackward()       -> params that got no gradient contribute zeros
// and Finish() at the end. This header uses LibTorch.
//
// Thread safety: one thread drives a Replica; its pipeline owns CPU threads.
// Lifetime: the transport must outlive the replica; the replica keeps the
// parameter tensors (shared storage with the user's module) alive.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/status.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/engine/run_config.h"

namespace frugal::engine {

struct ReplicaOptions {
  PipelineOptions pipeline;                  // sparsifier, density, wire, staleness, optimizer, exchange, lr_at
  double bucket_mb = 4.0;                    // bucket capacity in MB of fp32; a parameter is never split
  std::chrono::milliseconds timeout{60000};  // bound on every control message wait
  bool overlap_device_copies = true;         // Note [Gradients off the GPU] (device_copier.h)
  // Every replica starts from rank 0's parameters, sent to all at Create.
  // false skips that broadcast, for a caller that loads the same state into
  // every rank right after (an elastic generation's restore,
  // Note [No broadcast on restore] in worker_elastic.cc).
  bool broadcast_initial = true;
  // false: the replica validates and packs the parameters (layout()) but
  // builds no pipeline, registers no hooks and sends nothing at Create: the
  // local modes, whose LocalSync keeps the round's state and broadcasts the
  // initial values itself (Note [Replica without a pipeline] in replica.cc).
  // The methods that step the pipeline then fail with InvalidArgument.
  bool gradient_pipeline = true;
  // The step pipeline's optimizer per parameter, in the order given to
  // Create (a torch optimizer's parameter groups, read by
  // frugal.DistributedModel): each entry's options and lr_factor (its
  // size is ignored: the parameter's). Empty: pipeline.optimizer
  // for every parameter. Adjacent parameters of a bucket with equal entries
  // share one segment (Note [Segmented optimizer] in sparse_optimizer.cc).
  std::vector<optim::OptimizerSegment> parameter_optimizers;
};

// The replica's options from a run configuration (the C++ worker and the
// Python DistributedModel both build them here); lr_at gives the learning
// rate of iteration t. A local-update mode (IsLocalUpdates) gets no
// gradient pipeline. REQUIRES: Validate(config) is Ok.
ReplicaOptions MakeReplicaOptions(const RunConfig& config, std::function<double(int64_t)> lr_at);
// The run's optimizer settings (kind, lr, momentum, Adam's betas...).
optim::OptimizerOptions MakeOptimizerOptions(const train::TrainOptions& t);

// Where one parameter lives inside the flat buckets.
struct ParamSlot {
  std::string name;
  size_t bucket = 0;
  size_t offset = 0;  // in elements, inside the bucket
  size_t numel = 0;
};

// Parameters packed into buckets of at most `bucket_floats` values each, in
// reverse order of `numels`; a parameter larger than the capacity gets a
// bucket of its own. Pure function of its inputs, so every rank agrees.
struct BucketLayout {
  std::vector<ParamSlot> slots;                    // in the order given (registration order)
  std::vector<std::vector<size_t>> bucket_params;  // slot indices per bucket
  std::vector<size_t> bucket_sizes;                // values per bucket
  std::vector<std::string> bucket_names;           // "fc2.bias+fc2.weight"

  static BucketLayout Pack(const std::vector<std::pair<std::string, size_t>>& named_numels, size_t bucket_floats);
};

class Replica {
 public:
  // Validates the parameters (float32, one device, requires grad, distinct),
  // packs them into buckets, replaces their values by rank 0's (a broadcast,
  // as DDP does), builds the pipeline and registers the gradient hooks.
  static Result<std::unique_ptr<Replica>> Create(const ReplicaOptions& options,
                                                 std::vector<std::pair<std::string, torch::Tensor>> params,
                                                 comm::Transport* transport);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Waits for the parameters after iteration t-1-staleness and copies them
  // into the tensors. Iterations begin in order 0, 1, 2, ... With
  // check_replicas, the ranks also compare checksums of that version (an
  // all-gather) and a mismatch is an error naming both ranks.
  Status BeginIteration(int64_t t, bool check_replicas = false);
  // After backward of the current iteration: parameters that got no
  // gradient contribute zeros, so every bucket is submitted; returns a
  // hook's error (e.g. the pipeline failed) if there was one.
  Status EndBackward();
  // Waits until every submitted iteration is applied and copies the final
  // parameters in.
  Status Finish();

  // All-gathers the checksum of the last version copied in (BeginIteration
  // with check_replicas, or Finish) under `t`'s tag; returns it, or an error
  // naming the ranks that differ.
  Result<uint64_t> CheckReplicas(int64_t t);
  // Replaces every tensor in `buffers` by its mean over the ranks (summed in
  // rank order, so every replica gets identical values). Integer tensors
  // must not be passed. All ranks call it with the same t and shapes.
  Status AverageBuffers(int64_t t, const std::vector<torch::Tensor>& buffers);

  // Run state for a checkpoint: the pipeline's state after iteration t-1
  // (GradientPipeline::SaveState) and the parameters the forward of t uses
  // (version t-1-staleness). REQUIRES: right after BeginIteration(t).
  Result<std::vector<uint8_t>> SavePipelineState(
      GradientPipeline::StateParts parts = GradientPipeline::StateParts::kAll);
  std::vector<uint8_t> SaveParameters() const;
  // Restores both; the next BeginIteration is the saved t and keeps the
  // saved parameters. residuals = false: see GradientPipeline::LoadState.
  // REQUIRES: before the first BeginIteration.
  Status LoadState(const std::vector<uint8_t>& pipeline_state, const std::vector<uint8_t>& parameters, bool residuals);
  // The same, with the parameters set to the loaded masters: for a state
  // saved where ParametersAreMasters() held
  // (Note [Parameters from masters] in worker_elastic.cc).
  Status LoadStateWithMastersAsParameters(const std::vector<uint8_t>& pipeline_state, bool residuals);
  // Every parameter equals its master bit for bit (at staleness 0, right
  // after SavePipelineState or LoadState; at staleness 1 the parameters are
  // one update behind). REQUIRES: no iteration in flight.
  bool ParametersAreMasters() const;
  // After LoadState: this rank's residuals from its own (kLocal) state.
  Status LoadLocalState(const std::vector<uint8_t>& local_state);

  int64_t iteration() const;  // the iteration begun last
  size_t num_buckets() const;
  const BucketLayout& layout() const;
  GradientPipeline* pipeline();  // null without ReplicaOptions::gradient_pipeline
  comm::Transport& transport();

  class Impl;

 private:
  explicit Replica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The all-gather checks the engine runs over a transport (torch-free
// payloads). Exposed for the Worker and tests.
//
// Every rank sends `digest`; an error names the first rank whose digest
// differs from this one's.
Status CheckSameConfiguration(comm::Transport& transport, uint64_t digest, std::chrono::milliseconds timeout);

// The model's buffers (batch-norm statistics, ...) as a checkpoint's
// "buffers" section, each buffer's bytes in order; RestoreBuffers copies
// them back into buffers of the same sizes (Corruption naming `what`
// otherwise). The CLI's workers and frugal.save/load write the same section.
std::vector<uint8_t> SaveBuffers(const std::vector<torch::Tensor>& buffers);
Status RestoreBuffers(const std::vector<uint8_t>& section, const std::vector<torch::Tensor>& buffers,
                      const std::string& what);

}  // namespace frugal::engine
