// Constructors of the built-in policies; CreatePolicy() in policy.h picks one
// by name. Internal to src/sched.
#pragma once

#include <memory>

#include "frugal/sched/policy.h"

namespace frugal::sched {

std::unique_ptr<Policy> NewFifoPolicy();
std::unique_ptr<Policy> NewSrtfPolicy();
std::unique_ptr<Policy> NewTiresiasPolicy(double threshold_gpu_seconds);
std::unique_ptr<Policy> NewOptimusPolicy();
// `min_gain`: see Note [Hysteresis] in hysteresis.h (0 disables).
std::unique_ptr<Policy> NewAfsLPolicy(double min_gain);
// Note [Switch cost] in afs_policy.cc; seconds = 0 disables it.
struct SwitchCost {
  double seconds = 0;             // Lost per resize of a running job.
  double contended_horizon = 0;   // Horizon of the contended pass.
};
std::unique_ptr<Policy> NewAfsPPolicy(double prior_seconds, double min_gain, SwitchCost switch_cost);
// AFS-P reasoning with each job's best batch size at every GPU count.
std::unique_ptr<Policy> NewAfsGoodputPolicy(double prior_seconds, double min_gain, SwitchCost switch_cost);
// afs-goodput with two queues, Note [Two queues] in afs_policy.cc.
struct TwoQueues {
  double long_job_seconds = 0;                        // 0: one queue.
  LongQueueOrder long_order = LongQueueOrder::kAfs;   // Note [Long queue order].
  double promote_knob = 0;                            // Note [Promotion]; 0 disables.
  bool fit_aware_placement = true;                    // Note [Fit-aware placement] (placer.cc).
};
// REQUIRES: queues.long_job_seconds > 0.
std::unique_ptr<Policy> NewAfsGoodputTwoQueuePolicy(double prior_seconds, double min_gain, SwitchCost switch_cost,
                                                    TwoQueues queues);

}  // namespace frugal::sched
