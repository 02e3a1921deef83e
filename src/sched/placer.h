// Turns per-job GPU counts into node placements. Shared by all policies so
// they pack the same way: a job whose count is unchanged keeps its GPUs (a
// move would cost a re-allocation); the others are placed largest first, each
// as compactly as the free GPUs allow (best fit inside one node, else as few
// nodes as possible; optionally fit-aware, see RateOn), in whole workers
// (Note [Workers of several GPUs] in placer.cc).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"

namespace frugal::sched {

// The job's unit: GPUs one worker takes (at least 1).
inline int WorkerGpus(const JobView& job) { return std::max(job.gpus_per_worker, 1); }

// `gpus` rounded down to whole workers of `gpus_per_worker` GPUs.
inline int RoundDownToWorkers(int gpus, int gpus_per_worker) { return gpus / gpus_per_worker * gpus_per_worker; }

// REQUIRES: counts.size() == jobs.size(), sum(counts) <= spec.TotalGpus(), and
// the jobs' current placements fit the cluster without overlap, each node
// share a multiple of the job's gpus_per_worker.
// Returns one placement per job, every node share a multiple of the job's
// gpus_per_worker. Job i gets counts[i] GPUs (rounded down to whole workers)
// if `rate_on` is null and the free GPUs hold them in whole workers, else what
// they hold, possibly nothing (Note [Workers of several GPUs]); with one-GPU
// workers they always hold them.
// `rate_on(i, shape)`: job i's progress rate on `shape`; if given, a job that
// cannot have its count on its compact number of nodes may get fewer GPUs or
// keep its current ones, whichever `rate_on` rates highest
// (Note [Fit-aware placement] in placer.cc).
using RateOn = std::function<double(size_t, const Shape&)>;
std::vector<Placement> PlaceJobs(const ClusterSpec& spec, const std::vector<JobView>& jobs,
                                 const std::vector<int>& counts, const RateOn& rate_on = nullptr);

// Progress rate of `job` on the compact shape of `gpus` GPUs in its workers
// (CompactShape with its gpus_per_worker; 0 for 0 GPUs).
double CompactRate(const JobView& job, int gpus, int gpus_per_node);

// GPU counts a policy hands out one offer at a time, each accepted only if
// PlaceJobs() (without `rate_on`) still places every count given so far in
// full, so that no job is started or grown on GPUs it cannot get. Where every
// job's workers take one GPU the free total decides, as any count up to it
// fits; otherwise each offer re-runs PlaceJobs() on the counts so far
// (Note [Workers of several GPUs] in placer.cc). `spec` and `jobs` must
// outlive the object.
class PlaceableCounts {
 public:
  PlaceableCounts(const ClusterSpec& spec, const std::vector<JobView>& jobs);

  // Sets job i's count to `count` and returns true if every count still fits
  // (and `count` is whole workers); else changes nothing and returns false.
  bool TrySet(size_t i, int count);
  int count(size_t i) const { return counts_[i]; }
  int free() const { return free_; }  // GPUs not given out.
  // PlaceJobs(spec, jobs, counts): every job gets its count.
  std::vector<Placement> Place() const;

 private:
  const ClusterSpec& spec_;
  const std::vector<JobView>& jobs_;
  bool whole_workers_;  // Some job's workers take several GPUs.
  std::vector<int> counts_;
  int free_;
  std::vector<Placement> placed_;  // PlaceJobs of counts_ where whole_workers_.
};

}  // namespace frugal::sched
