// GradientPipeline: the CPU side of one worker of a distributed run
// (torch-free). For every gradient bucket of every iteration it runs, on CPU
// threads:
//   the compressed collective (collective::CompressedCollective: error
//   feedback + sparsify -> encode -> exchange -> decode and merge ->
//   average) -> sparse optimizer step on the CPU master copy
// and it gates the compute thread so the forward of iteration t uses exactly
// the parameters after iteration t-1-s (s = staleness, 0 or 1).
// See Note [Pipeline and staleness] in gradient_pipeline.cc and the diagram
// in docs/architecture.md.
//
// Use from the compute thread, per iteration t:
//   BeginIteration(t, copy_out)   // waits, then copy_out(b, master_b) per bucket
//   ... forward, backward; as bucket b's gradient is ready:
//   GradBuffer(b, t) <- gradient;  Submit(b, t);
// and at the end Finish(copy_out).
//
// Thread safety: BeginIteration, GradBuffer, Submit, Finish and Checksum are
// called from one compute thread; stats() from any thread. An error on a CPU
// thread (exchange timeout, NaN gradient) is sticky: the next call on the
// compute thread returns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/collective/compressed_collective.h"
#include "frugal/comm/algorithms/sparse_exchange.h"
#include "frugal/comm/transport/transport.h"
#include "frugal/common/span.h"
#include "frugal/common/stat_list.h"
#include "frugal/common/status.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/optim/sparse_optimizer.h"

namespace frugal::engine {

struct BucketSpec {
  std::string name;            // e.g. "fc2.weight+fc2.bias", used in errors
  std::vector<float> initial;  // initial parameters (the master copy starts here)
  // The optimizer settings of consecutive ranges of the bucket (parameter
  // groups, optim::CreateSegmentedOptimizer; sizes summing to initial's).
  // Empty: PipelineOptions::optimizer for the whole bucket.
  std::vector<optim::OptimizerSegment> optimizer_segments;
};

// Filled from the resolved run configuration (MakeReplicaOptions); it has no
// defaults of its own: a value-initialised struct has density 0, which Create
// refuses, and no learning-rate schedule.
struct PipelineOptions {
  compress::SparsifierKind sparsifier{};  // block-id encodings need kBlock
  double density = 0;                     // fraction of each bucket sent per step, in (0, 1]
  int64_t density_warmup_steps = 0;       // see WarmupDensity; 0 = off
  uint64_t dense_bucket_max = 0;          // buckets of at most this many values are sent whole (WholeBuckets)
  double whole_bucket_share = 0;          // the smallest buckets, together at most this share of the values, too
  compress::WireFormat wire;
  int staleness = 0;                      // 0 or 1
  int cpu_threads = 0;                    // threads running bucket tasks, >= 1
  float dgc_momentum = 0;                 // error-feedback momentum correction; 0 = off
  optim::OptimizerOptions optimizer;      // lr is replaced per iteration by lr_at
  // Algorithm (flat, hierarchical or sharded: collective::CompressedCollective)
  // and per-wait timeout.
  comm::ExchangeOptions exchange;
  // Hierarchical: how a cluster leader forms its cluster's message
  // (Note [Leader residual] in src/collective/compressed_collective.cc).
  collective::LeaderMode leader{};
  uint64_t seed = 0;                      // the sparsifiers' seeds (randomk) start here
  // Learning rate for iteration t (a pure function so all workers agree).
  std::function<double(int64_t)> lr_at;
};

// Host memory a synchronisation holds, by buffer: (name, bytes) in a fixed
// order, for the metrics and the memory benchmark (Note [Host memory] in
// local_sync.cc).
using HostMemory = std::vector<std::pair<std::string, uint64_t>>;

// Cumulative seconds and counts of a rank's synchronisation (the step
// pipeline's, or the local mode's rounds'), for metrics and stats().
struct PipelineStats {
  double sparsify_s = 0;
  double exchange_s = 0;
  double optimizer_s = 0;
  double wait_s = 0;
  uint64_t tasks = 0;
  uint64_t sent_values = 0;
  uint64_t total_values = 0;
  // merged_values / total_values is the merged density, which the planner's
  // exchange model needs (Note [Selections overlap] in
  // src/sim/frugal_pipeline.cc).
  uint64_t merged_values = 0;
  // L1 mass this worker could have sent (residual + gradient) and sent,
  // summed over bucket-iterations (Note [Deferred mass] in
  // src/compress/error_feedback.cc); then the same in squared L2.
  double held_mass = 0;
  double sent_mass = 0;
  double held_sq = 0;
  double sent_sq = 0;

