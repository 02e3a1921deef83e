// Scheduling policies: given the cluster and the active jobs (each with its
// current placement), decide the new placement of every job.
//
// A policy is a pure function of what it is shown: it keeps no state between
// calls and never reads a clock, so the same object drives the trace-driven
// simulator and a live scheduler service. Everything a real scheduler can
// observe is in JobView; the oracle field is filled only for policies that
// declare UsesOracle().
//
// Thread safety: Schedule() is const and may be called concurrently, but the
// SpeedEstimate objects referenced by the views need not be thread-safe.
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sched/cluster.h"

namespace frugal::sched {

// A job's current speed: statistical progress per second on a given shape.
// The simulator answers from the application's throughput and convergence
// models; a live service answers from measured and fitted step times.
class SpeedEstimate {
 public:
  virtual ~SpeedEstimate() = default;
  // Progress units per second on `shape`; 0 for an empty shape or a shape the
  // job cannot run on.
  virtual double ProgressRate(const Shape& shape) const = 0;
  // Progress units per second on `shape` if the job ran with global batch
  // `batch_size` instead of its current one. Only batch-adaptive policies ask;
  // the default ignores the batch.
  virtual double ProgressRateAt(const Shape& shape, int batch_size) const { return ProgressRate(shape); }
};

// What the scheduler knows about one active (submitted, unfinished) job.
struct JobView {
  int64_t id = 0;
  double submit_time = 0;
  int requested_gpus = 1;    // What the user asked for; non-elastic policies use it.
  int max_gpus = 1;          // Most GPUs the job can use at its current batch.
  // GPUs one worker process of the job takes (REQUIRES: >= 1). A worker never
  // spans nodes, so every node share of the job's placement is a multiple of
  // it, and so are requested_gpus, max_gpus and max_gpus_at_max_batch (a
  // policy rounds the last two down); see Note [Workers of several GPUs] in
  // src/sched/placer.cc.
  int gpus_per_worker = 1;
  int batch_size = 1;        // Current global batch size.
  // Range a batch-adaptive policy may choose from (both = batch_size when the
  // application's statistical efficiency is unknown), and the most GPUs the
  // job can use at max_batch_size.
  int min_batch_size = 1;
  int max_batch_size = 1;
  int max_gpus_at_max_batch = 1;
  double attained_service = 0;  // GPU-seconds held so far (includes restarts).
  double progress = 0;          // Statistical progress made so far.
  // Oracle: progress still needed to finish. NaN unless the policy UsesOracle().
  double remaining_progress = std::numeric_limits<double>::quiet_NaN();
  Placement placement;          // Current placement (empty if none).
  const SpeedEstimate* speed = nullptr;  // Not owned; valid during Schedule().
  // Past its last step, only finishing (final evaluation, saving): keeps
  // `placement` whatever the policy says (DecideRound, Note [Held jobs]).
  // Set by Hold(), which also caps the sizes so policies plan around it.
  bool hold = false;

