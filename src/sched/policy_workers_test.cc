// Note [Workers of several GPUs] (placer.cc): the Policy contract for jobs
// whose workers take several GPUs, for every policy and through DecideRound.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "elastic_step.h"
#include "frugal/common/random.h"
#include "frugal/sched/decision.h"
#include "frugal/sched/policy.h"
#include "policy_test_util.h"

namespace frugal::sched {
namespace {

// Note [Growth step] in whole workers: steps of 2, 4 for 2-GPU workers on
// 4-GPU nodes, the cap rounded down to whole workers.
TEST(SchedGrowthStepTest, StepsInWholeWorkers) {
  auto linear = [](int n) { return static_cast<double>(n); };
  EXPECT_EQ(NextGrowthStep(0, 8, 4, 1, 0.0, linear).k, 1);
  EXPECT_EQ(NextGrowthStep(0, 8, 4, 2, 0.0, linear).k, 2);
  EXPECT_EQ(NextGrowthStep(4, 7, 4, 2, 4.0, linear).k, 2);
  EXPECT_EQ(NextGrowthStep(6, 7, 4, 2, 6.0, linear).k, 0) << "cap 7 is 6 in whole workers";
  EXPECT_EQ(NextGrowthStep(0, 8, 4, 8, 0.0, linear).k, 0) << "a worker larger than a node";
  // A dip at 2 GPUs: the next step that gains is 4.
  auto dip = [](int n) { return n == 2 ? 0.5 : static_cast<double>(n); };
  EXPECT_EQ(NextGrowthStep(0, 8, 4, 2, 0.0, dip).k, 2);
  EXPECT_EQ(NextGrowthStep(0, 8, 4, 2, 1.0, dip).k, 4);
  EXPECT_EQ(NextGrowthStep(0, 8, 4, 3, 0.0, linear).k, 3);
}

JobView WorkerJob(int64_t id, const SpeedEstimate* speed, double submit, int requested, int max_gpus, int unit) {
  JobView v = Job(id, speed, submit, requested, max_gpus);
  v.gpus_per_worker = unit;
  v.max_gpus_at_max_batch = max_gpus;
  v.remaining_progress = 100 + id;
  return v;
}

// Note [Workers of several GPUs]: one GPU is held on each of two 4-GPU nodes,
// so 6 are free, but only 4 of them in pairs. A non-elastic job of 2-GPU
// workers asking for 6 does not start (although 6 <= 6 free); one asking for
// 4 is backfilled, and FIFO blocks behind the first.
TEST(SchedNonElasticTest, StartsOnlyWhatFitsInWholeWorkers) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  std::vector<JobView> jobs = {WorkerJob(0, &s, 0, 1, 1, 1), WorkerJob(1, &s, 1, 1, 1, 1),
                               WorkerJob(2, &s, 2, 6, 6, 2), WorkerJob(3, &s, 3, 4, 4, 2)};
  jobs[0].placement = Placement({{0, 1}});
  jobs[1].placement = Placement({{1, 1}});
  jobs[0].remaining_progress = jobs[1].remaining_progress = 1;  // srtf keeps them first.
  for (const std::string name : {"srtf", "tiresias"}) {
    auto d = DecideRound(*Make(name), Cluster(2, 4), jobs);
    ASSERT_TRUE(d.ok()) << name << ": " << d.status().ToString();
    EXPECT_EQ(d->placements[0], jobs[0].placement) << name;
    EXPECT_EQ(d->placements[1], jobs[1].placement) << name;
    EXPECT_TRUE(d->placements[2].empty()) << name;
    EXPECT_EQ(d->placements[3], Placement({{0, 2}, {1, 2}})) << name;
  }
  auto fifo = DecideRound(*Make("fifo"), Cluster(2, 4), jobs);
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  EXPECT_TRUE(fifo->placements[2].empty());
  EXPECT_TRUE(fifo->placements[3].empty()) << "no backfilling";
}

// Optimus and the AFS policies step in whole workers: a lone linear job of
// 2-GPU workers on a 4-GPU node with a cap of 3 gets 2; of 3-GPU workers on
// two 4-GPU nodes it gets 3 per node.
TEST(SchedElasticTest, GrowsInWholeWorkers) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0});
  for (const std::string name : {"optimus", "afs-l", "afs-p", "afs-goodput", "afs-goodput-2q"}) {
    std::vector<JobView> jobs = {WorkerJob(0, &s, 0, 2, 3, 2)};
    auto d = DecideRound(*Make(name), Cluster(1, 4), jobs);
    ASSERT_TRUE(d.ok()) << name << ": " << d.status().ToString();
    EXPECT_EQ(d->placements[0], Placement({{0, 2}})) << name;
    jobs = {WorkerJob(0, &s, 0, 3, 8, 3)};
    d = DecideRound(*Make(name), Cluster(2, 4), jobs);
    ASSERT_TRUE(d.ok()) << name << ": " << d.status().ToString();
    EXPECT_EQ(d->placements[0], Placement({{0, 3}, {1, 3}})) << name;
  }
}

