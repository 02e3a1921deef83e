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
std::unique_ptr<Policy> NewAfsLPolicy();
std::unique_ptr<Policy> NewAfsPPolicy(double prior_seconds);

}  // namespace frugal::sched
