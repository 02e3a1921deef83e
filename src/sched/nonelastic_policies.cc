// The non-elastic baselines: a job runs on exactly the GPUs it asked for, or
// waits. They differ only in the order in which jobs are considered.
#include <algorithm>
#include <numeric>

#include "placer.h"
#include "policies.h"

namespace frugal::sched {
namespace {

// Gives each job, in `order`, its requested GPUs if they are still free, in
// whole workers beside the jobs given theirs before it (PlaceableCounts,
// Note [Workers of several GPUs] in placer.cc).
// `strict`: stop at the first job that does not fit (no backfilling).
std::vector<Placement> AllocateInOrder(const ClusterView& cluster, const std::vector<JobView>& jobs,
                                       const std::vector<size_t>& order, bool strict) {
  PlaceableCounts counts(cluster.spec, jobs);
  for (size_t i : order) {
    int want = std::min(jobs[i].requested_gpus, cluster.spec.TotalGpus());
    if (!counts.TrySet(i, want) && strict) break;
  }
  return counts.Place();
}

std::vector<size_t> Indices(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// First come, first served, no preemption and no backfilling: a big job at
// the head of the queue blocks everything behind it.
class FifoPolicy : public Policy {
 public:
  std::string Name() const override { return "fifo"; }
  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    std::vector<size_t> order = Indices(jobs.size());
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (jobs[a].submit_time != jobs[b].submit_time) return jobs[a].submit_time < jobs[b].submit_time;
      return jobs[a].id < jobs[b].id;
    });
    return AllocateInOrder(cluster, jobs, order, /*strict=*/true);
  }
};

// Shortest remaining time first with oracle knowledge of the remaining work,
// at the requested GPU count; preemptive, with backfilling.
class SrtfPolicy : public Policy {
 public:
  std::string Name() const override { return "srtf"; }
  bool UsesOracle() const override { return true; }
  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    std::vector<double> remaining(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      double rate = CompactRate(jobs[i], jobs[i].requested_gpus, cluster.spec.gpus_per_node);
      remaining[i] = rate > 0 ? jobs[i].remaining_progress / rate : 1e300;
    }
    std::vector<size_t> order = Indices(jobs.size());
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (remaining[a] != remaining[b]) return remaining[a] < remaining[b];
      return jobs[a].id < jobs[b].id;
    });
    return AllocateInOrder(cluster, jobs, order, /*strict=*/false);
  }
};

// Tiresias' discretised two-dimensional least-attained-service: attained
// service is GPU-seconds (GPUs x time, the two dimensions); jobs below the
// threshold sit in the high-priority queue, the rest in the low one; each
// queue is FIFO by submission. Preemptive, with backfilling, no oracle. With
// two queues and FIFO inside each, the order is a pure function of attained
// service, so no state is kept between rounds.
class TiresiasPolicy : public Policy {
 public:
  explicit TiresiasPolicy(double threshold) : threshold_(threshold) {}
  std::string Name() const override { return "tiresias"; }
  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    std::vector<size_t> order = Indices(jobs.size());
    auto queue = [&](size_t i) { return jobs[i].attained_service >= threshold_ ? 1 : 0; };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (queue(a) != queue(b)) return queue(a) < queue(b);
      if (jobs[a].submit_time != jobs[b].submit_time) return jobs[a].submit_time < jobs[b].submit_time;
      return jobs[a].id < jobs[b].id;
    });
    return AllocateInOrder(cluster, jobs, order, /*strict=*/false);
  }

 private:
  double threshold_;
};

}  // namespace

std::unique_ptr<Policy> NewFifoPolicy() { return std::make_unique<FifoPolicy>(); }
std::unique_ptr<Policy> NewSrtfPolicy() { return std::make_unique<SrtfPolicy>(); }
std::unique_ptr<Policy> NewTiresiasPolicy(double threshold_gpu_seconds) {
  return std::make_unique<TiresiasPolicy>(threshold_gpu_seconds);
}

}  // namespace frugal::sched