// A policy that answers with fixed placements.
class FixedPolicy : public Policy {
 public:
  explicit FixedPolicy(std::vector<Placement> answer) : answer_(std::move(answer)) {}
  std::string Name() const override { return "fixed"; }
  std::vector<Placement> Schedule(const ClusterView&, const std::vector<JobView>&) const override { return answer_; }

 private:
  std::vector<Placement> answer_;
};

// DecideRound refuses a share that is not whole workers (a policy bug), and a
// view whose request is not whole workers (the caller's).
TEST(SchedDecideRoundTest, RefusesSharesThatAreNotWholeWorkers) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {WorkerJob(7, &s, 0, 2, 4, 2)};
  auto d = DecideRound(FixedPolicy({Placement({{0, 1}, {1, 1}})}), Cluster(2, 4), jobs);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kInternal);
  EXPECT_NE(d.status().message().find("policy fixed"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("job 7"), std::string::npos) << d.status().message();
  EXPECT_TRUE(DecideRound(FixedPolicy({Placement({{0, 2}})}), Cluster(2, 4), jobs).ok());

  jobs[0].requested_gpus = 3;
  d = DecideRound(FixedPolicy({Placement()}), Cluster(2, 4), jobs);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find("job 7"), std::string::npos) << d.status().message();
  jobs[0].requested_gpus = 2;
  jobs[0].gpus_per_worker = 0;
  EXPECT_EQ(DecideRound(FixedPolicy({Placement()}), Cluster(2, 4), jobs).status().code(),
            Status::Code::kInvalidArgument);
}

// Note [Held jobs] in whole workers: a held job keeps 1 GPU of node 0; the
// job of 2-GPU workers the policy gave all 4 is trimmed to the 2 of the 3
// left that make a whole worker.
TEST(SchedDecideRoundTest, HeldJobsTrimOthersToWholeWorkers) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {WorkerJob(0, &s, 0, 1, 1, 1), WorkerJob(1, &s, 1, 4, 4, 2)};
  jobs[0].placement = Placement({{0, 1}});
  jobs[0].Hold();
  auto d = DecideRound(FixedPolicy({Placement(), Placement({{0, 4}})}), Cluster(1, 4), jobs);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->placements[0], Placement({{0, 1}}));
  EXPECT_EQ(d->placements[1], Placement({{0, 2}}));
}

bool NonElastic(const std::string& name) { return name == "fifo" || name == "srtf" || name == "tiresias"; }

