// Damps allocation churn of elastic policies. Internal to src/sched.
//
// Note [Hysteresis]: elastic policies re-divide the cluster from scratch every
// round, and small changes in their inputs (a job finishing, an estimate
// drifting) move GPUs between running jobs for marginal gains. Every move
// costs the job a re-allocation (30 s without progress by default), which on
// the Pollux workloads added hundreds of re-allocations per workload. So,
// after a policy has chosen counts:
//   1. a running job that would grow by less than `min_gain` in relative
//      throughput keeps its current count, returning the GPUs to a pool;
//   2. running jobs that would shrink (but keep running) are restored to their
//      current count from the pool, smallest shrink first;
// GPUs left in the pool stay idle until the next round: a growth below
// `min_gain` loses more progress to the restart than it wins over the horizon.
// Starting and preempting jobs is left as the policy decided.
#pragma once

#include <functional>
#include <vector>

#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"

namespace frugal::sched {

// REQUIRES: counts->size() == jobs.size(), sum(*counts) <= spec.TotalGpus().
// Keeps that sum within the cluster. Every count it leaves is the policy's or
// the job's current one, so counts in whole workers stay so
// (Note [Workers of several GPUs] in placer.cc).
// `rate(job index, gpus)`: the throughput the policy assumes.
void DampReallocations(const ClusterSpec& spec, const std::vector<JobView>& jobs, double min_gain,
                       const std::function<double(size_t, int)>& rate, std::vector<int>* counts);

}  // namespace frugal::sched