  void Hold() {
    hold = true;
    max_gpus = requested_gpus = max_gpus_at_max_batch = placement.NumGpus();
  }
};

struct ClusterView {
  ClusterSpec spec;
  double now = 0;  // Seconds; for policies that age jobs (afs-goodput-2q with promote_knob > 0).
};

// afs-goodput-2q: how long jobs share the GPUs short jobs leave;
// see Note [Long queue order] in src/sched/afs_policy.cc.
enum class LongQueueOrder {
  kAfs,         // The AFS rule among long jobs (processor sharing).
  kSubmission,  // Oldest first: each long job takes all it can use before the next.
};

// Tunables; each policy reads the ones it needs.
struct PolicyOptions {
  // Tiresias: attained GPU-seconds after which a job is demoted from the high
  // to the low priority queue (Pollux artifact: 16 GPU-hours).
  double tiresias_threshold_gpu_seconds = 16 * 3600.0;
  // AFS-P, afs-goodput: a job that has made no progress yet is assumed to
  // have this many seconds (at one GPU) of work left;
  // see Note [AFS-P estimator] in src/sched/afs_policy.cc.
  double afsp_prior_seconds = 600;
  // AFS policies: seconds a job loses when its allocation changes (the
  // simulator's re-allocation cost) and the horizon over which a new
  // allocation is expected to last. A running job is only resized when that
  // raises its throughput by more than cost / horizon (0 horizon disables);
  // see Note [Hysteresis] in src/sched/hysteresis.h.
  double reallocation_cost = 30;
  double stickiness_horizon = 600;
  // AFS-P, afs-goodput: while GPUs are contended, a resize of a running job
  // is valued over at most this many seconds (one scheduling round), i.e. it
  // must raise the job's throughput by more than reallocation_cost / this;
  // GPUs nobody takes that way are handed out valuing resizes over the job's
  // estimated remaining time. See Note [Switch cost] in
  // src/sched/afs_policy.cc; reallocation_cost = 0 disables both.
  double contended_horizon = 60;
  // afs-goodput-2q: a job whose estimated work (one-GPU seconds,
  // Note [AFS-P estimator]) reaches this is long and gets GPUs only after every
  // short job has all it can use (64 x afsp_prior_seconds); see Note [Two queues]
  // in src/sched/afs_policy.cc.
  double long_job_seconds = 38400;
  // afs-goodput-2q: how long jobs share what short jobs leave.
  LongQueueOrder long_queue_order = LongQueueOrder::kAfs;
  // afs-goodput-2q: a long job whose service so far, in seconds at the GPUs
  // it asked for (attained_service / requested_gpus), is at most
  // 1 / (1 + promote_knob) of its time in the system is promoted back to the
  // short queue (0 disables). See Note [Promotion] in src/sched/afs_policy.cc.
  double promote_knob = 0;
  // afs-goodput-2q: a job whose count does not fit its compact number of nodes
  // in the free GPUs may take fewer GPUs on fewer nodes, or keep its current
  // ones, where that runs faster than spreading out. See
  // Note [Fit-aware placement] in src/sched/placer.cc.
  bool fit_aware_placement = true;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string Name() const = 0;
  // True if the policy reads JobView::remaining_progress.
  virtual bool UsesOracle() const { return false; }
  // Returns one placement per job, index-aligned with `jobs`. The result never
  // holds more GPUs on a node than it has, gives each job a multiple of its
  // gpus_per_worker on every node, and never gives a job more than its
  // max_gpus (max_gpus_at_max_batch for batch-adaptive policies), or, for
  // non-elastic policies, anything but 0 or requested_gpus.
  virtual std::vector<Placement> Schedule(const ClusterView& cluster,
                                          const std::vector<JobView>& jobs) const = 0;
  // Batch sizes for the placements Schedule() chose: one per job, each in
  // [min_batch_size, max_batch_size], or an empty vector to keep every job's
  // batch (the default; only goodput-aware policies adapt batch sizes).
  virtual std::vector<int> ChooseBatchSizes(const ClusterView& cluster, const std::vector<JobView>& jobs,
                                            const std::vector<Placement>& placements) const {
    return {};
  }
};

// The batch sizes a batch-adaptive policy considers for `job`: a geometric
// grid (ratio ~sqrt 2) over [min_batch_size, max_batch_size] plus the job's
// current batch; just the current batch for non-adaptive jobs.
std::vector<int> BatchSizeCandidates(const JobView& job);

// "fifo", "srtf", "tiresias", "optimus", "afs-l", "afs-p", "afs-goodput",
// "afs-goodput-2q".
std::vector<std::string> PolicyNames();

// InvalidArgument naming the known policies if `name` is unknown.
Result<std::unique_ptr<Policy>> CreatePolicy(const std::string& name,
                                             const PolicyOptions& options = {});

}  // namespace frugal::sched