// A random job of `unit`-GPU workers on `spec`, some holding a placement in
// whole workers (taken from `free`), a few of them held.
JobView RandomWorkerJob(int64_t id, int unit, const ClusterSpec& spec, const SpeedEstimate* speed, SplitMix64* rng,
                        std::vector<int>* free) {
  const int most = spec.TotalGpusInWorkers(unit) / unit;  // Workers.
  JobView v = WorkerJob(id, speed, rng->NextDouble() * 100, unit * (1 + static_cast<int>(rng->Below(most))),
                        unit * (1 + static_cast<int>(rng->Below(2 * most))), unit);
  v.max_gpus = v.max_gpus_at_max_batch = std::max(v.max_gpus, v.requested_gpus);
  v.remaining_progress = 1 + rng->NextDouble() * 1000;
  v.progress = rng->NextDouble() * 1000;
  v.attained_service = rng->NextDouble() * 1e5;
  int node = static_cast<int>(rng->Below(spec.num_nodes));
  if (rng->Below(2) == 0 && (*free)[node] >= unit) {
    int gpus = unit * (1 + static_cast<int>(rng->Below((*free)[node] / unit)));
    (*free)[node] -= gpus;
    v.placement = Placement({{node, gpus}});
    if (rng->Below(8) == 0) v.Hold();
  }
  return v;
}

// Note [Workers of several GPUs], every policy on random states: jobs of
// 1-, 2- and 4-GPU workers (and 3 on 4-GPU nodes) on clusters of several
// sizes. DecideRound accepts every answer; every node share is whole
// workers; no node is over-committed; non-elastic policies give 0 or the
// requested count; elastic ones at most max_gpus.
TEST(SchedPolicyInvariantTest, RandomStatesWithWorkersOfSeveralGpus) {
  SplitMix64 rng(11);
  std::vector<std::unique_ptr<TableSpeed>> speeds;
  const ClusterSpec specs[] = {{1, 4}, {2, 4}, {3, 4}, {5, 4}, {8, 4}, {2, 8}, {4, 8}};
  for (int trial = 0; trial < 60; ++trial) {
    const ClusterSpec& spec = specs[trial % std::size(specs)];
    std::vector<int> units = {1, 2, 4};
    if (spec.gpus_per_node == 4) units.push_back(3);
    std::vector<JobView> jobs;
    std::vector<int> free(spec.num_nodes, spec.gpus_per_node);
    const int n = 1 + static_cast<int>(rng.Below(20));
    for (int i = 0; i < n; ++i) {
      std::vector<double> curve;
      double r = 0;
      for (int g = 0; g < 32; ++g) curve.push_back(r += rng.NextDouble());
      speeds.push_back(std::make_unique<TableSpeed>(curve));
      const int unit = units[rng.Below(units.size())];
      jobs.push_back(RandomWorkerJob(i, unit, spec, speeds.back().get(), &rng, &free));
    }
    const ClusterView cluster{spec, 0};
    for (const std::string& name : PolicyNames()) {
      auto policy = Make(name);
      std::vector<Placement> answer = policy->Schedule(cluster, jobs);
      auto d = DecideRound(*policy, cluster, jobs);
      ASSERT_TRUE(d.ok()) << name << " trial " << trial << ": " << d.status().ToString();
      for (const std::vector<Placement>* out : {&answer, &d->placements}) {
        std::vector<int> used(spec.num_nodes, 0);
        for (size_t i = 0; i < out->size(); ++i) {
          for (const NodeShare& s : (*out)[i].shares()) {
            EXPECT_EQ(s.gpus % jobs[i].gpus_per_worker, 0) << name << " trial " << trial << " job " << i;
            used[s.node] += s.gpus;
          }
        }
        for (int u : used) EXPECT_LE(u, spec.gpus_per_node) << name << " trial " << trial;
      }
      for (size_t i = 0; i < jobs.size(); ++i) {
        const int got = answer[i].NumGpus();
        if (NonElastic(name)) {
          EXPECT_TRUE(got == 0 || got == jobs[i].requested_gpus) << name << " trial " << trial << " job " << i;
        } else {
          EXPECT_LE(got, std::max(jobs[i].max_gpus_at_max_batch, jobs[i].requested_gpus)) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace frugal::sched