  // The one list of these counters (common/stat_list.h): Python's stats()
  // keys, and their sum over an elastic run's generations.
  template <class V>
  static void VisitStats(V&& visit) {
    visit(Stat("sparsify_s", "s", "error feedback, selection and encode").Sum(), &PipelineStats::sparsify_s);
    visit(Stat("exchange_s", "s", "the exchange, with the leaders' and shard owners' work").Sum(),
          &PipelineStats::exchange_s);
    visit(Stat("optimizer_s", "s", "decode, merge and scale, and the sparse optimizer step").Sum(),
          &PipelineStats::optimizer_s);
    visit(Stat("wait_s", "s", "the compute thread blocked at the start of an iteration").Sum(), &PipelineStats::wait_s);
    visit(Stat("tasks", "", "bucket-iterations applied (the local mode: its reductions)").Sum(), &PipelineStats::tasks);
    visit(Stat("sent_values", "values", "coordinates this worker contributed").Sum(), &PipelineStats::sent_values);
    visit(Stat("total_values", "values", "coordinates it could have contributed").Sum(), &PipelineStats::total_values);
    visit(Stat("merged_values", "values", "coordinates of the merged updates applied").Sum(),
          &PipelineStats::merged_values);
    visit(Stat("held_mass", "", "L1 mass it could have sent (residual and gradient)").Sum(), &PipelineStats::held_mass);
    visit(Stat("sent_mass", "", "L1 mass it sent").Sum(), &PipelineStats::sent_mass);
    visit(Stat("held_sq", "", "squared L2 norm it could have sent").Sum(), &PipelineStats::held_sq);
    visit(Stat("sent_sq", "", "squared L2 norm it sent").Sum(), &PipelineStats::sent_sq);
  }
};

using CopyOutFn = std::function<void(size_t bucket, Span<const float> master)>;

class GradientPipeline {
 public:
  // REQUIRES: transport outlives the pipeline; buckets non-empty.
  static Result<std::unique_ptr<GradientPipeline>> Create(PipelineOptions options, std::vector<BucketSpec> buckets,
                                                          comm::Transport* transport);
  ~GradientPipeline();
  GradientPipeline(const GradientPipeline&) = delete;
  GradientPipeline& operator=(const GradientPipeline&) = delete;

  size_t num_buckets() const;
  size_t bucket_size(size_t b) const;

  // Waits until every bucket has applied iteration t-1-s, then calls
  // copy_out for every bucket with the master parameters (under the bucket's
  // lock: the master is exactly the post-(t-1-s) version). Iterations must be
  // begun in order 0, 1, 2, ... With want_checksum, Checksum() afterwards
  // fingerprints exactly the copied version (costs one pass over the masters).
  Status BeginIteration(int64_t t, const CopyOutFn& copy_out, bool want_checksum = false);

  // Where the gradient of bucket b for iteration t goes before Submit.
  // REQUIRES: BeginIteration(t) returned Ok.
  Span<float> GradBuffer(size_t b, int64_t t);
  // Hands bucket b of iteration t to the CPU threads.
  Status Submit(size_t b, int64_t t);

  // Waits until everything submitted is applied, then calls copy_out for
  // every bucket with the final master parameters.
  Status Finish(const CopyOutFn& copy_out);

  // Calls visit for every bucket with its master parameters, under the
  // bucket's lock. REQUIRES: no iteration in flight (right after SaveState
  // or LoadState).
  void VisitMasters(const CopyOutFn& visit) const;

  // FNV-1a 64 of the master parameters copied by the last Finish or
  // BeginIteration(want_checksum = true): a version every worker agrees on.
  uint64_t Checksum() const;

  PipelineStats stats() const;
  // masters, gradient slots, residuals, optimizer state.
  HostMemory host_memory() const;

  // From iteration t on (tasks of iterations >= t), sparsify at `density`
  // and multiply the learning rate by `lr_scale`. Calls must not go back in
  // time. The controller's decisions arrive here; every worker makes the
  // same call with the same t, so all switch at exactly that iteration.
  Status SetFrom(int64_t t, double density, double lr_scale);

  // The pipeline's run state as bytes: the iteration it is at, the
  // controller's settings, and per bucket the master parameters, the
  // error-feedback residual, the sparsifier state and the optimizer state.
  // REQUIRES: on the compute thread, right after BeginIteration(t) and
  // before any Submit of t. It first waits until every submitted iteration
  // (t-1 with staleness 1) is applied, so the state is "after t-1".
  // kShared: settings, masters, optimizer state (equal on every rank);
  // kLocal: residuals and sparsifier states (this rank's own).
  enum class StateParts { kAll, kShared, kLocal };
  Result<std::vector<uint8_t>> SaveState(StateParts parts = StateParts::kAll);
  // Restores SaveState's bytes; the next BeginIteration is then the saved t.
  // With residuals = false the error-feedback residuals and sparsifier
  // states start empty (an elastic restart with another world size, where
  // this rank's residual does not exist). REQUIRES: before the first
  // BeginIteration. Corruption on malformed bytes or another bucket layout.
  // The bytes must hold the shared part; their local part is used when
  // present and residuals is true.
  Status LoadState(const std::vector<uint8_t>& bytes, bool residuals = true);
  // After LoadState: this rank's residuals and sparsifier states from a
  // kLocal (or kAll) state of the same step.
  Status LoadLocalState(const std::vector<uint8_t>& bytes);

  class Impl;

 private:
  explicit GradientPipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Tags of the engine's messages. Gradient buckets use GradientTag; control
// messages (checksums, batch-norm statistics) use ControlTag, in a disjoint
// range.
comm::Tag GradientTag(int64_t iteration, size_t bucket, size_t num_buckets);

// The density iteration t sparsifies at, given the density in force and the
// warm-up length W (DGC's warm-up, Note [Density warm-up] in adaptation.cc): for t < W it falls
// geometrically from kWarmupStartDensity (or `density`, if larger) at t = 0
// to `density` at t = W; from W on, and with W = 0, it is `density`.
inline constexpr double kWarmupStartDensity = 0.25;
double WarmupDensity(double density, int64_t t, int64_t warmup_steps);
// Which buckets are sent whole every step (Note [Small buckets whole] in
// adaptation.cc): those of at most dense_bucket_max values, and the smallest
// ones while together they hold at most `share` of all values (ties in size
// broken by position, so every rank picks the same set).
std::vector<bool> WholeBuckets(const std::vector<uint64_t>& bucket_values, double share, uint64_t dense_bucket_max);
comm::Tag ControlTag(int64_t iteration, uint32_t kind);

}  // namespace frugal::engine
