#include "placer.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <set>
#include <utility>

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
  // The node with the most free GPUs in whole workers of `unit`: among
  // those, the one with the fewest free GPUs (the fewest left over), then the
  // lowest id; -1 if no node holds a worker. With unit 1, simply the
  // lowest-id node among those with the most free GPUs.
  int MostFree(int unit) const {
    int best = -1;
    int best_usable = 0;
    for (int f = static_cast<int>(buckets_.size()) - 1; f >= std::max(unit, 1); --f) {
      if (buckets_[f].empty()) continue;
      const int usable = RoundDownToWorkers(f, unit);
      if (best >= 0 && usable < best_usable) break;
      best = *buckets_[f].begin();
      best_usable = usable;
    }
    return best;
  }
  int Free(int node) const { return free_[node]; }
  void Take(int node, int gpus) {
    buckets_[free_[node]].erase(node);
    free_[node] -= gpus;
    assert(free_[node] >= 0);
    buckets_[free_[node]].insert(node);
  }
  void Give(int node, int gpus) { Take(node, -gpus); }

 private:
  std::vector<int> free_;
  std::vector<std::set<int>> buckets_;
};

// Places `count` GPUs (a multiple of `unit`) in whole workers of `unit` GPUs
// as compactly as `index` allows (best fit inside one node, else the nodes
// with the most free GPUs in whole workers) and takes them from it. Fewer
// where the free GPUs do not hold `count` in whole workers.
std::vector<NodeShare> PlaceCompactly(int count, int unit, FreeIndex* index) {
  std::vector<NodeShare> shares;
  int remaining = count;
  while (remaining > 0) {
    int node = index->BestFit(remaining);
    if (node < 0) node = index->MostFree(unit);
    if (node < 0) break;  // No node holds another worker; assert below.
    int take = std::min(remaining, RoundDownToWorkers(index->Free(node), unit));
    index->Take(node, take);
    shares.push_back({node, take});
    remaining -= take;
  }
  // One-GPU workers fit any free GPU, so PlaceJobs' REQUIRES (the counts fit
  // the cluster) guarantees the whole count; larger workers may find the
  // free GPUs too scattered (Note [Workers of several GPUs]).
  assert(remaining == 0 || unit > 1);
  return shares;
}

// Up to `count` GPUs in whole workers of `unit` on the `nodes` nodes with the
// most free GPUs in whole workers, taken from `index`.
std::vector<NodeShare> PlaceOnNodes(int count, int unit, int nodes, FreeIndex* index) {
  std::vector<NodeShare> shares;
  for (int k = 0; k < nodes && count > 0; ++k) {
    int node = index->MostFree(unit);
    if (node < 0) break;
    int take = std::min(count, RoundDownToWorkers(index->Free(node), unit));
    index->Take(node, take);
    shares.push_back({node, take});
    count -= take;
  }
  return shares;
}

// Note [Workers of several GPUs]: a job's worker process may take several
// GPUs (JobView::gpus_per_worker, its unit u), and a worker never spans
// nodes. So every node share of its placement is a multiple of u, and so is
// every count a policy gives it. Each piece keeps that once for all policies:
// growth steps are multiples of u (NextGrowthStep), the shapes policies rate
// are the shapes the job can get (CompactShape with u: a full node holds
// floor(gpus_per_node / u) * u of its GPUs), and PlaceJobs places whole
// workers only (best fit, else the nodes with the most GPUs free in whole
// workers, fit-aware options included). Policies count GPUs in totals, and
// free GPUs scattered in pieces smaller than u hold no worker: where the free
// GPUs cannot hold an elastic job's whole count in workers, it gets what fits
// (possibly nothing), like the GPUs a job declines under
// Note [Fit-aware placement], and the rest stay free until the next round.
// The non-elastic policies and optimus never leave a count partly placed:
// they hand out counts through PlaceableCounts, which accepts a count only if
// PlaceJobs still places every count so far in full, so a job starts only
// where its whole request fits in workers. DampReallocations and
// HoldPlacements keep multiples, and DecideRound refuses any other share
// (a policy bug must not reach a live cluster). What it costs: GPUs stranded
// by fragmentation idle for a round (the AFS policies do not offer them to a
// job of a smaller unit within it), and where some job's workers take
// several GPUs each offer to PlaceableCounts re-runs PlaceJobs (O(jobs)): a
// round of fifo, srtf or tiresias is O(jobs^2), optimus O(steps x jobs). With
// one-GPU workers everywhere, the free total decides, as without units.

