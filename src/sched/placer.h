// Turns per-job GPU counts into node placements. Shared by all policies so
// they pack the same way: a job whose count is unchanged keeps its GPUs (a
// move would cost a re-allocation); the others are placed largest first, each
// as compactly as the free GPUs allow (best fit inside one node, else as few
// nodes as possible; optionally fit-aware, see RateOn).
#pragma once

#include <functional>
#include <vector>

#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"

namespace frugal::sched {

// REQUIRES: counts.size() == jobs.size(), sum(counts) <= spec.TotalGpus(), and
// the jobs' current placements fit the cluster without overlap.
// Returns one placement per job, of counts[i] GPUs if `rate_on` is null.
// `rate_on(i, shape)`: job i's progress rate on `shape`; if given, a job that
// cannot have its count on its compact number of nodes may get fewer GPUs or
// keep its current ones, whichever `rate_on` rates highest
// (Note [Fit-aware placement] in placer.cc).
using RateOn = std::function<double(size_t, const Shape&)>;
std::vector<Placement> PlaceJobs(const ClusterSpec& spec, const std::vector<JobView>& jobs,
                                 const std::vector<int>& counts, const RateOn& rate_on = nullptr);

// Progress rate of `job` on the compact shape of `gpus` GPUs (0 for 0 GPUs).
double CompactRate(const JobView& job, int gpus, int gpus_per_node);

}  // namespace frugal::sched
