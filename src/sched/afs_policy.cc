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
// PlaceJobs() realises it whenever the free GPUs allow. AFS-P and afs-goodput
// count the cost of resizing a running job, Note [Switch cost]; churn is
// further damped by DampReallocations(), Note [Hysteresis].
//
// Note [Switch cost]: resizing a running job costs it `reallocation_cost`
// seconds without progress. So (AFS-P, afs-goodput) a running job values a
// GPU count m other than its current one at its effective rate over the time
// h the new allocation is expected to last,
//   r_eff(m) = r(m) * h / (h + cost),
// and its current count at r(current). GPUs are handed out in two passes:
//   1. contended: h = min(remaining time, contended_horizon). The policy
//      re-divides the cluster every round, so under contention an allocation
//      is not expected to outlive the next round (default 60 s, the
//      simulator's round). Without this the longest job, last in the finish
//      order, absorbed every arrival and completion of the others: on pollux
//      workload-2 each imagenet job was resized ~110 times on ~50 GPUs.
//   2. leftover: GPUs no job took in pass 1 would stay idle; they are handed
//      out with h = the job's own estimated remaining time (work estimate of
//      Note [AFS-P estimator] over r(m)), so a long job still grows into a
//      quiet cluster.
// A job without GPUs pays the start-up cost at any count, so its rates are
// not discounted. AFS-L (the paper's oracle rule) keeps the plain rule: the
// discount made it worse there (measured, docs/design/scheduler.md).
//
// Note [AFS goodput]: "afs-goodput" is AFS-P where a job's throughput at m
// GPUs is its goodput with the best batch size for m GPUs (statistical
// progress per second, maximised over BatchSizeCandidates(), i.e. between
// the application's smallest and largest validated batch), and the batch
// size then follows the placement (ChooseBatchSizes). Like Pollux, it trades
// the statistical efficiency of small batches against the parallelism of
// large ones; unlike Pollux it allocates GPUs with the AFS rule.
//
// Note [AFS-P estimator]: without an oracle the remaining work is unknown.
// Training-job lengths are heavy-tailed (Philly: median ~1,100 s, p99
// ~255,000 s), and for such distributions the expected remaining work of a
// job grows with the work it has already done. AFS-P therefore estimates a
// job's remaining work as the statistical progress it has made so far (which
// a live scheduler observes from the trainer), expressed in seconds at one
// GPU and floored at `prior_seconds`, so new jobs count as short. Ordering by
// that raw estimate oscillates: the job that just got more GPUs progresses
// faster, looks longer, loses its GPUs the next round, and so on (measured on
// pollux workload-2: two imagenet jobs swapped 15 <-> 34 GPUs every 60 s).
// So, like Tiresias' discretised LAS, the estimate is bucketed into length
// classes floor(log2(estimate / prior)), and jobs in the same class are
// ordered by submission time. Expected finish order = (class, submit time).
// A job whose workers take u GPUs each cannot run on one GPU; its one-GPU
// rate is its rate on one worker over u (Note [Workers of several GPUs]).
//
// Note [Two queues]: "afs-goodput-2q" is afs-goodput with bounded priority
// to short jobs, like Tiresias' two queues. A job whose estimated work
// (one-GPU seconds, Note [AFS-P estimator]) has reached `long_job_seconds`
// is long; every short job gets all the GPUs it can use (its growth steps
// handed out by the AFS rule among short jobs) before any long job gets a
// GPU; long jobs share the rest by the AFS rule (or oldest first,
// Note [Long queue order]; a starved one may return to the short queue,
// Note [Promotion]). The plain AFS rule gives
// every waiting job one GPU before any running job grows, so under load it
// behaves like processor sharing, which loses to shortest-first on mean JCT
// (docs/design/scheduler.md). A new job's prior is `prior_seconds` on each
// GPU it asked for (users ask for more GPUs for bigger jobs) instead of on
// one. Measured: a goodput-weighted shortest-remaining-first rule (next GPU
// to the largest rate gain over estimated remaining work) was worse than the
// AFS rule without an oracle; a threshold low enough to put new big jobs in
// the long queue made preempted long jobs restart round after round. Its
// placements are fit-aware (Note [Fit-aware placement] in placer.cc) unless
// TwoQueues::fit_aware_placement is off.
//
// Note [Long queue order]: with LongQueueOrder::kSubmission, long jobs share
// what the short ones leave oldest first, as in Tiresias' queues: the oldest
// long job takes every growth step it can use (Note [Growth step]) before the
// next one gets any. Short jobs still keep every step against a long one. The
// AFS rule among long jobs (kAfs, the default) is processor sharing: long
// jobs of similar length (the imagenet jobs of the Pollux workloads) all
// finish late together, where one at a time finishes all but the last
// sooner. Measured (docs/design/scheduler.md): 0.958 -> 0.944
// of afs-goodput's average JCT on the training set, Pollux workloads 1-4
// 2357 -> 2325 s; but Philly 10k 2010 -> 2146 s (p99 40090 -> 46279 s):
// there the longest jobs wait behind older ones. Least-attained first among
// long jobs instead: 1.087 on the training set.
//
// Note [Promotion]: a long job can hold few GPUs for as long as short jobs
// keep arriving (Philly 10k: p99 JCT +59% over afs-goodput; its slowest 1%
// are imagenet jobs that start at once but hold ~15 GPUs on average, ~20
// under afs-goodput). Like Tiresias' PROMOTE knob, a long job is promoted
// back to the short queue once it has waited too long for the service it got.
// In an elastic cluster that service is counted in seconds at the GPUs the
// job asked for, s = attained_service / requested_gpus: promoted iff
//   now - submit_time >= (1 + promote_knob) * s,
// and it stays promoted until its service catches up (the policy keeps no
// per-job state). A job that never ran is promoted at once. Measured: knob
// 0.25 takes Philly 10k to 1953 s, p99 27166 s (afs-goodput: 1954 / 25182),
// but the training set from 0.958 to 0.980; hence off by default. Counting
// only time without any GPU (Tiresias' pending time) changed nothing: long
// jobs are rarely left with no GPU at all.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "elastic_step.h"
#include "hysteresis.h"
#include "policies.h"