// Note [Fit-aware placement]: policies choose GPU counts from the rates of
// compact shapes (ceil(count / gpus_per_node) nodes), but the GPUs left free by
// the jobs that keep their placements are often scattered: a 4-GPU job then
// lands on 2-4 nodes and runs slower than it would on fewer GPUs in one node
// (on Pollux workload 2 under afs-goodput-2q --long-queue-order fifo, 124 of
// 443 placements were spread so, mostly 2-4 GPU jobs). When the free GPUs do
// not hold `count` on its compact number of nodes, the job is offered
//   1. the spread placement of all `count` GPUs (what PlaceCompactly gives),
//   2. its current placement, if it holds fewer GPUs and they are still free
//      (no re-allocation at all),
//   3. as many GPUs as the compact number of nodes with the most free GPUs hold,
// and takes the one `rate_on` rates highest (the first on ties). GPUs a job
// declines stay free until the next round. Measured (docs/design/scheduler.md,
// "Fit-aware placement"): training set 0.958 -> 0.945 of afs-goodput's average JCT
// for afs-goodput-2q, 0.944 -> 0.933 with oldest-first long queue; the bound
// with every placement charged as compact is 0.930 for the latter. Charging
// moves (options 1 and 3) the switch cost of the contended pass was worse.
std::vector<NodeShare> PlaceFitting(const JobView& job, size_t i, int count, int compact_nodes,
                                    const RateOn& rate_on, FreeIndex* index) {
  const int unit = WorkerGpus(job);
  // Each option is placed on `index` and given back; the chosen one is taken
  // again (the index's state depends only on the free counts).
  std::vector<std::vector<NodeShare>> options{PlaceCompactly(count, unit, index)};
  if (options[0].size() <= static_cast<size_t>(compact_nodes)) return options[0];
  for (const NodeShare& s : options[0]) index->Give(s.node, s.gpus);
  const std::vector<NodeShare>& now = job.placement.shares();
  if (!now.empty() && job.placement.NumGpus() < count) {
    bool free = true;
    for (const NodeShare& s : now) free = free && index->Free(s.node) >= s.gpus;
    if (free) options.push_back(now);
  }
  options.push_back(PlaceOnNodes(count, unit, compact_nodes, index));
  for (const NodeShare& s : options.back()) index->Give(s.node, s.gpus);
  size_t best = 0;
  double best_rate = rate_on(i, ShapeOf(Placement(options[0])));
  for (size_t o = 1; o < options.size(); ++o) {
    double r = options[o].empty() ? 0 : rate_on(i, ShapeOf(Placement(options[o])));
    if (r > best_rate) best = o, best_rate = r;
  }
  for (const NodeShare& s : options[best]) index->Take(s.node, s.gpus);
  return options[best];
}

}  // namespace

std::vector<Placement> PlaceJobs(const ClusterSpec& spec, const std::vector<JobView>& jobs,
                                 const std::vector<int>& counts, const RateOn& rate_on) {
  assert(counts.size() == jobs.size());
  std::vector<Placement> out(jobs.size());
  std::vector<int> free(spec.num_nodes, spec.gpus_per_node);
  std::vector<int> want(jobs.size(), 0);  // Whole workers.
  std::vector<size_t> to_place;
  for (size_t i = 0; i < jobs.size(); ++i) {
    want[i] = RoundDownToWorkers(std::max(counts[i], 0), WorkerGpus(jobs[i]));
    if (want[i] <= 0) continue;
    if (want[i] == jobs[i].placement.NumGpus()) {
      out[i] = jobs[i].placement;
      for (const NodeShare& s : out[i].shares()) free[s.node] -= s.gpus;
    } else {
      to_place.push_back(i);
    }
  }
  FreeIndex index(free, spec.gpus_per_node);
  std::stable_sort(to_place.begin(), to_place.end(), [&](size_t a, size_t b) { return want[a] > want[b]; });
  for (size_t i : to_place) {
    const int unit = WorkerGpus(jobs[i]);
    const int per_node = spec.NodeGpusInWorkers(unit);
    if (per_node <= 0) continue;  // A worker fits no node.
    const int compact_nodes = (want[i] + per_node - 1) / per_node;
    std::vector<NodeShare> shares = rate_on ? PlaceFitting(jobs[i], i, want[i], compact_nodes, rate_on, &index)
                                            : PlaceCompactly(want[i], unit, &index);
    out[i] = Placement(std::move(shares));
  }
  return out;
}

double CompactRate(const JobView& job, int gpus, int gpus_per_node) {
  if (gpus <= 0) return 0;
  return job.speed->ProgressRate(CompactShape(gpus, gpus_per_node, WorkerGpus(job)));
}

PlaceableCounts::PlaceableCounts(const ClusterSpec& spec, const std::vector<JobView>& jobs)
    : spec_(spec), jobs_(jobs),
      whole_workers_(std::any_of(jobs.begin(), jobs.end(), [](const JobView& j) { return WorkerGpus(j) > 1; })),
      counts_(jobs.size(), 0), free_(spec.TotalGpus()), placed_(jobs.size()) {}

bool PlaceableCounts::TrySet(size_t i, int count) {
  const int delta = count - counts_[i];
  if (delta > free_) return false;
  if (!whole_workers_) {
    counts_[i] = count;
    free_ -= delta;
    return true;
  }
  if (count < 0 || count % WorkerGpus(jobs_[i]) != 0) return false;
  const int before = counts_[i];
  counts_[i] = count;
  std::vector<Placement> trial = PlaceJobs(spec_, jobs_, counts_);
  for (size_t k = 0; k < trial.size(); ++k) {
    if (trial[k].NumGpus() != counts_[k]) {
      counts_[i] = before;
      return false;
    }
  }
  placed_ = std::move(trial);
  free_ -= delta;
  return true;
}

std::vector<Placement> PlaceableCounts::Place() const {
  return whole_workers_ ? placed_ : PlaceJobs(spec_, jobs_, counts_);
}

}  // namespace frugal::sched
