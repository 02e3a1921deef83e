// AFS: Apathetic Future Share (Hwang et al., NSDI 2021).
//
// Note [AFS rule]: for two jobs A and B where A finishes first, holding a and
// b GPUs, the next GPU goes to A iff
//   (T_A(a+1) - T_A(a)) / T_A(a)  >  (T_B(b+1) - T_B(b)) / T_B(b+1).
// A job with no GPU has an infinite left-hand side (it must start) and a
// right-hand side of 1. With many jobs, GPUs are handed out one step at a time
// (see Note [Growth step] for steps larger than one GPU): the jobs are scanned
// in order of expected finish time, the running winner playing A against each
// later job B; the final winner gets the step. Finish time is remaining work
// over the throughput at the job's tentative allocation (one GPU if none), and
// is updated after every step. T is the throughput of the compact placement;
// PlaceJobs() realises it whenever the free GPUs allow.
//
// Note [AFS-P estimator]: without an oracle the remaining work is unknown.
// Training-job lengths are heavy-tailed (Philly: median ~1,100 s, p99
// ~255,000 s), and for such distributions the expected remaining work of a
// job grows with the work it has already done. AFS-P therefore estimates a
// job's remaining work as the statistical progress it has made so far (a
// quantity a live scheduler observes from the trainer), floored at
// `prior_seconds` worth of progress at one GPU so that new jobs are treated as
// short. Expected finish time = estimate / throughput at the tentative
// allocation, i.e. "how long it would take to redo what it has done". This
// orders like least-attained-service, but measured in work rather than in
// GPU-time, so a job that is held back by a poor placement is not demoted.
#include <algorithm>
#include <cmath>
#include <limits>

#include "elastic_step.h"
#include "policies.h"

namespace frugal::sched {
namespace {

class AfsPolicy : public Policy {
 public:
  AfsPolicy(bool oracle, double prior_seconds) : oracle_(oracle), prior_seconds_(prior_seconds) {}

  std::string Name() const override { return oracle_ ? "afs-l" : "afs-p"; }
  bool UsesOracle() const override { return oracle_; }

  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    const int g = cluster.spec.gpus_per_node;
    const int total = cluster.spec.TotalGpus();
    const size_t n = jobs.size();
    std::vector<int> counts(n, 0);
    std::vector<double> remaining(n), finish(n), lhs(n), rhs(n);
    std::vector<GrowthStep> steps(n);
    std::vector<size_t> order;  // Growable jobs by (finish, id).
    order.reserve(n);

    auto update = [&](size_t i) {
      int cap = std::min(jobs[i].max_gpus, total);
      double rate_now = steps[i].k > 0 && counts[i] > 0 ? steps[i].rate_next : CompactRate(jobs[i], counts[i], g);
      steps[i] = NextGrowthStep(jobs[i], counts[i], cap, g, rate_now);
      if (steps[i].k == 0) return false;
      const GrowthStep& s = steps[i];
      double gain = (s.rate_next - s.rate_now) / s.k;
      lhs[i] = counts[i] == 0 ? std::numeric_limits<double>::infinity() : gain / s.rate_now;
      rhs[i] = gain / s.rate_next;
      finish[i] = remaining[i] / (counts[i] == 0 ? s.rate_next : s.rate_now);
      return true;
    };
    auto before = [&](size_t a, size_t b) {
      if (finish[a] != finish[b]) return finish[a] < finish[b];
      return jobs[a].id < jobs[b].id;
    };

    for (size_t i = 0; i < n; ++i) {
      if (oracle_) {
        remaining[i] = jobs[i].remaining_progress;
      } else {
        remaining[i] = std::max(jobs[i].progress, prior_seconds_ * CompactRate(jobs[i], 1, g));
      }
      if (update(i)) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), before);

    int free = total;
    while (free > 0 && !order.empty()) {
      long winner = -1;
      size_t winner_pos = 0;
      for (size_t pos = 0; pos < order.size(); ++pos) {
        size_t b = order[pos];
        if (steps[b].k > free) continue;
        if (winner < 0 || !(lhs[winner] > rhs[b])) {
          winner = static_cast<long>(b);
          winner_pos = pos;
        }
      }
      if (winner < 0) break;
      size_t w = static_cast<size_t>(winner);
      counts[w] += steps[w].k;
      free -= steps[w].k;
      order.erase(order.begin() + winner_pos);
      if (update(w)) order.insert(std::lower_bound(order.begin(), order.end(), w, before), w);
    }
    return PlaceJobs(cluster.spec, jobs, counts);
  }

 private:
  bool oracle_;
  double prior_seconds_;
};

}  // namespace

std::unique_ptr<Policy> NewAfsLPolicy() { return std::make_unique<AfsPolicy>(true, 0); }
std::unique_ptr<Policy> NewAfsPPolicy(double prior_seconds) {
  return std::make_unique<AfsPolicy>(false, prior_seconds);
}

}  // namespace frugal::sched