namespace frugal::sched {
namespace {

// The throughput the policy assumes for job i at m GPUs: on the compact shape
// in the job's workers, at its current batch, or with `goodput` its best
// goodput over its batch candidates (Note [AFS goodput]), memoised: the two
// passes of Note [Switch cost] ask for the same counts again.
class JobRates {
 public:
  JobRates(const std::vector<JobView>& jobs, int gpus_per_node, bool goodput)
      : jobs_(jobs), g_(gpus_per_node), goodput_(goodput), batches_(goodput ? jobs.size() : 0),
        memo_(goodput ? jobs.size() : 0) {
    for (size_t i = 0; i < batches_.size(); ++i) batches_[i] = BatchSizeCandidates(jobs[i]);
  }
  double At(size_t i, int m) {
    if (!goodput_) return CompactRate(jobs_[i], m, g_);
    if (m <= 0) return 0.0;
    std::vector<double>& memo = memo_[i];
    if (memo.size() <= static_cast<size_t>(m)) memo.resize(m + 1, -1);
    if (memo[m] >= 0) return memo[m];
    Shape shape = CompactShape(m, g_, WorkerGpus(jobs_[i]));
    double best = 0;
    for (int b : batches_[i]) best = std::max(best, jobs_[i].speed->ProgressRateAt(shape, b));
    memo[m] = best;
    return best;
  }
  // Per GPU on one worker: the one-GPU rate of Note [AFS-P estimator].
  double AtOne(size_t i) {
    const int unit = WorkerGpus(jobs_[i]);
    return At(i, unit) / unit;
  }

 private:
  const std::vector<JobView>& jobs_;
  int g_;
  bool goodput_;
  std::vector<std::vector<int>> batches_;
  std::vector<std::vector<double>> memo_;
};

// One hand-out pass of the AFS rule (Note [AFS rule]): while GPUs are free,
// the growable job that wins every pairwise comparison (lhs of the winner
// against rhs of the others) gets its next growth step; `update(i)`
// recomputes job i's step and says whether it can still grow; `before`
// orders jobs by (finish, submit time, id); `keeps(a, b)` says whether the
// running winner a, earlier in that order, keeps the step against b.
template <typename Update, typename Before, typename Keeps>
void HandOut(std::vector<size_t>* order, const std::vector<GrowthStep>& steps, std::vector<int>* counts, int* free,
             Update&& update, Before&& before, Keeps&& keeps) {
  std::sort(order->begin(), order->end(), before);
  while (*free > 0 && !order->empty()) {
    long winner = -1;
    size_t winner_pos = 0;
    for (size_t pos = 0; pos < order->size(); ++pos) {
      size_t b = (*order)[pos];
      if (steps[b].k > *free) continue;
      if (winner < 0 || !keeps(static_cast<size_t>(winner), b)) {
        winner = static_cast<long>(b);
        winner_pos = pos;
      }
    }
    if (winner < 0) break;
    size_t w = static_cast<size_t>(winner);
    (*counts)[w] += steps[w].k;
    *free -= steps[w].k;
    order->erase(order->begin() + winner_pos);
    if (update(w)) order->insert(std::lower_bound(order->begin(), order->end(), w, before), w);
  }
}

// AFS-P's estimate of a job's remaining work in one-GPU seconds, at least
// `floor_seconds`; see Note [AFS-P estimator].
double EstimatedWorkSeconds(double progress, double rate_at_one, double floor_seconds) {
  return rate_at_one > 0 ? std::max(progress / rate_at_one, floor_seconds) : 1e300;
}

// AFS-P's length class: log2 of the estimated work over the prior.
double LengthClass(double work_seconds, double prior_seconds) {
  return std::floor(std::log2(work_seconds / std::max(prior_seconds, 1e-9)));
}

class AfsPolicy : public Policy {
 public:
  // `queues.long_job_seconds` > 0: Note [Two queues].
  AfsPolicy(bool oracle, bool goodput, double prior_seconds, double min_gain, SwitchCost switch_cost,
            TwoQueues queues = {})
      : oracle_(oracle), goodput_(goodput), prior_seconds_(prior_seconds), min_gain_(min_gain),
        switch_cost_(switch_cost), queues_(queues) {}

