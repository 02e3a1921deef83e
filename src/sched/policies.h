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
std::unique_ptr<Policy> NewAfsPPolicy(double prior_seconds, double min_gain);
// AFS-P reasoning with each job's best batch size at every GPU count.
std::unique_ptr<Policy> NewAfsGoodputPolicy(double prior_seconds, double min_gain);

}  // namespace frugal::sched
