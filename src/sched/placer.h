// Turns per-job GPU counts into node placements. Shared by all policies so
// they pack the same way: a job whose count is unchanged keeps its GPUs (a
// move would cost a re-allocation); the others are placed largest first, each
// as compactly as the free GPUs allow (best fit inside one node, else as few
// nodes as possible).
#pragma once

#include <vector>

#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"

namespace frugal::sched {

// REQUIRES: counts.size() == jobs.size(), sum(counts) <= spec.TotalGpus(), and
// the jobs' current placements fit the cluster without overlap.
std::vector<Placement> PlaceJobs(const ClusterSpec& spec, const std::vector<JobView>& jobs,
                                 const std::vector<int>& counts);

// Progress rate of `job` on the compact shape of `gpus` GPUs (0 for 0 GPUs).
double CompactRate(const JobView& job, int gpus, int gpus_per_node);

}  // namespace frugal::sched