  std::string Name() const override {
    if (queues_.long_job_seconds > 0) return "afs-goodput-2q";
    return oracle_ ? "afs-l" : goodput_ ? "afs-goodput" : "afs-p";
  }
  bool UsesOracle() const override { return oracle_; }

  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    const int g = cluster.spec.gpus_per_node;
    const int total = cluster.spec.TotalGpus();
    const size_t n = jobs.size();
    std::vector<int> counts(n, 0);
    std::vector<double> remaining(n), finish(n), lhs(n), rhs(n);
    std::vector<char> long_job(n, 0);  // Note [Two queues].
    std::vector<GrowthStep> steps(n);
    std::vector<size_t> order;  // Growable jobs by (finish, id).
    order.reserve(n);
    JobRates rates(jobs, g, goodput_);
    // Current GPUs and remaining work (progress units) of running jobs, for
    // Note [Switch cost]; empty when it is off.
    const bool switch_cost = switch_cost_.seconds > 0;
    std::vector<int> current(switch_cost ? n : 0);
    std::vector<double> work_left(switch_cost ? n : 0);
    for (size_t i = 0; i < current.size(); ++i) {
      current[i] = jobs[i].placement.NumGpus();
      if (current[i] == 0) continue;
      work_left[i] = oracle_ ? jobs[i].remaining_progress
                             : std::max(jobs[i].progress, prior_seconds_ * rates.AtOne(i));
    }
    bool contended = true;  // Pass 1 or 2 of Note [Switch cost].
    auto effective_rate = [&](size_t i, int m) {
      double r = rates.At(i, m);
      if (!switch_cost || r <= 0 || current[i] == 0 || m == current[i]) return r;
      double h = work_left[i] / r;
      if (contended) h = std::min(h, switch_cost_.contended_horizon);
      return h > 0 ? r * h / (h + switch_cost_.seconds) : 0.0;
    };

    auto update = [&](size_t i) {
      double rate_now = steps[i].k > 0 && counts[i] > 0 ? steps[i].rate_next : effective_rate(i, counts[i]);
      steps[i] = NextGrowthStep(counts[i], Cap(cluster.spec, jobs[i]), g, WorkerGpus(jobs[i]), rate_now,
                                [&](int m) { return effective_rate(i, m); });
      if (steps[i].k == 0) return false;

      const GrowthStep& s = steps[i];
      double gain = (s.rate_next - s.rate_now) / s.k;
      lhs[i] = counts[i] == 0 ? std::numeric_limits<double>::infinity() : gain / s.rate_now;
      rhs[i] = gain / s.rate_next;
      if (oracle_) finish[i] = remaining[i] / (counts[i] == 0 ? s.rate_next : s.rate_now);
      return true;
    };
    auto before = [&](size_t a, size_t b) {
      return finish[a] != finish[b] ? finish[a] < finish[b] : SubmittedBefore(jobs[a], jobs[b]);
    };

