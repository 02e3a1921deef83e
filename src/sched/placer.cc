#include "placer.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <set>

namespace frugal::sched {
namespace {

// Nodes bucketed by their number of free GPUs, so best-fit and most-free
// lookups cost O(gpus_per_node) instead of O(num_nodes).
class FreeIndex {
 public:
  FreeIndex(const std::vector<int>& free, int gpus_per_node) : free_(free), buckets_(gpus_per_node + 1) {
    for (int n = 0; n < static_cast<int>(free_.size()); ++n) buckets_[free_[n]].insert(n);
  }
  // Lowest-id node among those with the fewest free GPUs >= want, or -1.
  int BestFit(int want) const {
    for (size_t f = std::max(want, 1); f < buckets_.size(); ++f) {
      if (!buckets_[f].empty()) return *buckets_[f].begin();
    }
    return -1;
  }
  // Lowest-id node among those with the most free GPUs, or -1 if all full.
  int MostFree() const {
    for (size_t f = buckets_.size() - 1; f >= 1; --f) {
      if (!buckets_[f].empty()) return *buckets_[f].begin();
    }
    return -1;
  }
  int Free(int node) const { return free_[node]; }
  void Take(int node, int gpus) {
    buckets_[free_[node]].erase(node);
    free_[node] -= gpus;
    assert(free_[node] >= 0);
    buckets_[free_[node]].insert(node);
  }

 private:
  std::vector<int> free_;
  std::vector<std::set<int>> buckets_;
};

}  // namespace

std::vector<Placement> PlaceJobs(const ClusterSpec& spec, const std::vector<JobView>& jobs,
                                 const std::vector<int>& counts) {
  assert(counts.size() == jobs.size());
  std::vector<Placement> out(jobs.size());
  std::vector<int> free(spec.num_nodes, spec.gpus_per_node);
  std::vector<size_t> to_place;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (counts[i] <= 0) continue;
    if (counts[i] == jobs[i].placement.NumGpus()) {
      out[i] = jobs[i].placement;
      for (const NodeShare& s : out[i].shares()) free[s.node] -= s.gpus;
    } else {
      to_place.push_back(i);
    }
  }
  FreeIndex index(free, spec.gpus_per_node);
  std::stable_sort(to_place.begin(), to_place.end(), [&](size_t a, size_t b) { return counts[a] > counts[b]; });
  for (size_t i : to_place) {
    std::vector<NodeShare> shares;
    int remaining = counts[i];
    while (remaining > 0) {
      int node = index.BestFit(remaining);
      if (node < 0) node = index.MostFree();
      if (node < 0) break;  // Caller over-committed; assert below.
      int take = std::min(remaining, index.Free(node));
      index.Take(node, take);
      shares.push_back({node, take});
      remaining -= take;
    }
    assert(remaining == 0);
    out[i] = Placement(std::move(shares));
  }
  return out;
}

double CompactRate(const JobView& job, int gpus, int gpus_per_node) {
  if (gpus <= 0) return 0;
  return job.speed->ProgressRate(CompactShape(gpus, gpus_per_node));
}

}  // namespace frugal::sched
