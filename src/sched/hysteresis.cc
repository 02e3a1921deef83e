#include "hysteresis.h"

#include <algorithm>
#include <numeric>


namespace frugal::sched {

void DampReallocations(const ClusterSpec& spec, const std::vector<JobView>& jobs, double min_gain,
                       const std::function<double(size_t, int)>& rate, std::vector<int>* counts) {
  if (min_gain <= 0) return;
  std::vector<int>& n = *counts;
  int pool = spec.TotalGpus() - std::accumulate(n.begin(), n.end(), 0);
  std::vector<size_t> shrinking;
  for (size_t i = 0; i < jobs.size(); ++i) {
    int current = jobs[i].placement.NumGpus();
    if (current == 0 || n[i] == current || n[i] == 0) continue;
    if (n[i] < current) {
      shrinking.push_back(i);
      continue;
    }
    double now = rate(i, current);
    double next = rate(i, n[i]);
    double gain = next > 0 ? 1 - now / next : 0;
    if (gain < min_gain) {
      pool += n[i] - current;
      n[i] = current;
    }
  }
  std::stable_sort(shrinking.begin(), shrinking.end(), [&](size_t a, size_t b) {
    return jobs[a].placement.NumGpus() - n[a] < jobs[b].placement.NumGpus() - n[b];
  });
  for (size_t i : shrinking) {
    int deficit = jobs[i].placement.NumGpus() - n[i];
    if (deficit <= pool) {
      pool -= deficit;
      n[i] += deficit;
    }
  }
}

}  // namespace frugal::sched
