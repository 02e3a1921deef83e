// Optimus (Peng et al., EuroSys 2018), adapted to GPUs: every job first gets
// its first growth step (shortest remaining time first while GPUs last), then
// each further step goes to the job whose remaining time drops the most per
// GPU (Note [Growth step]). Uses the oracle remaining work, and the throughput
// of the compact placement.
#include <algorithm>
#include <queue>
#include <tuple>

#include "elastic_step.h"
#include "placer.h"
#include "policies.h"

namespace frugal::sched {
namespace {

class OptimusPolicy : public Policy {
 public:
  std::string Name() const override { return "optimus"; }
  bool UsesOracle() const override { return true; }

  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    const int g = cluster.spec.gpus_per_node;
    // Note [Workers of several GPUs]: a step is taken only where it is placed
    // in whole workers.
    PlaceableCounts counts(cluster.spec, jobs);
    std::vector<GrowthStep> steps(jobs.size());
    // (tier, score, -index): tier 1 = a job's first step (score = -remaining
    // time after it), tier 0 = growth (score = remaining-time reduction per GPU).
    using Entry = std::tuple<int, double, long>;
    std::priority_queue<Entry> heap;
    auto push = [&](size_t i) {
      const int unit = WorkerGpus(jobs[i]);
      int cap = std::min(jobs[i].max_gpus, cluster.spec.TotalGpusInWorkers(unit));
      double rate = CompactRate(jobs[i], counts.count(i), g);
      steps[i] = NextGrowthStep(counts.count(i), cap, g, unit, rate, [&](int n) { return CompactRate(jobs[i], n, g); });
      if (steps[i].k == 0) return;
      double rem = jobs[i].remaining_progress;
      if (counts.count(i) == 0) {
        heap.emplace(1, -rem / steps[i].rate_next, -static_cast<long>(i));
      } else {
        double gain = (rem / steps[i].rate_now - rem / steps[i].rate_next) / steps[i].k;
        if (gain > 0) heap.emplace(0, gain, -static_cast<long>(i));
      }
    };
    for (size_t i = 0; i < jobs.size(); ++i) push(i);
    while (counts.free() > 0 && !heap.empty()) {
      size_t i = static_cast<size_t>(-std::get<2>(heap.top()));
      heap.pop();
      // Cannot take its next step any more.
      if (!counts.TrySet(i, counts.count(i) + steps[i].k)) continue;
      push(i);
    }
    return counts.Place();
  }
};

}  // namespace

std::unique_ptr<Policy> NewOptimusPolicy() { return std::make_unique<OptimusPolicy>(); }

}  // namespace frugal::sched