    if (oracle_) {
      for (size_t i = 0; i < n; ++i) remaining[i] = jobs[i].remaining_progress;
    } else {
      EstimateLengths(cluster.now, jobs, [&](size_t i) { return rates.AtOne(i); }, &finish, &long_job);
    }
    auto keeps = [&](size_t a, size_t b) {
      return Keeps(jobs[a], jobs[b], long_job[a], long_job[b], lhs[a] > rhs[b]);
    };
    // The AFS hand-out, one growth step at a time (Note [AFS rule]); a
    // second pass hands out the leftover GPUs (Note [Switch cost]).
    int free = total;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        if (free == 0 || !switch_cost) break;
        contended = false;
        steps.assign(n, GrowthStep());
        order.clear();
      }
      for (size_t i = 0; i < n; ++i) {
        if (update(i)) order.push_back(i);
      }
      HandOut(&order, steps, &counts, &free, update, before, keeps);
    }
    DampReallocations(cluster.spec, jobs, min_gain_, [&](size_t i, int m) { return rates.At(i, m); }, &counts);
    return PlaceJobs(cluster.spec, jobs, counts, FitAwareRates(jobs));
  }

  // The most GPUs the policy gives `job`: what it can use (at its largest
  // batch for afs-goodput), in whole workers on the cluster.
  int Cap(const ClusterSpec& spec, const JobView& job) const {
    return std::min(goodput_ ? job.max_gpus_at_max_batch : job.max_gpus, spec.TotalGpusInWorkers(WorkerGpus(job)));
  }

  // Rates for Note [Fit-aware placement] (placer.cc); null where it is off.
  RateOn FitAwareRates(const std::vector<JobView>& jobs) const {
    if (!(queues_.long_job_seconds > 0 && queues_.fit_aware_placement)) return nullptr;
    return [&jobs](size_t i, const Shape& shape) { return BestRateOn(jobs[i], shape).first; };
  }

  // AFS-P's finish order keys (Note [AFS-P estimator]) and, for two queues,
  // which jobs are long (Note [Two queues]). `rate_at_one(i)`: job i's
  // throughput on one GPU.
  template <typename RateAtOne>
  void EstimateLengths(double now, const std::vector<JobView>& jobs, RateAtOne&& rate_at_one,
                       std::vector<double>* finish, std::vector<char>* long_job) const {
    for (size_t i = 0; i < jobs.size(); ++i) {
      double prior = prior_seconds_ * (queues_.long_job_seconds > 0 ? std::max(jobs[i].requested_gpus, 1) : 1);
      double work = EstimatedWorkSeconds(jobs[i].progress, rate_at_one(i), prior);
      (*finish)[i] = LengthClass(work, prior_seconds_);
      (*long_job)[i] = queues_.long_job_seconds > 0 && work >= queues_.long_job_seconds && !Promoted(now, jobs[i]);
    }
  }

  // Note [Promotion].
  bool Promoted(double now, const JobView& job) const {
    if (!(queues_.promote_knob > 0)) return false;
    const double service_seconds = job.attained_service / std::max(job.requested_gpus, 1);
    return now - job.submit_time >= (1 + queues_.promote_knob) * service_seconds;
  }

  // Whether the running winner `a`, earlier in the finish order, keeps the
  // step against `b`; `afs` is the AFS rule's answer (Note [AFS rule]).
  bool Keeps(const JobView& a, const JobView& b, bool long_a, bool long_b, bool afs) const {
    if (long_a && long_b && queues_.long_order == LongQueueOrder::kSubmission) {
      return SubmittedBefore(a, b);  // Note [Long queue order].
    }
    return (!long_a && long_b) || afs;  // Note [Two queues].
  }

  static bool SubmittedBefore(const JobView& a, const JobView& b) {
    return a.submit_time != b.submit_time ? a.submit_time < b.submit_time : a.id < b.id;
  }

  // The job's best goodput on `shape` over its batch candidates and the batch
  // that gives it (its current batch if none runs); Note [AFS goodput].
  static std::pair<double, int> BestRateOn(const JobView& job, const Shape& shape) {
    std::pair<double, int> best{0.0, job.batch_size};
    for (int b : BatchSizeCandidates(job)) {
      double r = job.speed->ProgressRateAt(shape, b);
      if (r > best.first) best = {r, b};
    }
    return best;
  }

  std::vector<int> ChooseBatchSizes(const ClusterView& cluster, const std::vector<JobView>& jobs,
                                    const std::vector<Placement>& placements) const override {
    if (!goodput_) return {};
    std::vector<int> out(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      out[i] = placements[i].empty() ? jobs[i].batch_size : BestRateOn(jobs[i], ShapeOf(placements[i])).second;
    }
    return out;
  }

 private:
  bool oracle_;
  bool goodput_;
  double prior_seconds_;
  double min_gain_;
  SwitchCost switch_cost_;
  TwoQueues queues_;
};

}  // namespace

std::unique_ptr<Policy> NewAfsLPolicy(double min_gain) {
  return std::make_unique<AfsPolicy>(true, false, 0, min_gain, SwitchCost{});
}
std::unique_ptr<Policy> NewAfsPPolicy(double prior_seconds, double min_gain, SwitchCost switch_cost) {
  return std::make_unique<AfsPolicy>(false, false, prior_seconds, min_gain, switch_cost);
}
std::unique_ptr<Policy> NewAfsGoodputPolicy(double prior_seconds, double min_gain, SwitchCost switch_cost) {
  return std::make_unique<AfsPolicy>(false, true, prior_seconds, min_gain, switch_cost);
}
std::unique_ptr<Policy> NewAfsGoodputTwoQueuePolicy(double prior_seconds, double min_gain, SwitchCost switch_cost,
                                                    TwoQueues queues) {
  return std::make_unique<AfsPolicy>(false, true, prior_seconds, min_gain, switch_cost, queues);
}

}  // namespace frugal::sched
