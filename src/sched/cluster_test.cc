#include "frugal/sched/cluster.h"

#include <gtest/gtest.h>

#include "placer.h"

namespace frugal::sched {
namespace {

class CountSpeed : public SpeedEstimate {
 public:
  double ProgressRate(const Shape& shape) const override {
    int n = 0;
    for (int g : shape) n += g;
    return n;
  }
};

TEST(SchedClusterTest, CompactShapeUsesFewestNodes) {
  EXPECT_EQ(CompactShape(0, 4), Shape{});
  EXPECT_EQ(CompactShape(3, 4), (Shape{3}));
  EXPECT_EQ(CompactShape(4, 4), (Shape{4}));
  EXPECT_EQ(CompactShape(6, 4), (Shape{2, 4}));
  EXPECT_EQ(CompactShape(12, 4), (Shape{4, 4, 4}));
}

// Note [Workers of several GPUs]: a full node holds whole workers only.
TEST(SchedClusterTest, CompactShapeInWholeWorkers) {
  EXPECT_EQ(CompactShape(6, 4, 1), (Shape{2, 4}));
  EXPECT_EQ(CompactShape(6, 4, 2), (Shape{2, 4}));
  EXPECT_EQ(CompactShape(6, 4, 3), (Shape{3, 3}));
  EXPECT_EQ(CompactShape(9, 4, 3), (Shape{3, 3, 3}));
  EXPECT_EQ(CompactShape(12, 8, 3), (Shape{6, 6}));
  EXPECT_EQ(CompactShape(8, 4, 4), (Shape{4, 4}));
  EXPECT_EQ(CompactShape(8, 4, 8), Shape{}) << "a worker larger than a node fits nowhere";
  ClusterSpec spec{3, 4};
  EXPECT_EQ(spec.NodeGpusInWorkers(1), 4);
  EXPECT_EQ(spec.NodeGpusInWorkers(3), 3);
  EXPECT_EQ(spec.TotalGpusInWorkers(3), 9);
  EXPECT_EQ(spec.TotalGpusInWorkers(5), 0);
}

TEST(SchedClusterTest, PlacementDropsZerosAndSortsByNode) {
  Placement p({{5, 2}, {1, 0}, {0, 3}});
  ASSERT_EQ(p.shares().size(), 2u);
  EXPECT_EQ(p.shares()[0].node, 0);
  EXPECT_EQ(p.NumGpus(), 5);
  EXPECT_EQ(p.GpusOn(5), 2);
  EXPECT_EQ(p.GpusOn(1), 0);
  EXPECT_EQ(ShapeOf(p), (Shape{2, 3}));
  EXPECT_EQ(p.ToString(), "n0:3+n5:2");
  EXPECT_EQ(Placement().ToString(), "-");
}

JobView MakeJob(int64_t id, const SpeedEstimate* speed, Placement current = {}, int gpus_per_worker = 1) {
  JobView v;
  v.id = id;
  v.speed = speed;
  v.placement = std::move(current);
  v.gpus_per_worker = gpus_per_worker;
  return v;
}

void ExpectWholeWorkers(const std::vector<JobView>& jobs, const std::vector<Placement>& out, const ClusterSpec& spec) {
  std::vector<int> used(spec.num_nodes, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    for (const NodeShare& s : out[i].shares()) {
      EXPECT_EQ(s.gpus % jobs[i].gpus_per_worker, 0) << "job " << i << ": " << out[i].ToString();
      used[s.node] += s.gpus;
    }
  }
  for (int u : used) EXPECT_LE(u, spec.gpus_per_node);
}

TEST(SchedPlacerTest, KeepsUnchangedJobsAndBestFitsNewOnes) {
  CountSpeed speed;
  ClusterSpec spec{3, 4};
  // Job 0 holds 3 GPUs on node 1 and keeps its count; job 1 needs 1 GPU and
  // must go into the hole next to job 0 (best fit), not onto an empty node.
  std::vector<JobView> jobs = {MakeJob(0, &speed, Placement({{1, 3}})), MakeJob(1, &speed)};
  std::vector<Placement> out = PlaceJobs(spec, jobs, {3, 1});
  EXPECT_EQ(out[0], Placement({{1, 3}}));
  EXPECT_EQ(out[1], Placement({{1, 1}}));
}

TEST(SchedPlacerTest, LargeJobsSpanAsFewNodesAsPossible) {
  CountSpeed speed;
  ClusterSpec spec{4, 4};
  std::vector<JobView> jobs = {MakeJob(0, &speed), MakeJob(1, &speed), MakeJob(2, &speed)};
  std::vector<Placement> out = PlaceJobs(spec, jobs, {6, 8, 2});
  EXPECT_EQ(out[1].NumNodes(), 2);  // Placed first (largest): two whole nodes.
  EXPECT_EQ(ShapeOf(out[0]), (Shape{2, 4}));
  EXPECT_EQ(ShapeOf(out[2]), (Shape{2}));
  std::vector<int> used(4, 0);
  for (const Placement& p : out) {
    for (const NodeShare& s : p.shares()) used[s.node] += s.gpus;
  }
  for (int u : used) EXPECT_LE(u, 4);
}

TEST(SchedPlacerTest, ChangedCountIsPlacedAfresh) {
  CountSpeed speed;
  ClusterSpec spec{2, 4};
  std::vector<JobView> jobs = {MakeJob(0, &speed, Placement({{0, 1}, {1, 1}}))};
  std::vector<Placement> out = PlaceJobs(spec, jobs, {4});
  EXPECT_EQ(out[0].NumNodes(), 1);
  EXPECT_EQ(out[0].NumGpus(), 4);
}

// Rate = GPUs on one node, half that when spread over several
// (Note [Fit-aware placement]).
double SpreadHalves(size_t, const Shape& shape) {
  int n = 0;
  for (int g : shape) n += g;
  return shape.size() > 1 ? 0.5 * n : n;
}

// Node 0: job 1 (kept, 1 GPU); node 1: job 2 (kept, 2 GPUs). Job 0 asks for
// 4 GPUs: plain placement spreads 3 + 1 over both nodes (rate 2 here);
// fit-aware placement gives it the 3 GPUs of node 0 (rate 3).
TEST(SchedPlacerTest, FitAwareTakesFewerGpusOnOneNode) {
  CountSpeed speed;
  ClusterSpec spec{2, 4};
  std::vector<JobView> jobs = {MakeJob(0, &speed), MakeJob(1, &speed, Placement({{0, 1}})),
                               MakeJob(2, &speed, Placement({{1, 2}}))};
  std::vector<Placement> plain = PlaceJobs(spec, jobs, {4, 1, 2});
  EXPECT_EQ(ShapeOf(plain[0]), (Shape{1, 3}));
  std::vector<Placement> fit = PlaceJobs(spec, jobs, {4, 1, 2}, SpreadHalves);
  EXPECT_EQ(fit[0], Placement({{0, 3}}));
  EXPECT_EQ(fit[1], Placement({{0, 1}}));
  EXPECT_EQ(fit[2], Placement({{1, 2}}));
}

// Job 0 runs on 3 GPUs of node 0 and is asked to grow to 4, but node 0's
// fourth GPU is job 1's and node 1 has one free: it keeps its placement (no
// re-allocation) instead of spreading 3 + 1.
TEST(SchedPlacerTest, FitAwareKeepsTheCurrentPlacement) {
  CountSpeed speed;
  ClusterSpec spec{2, 4};
  std::vector<JobView> jobs = {MakeJob(0, &speed, Placement({{0, 3}})), MakeJob(1, &speed, Placement({{0, 1}})),
                               MakeJob(2, &speed, Placement({{1, 3}}))};
  std::vector<Placement> plain = PlaceJobs(spec, jobs, {4, 1, 3});
  EXPECT_EQ(plain[0].NumNodes(), 2);
  EXPECT_EQ(plain[0].NumGpus(), 4);
  std::vector<Placement> fit = PlaceJobs(spec, jobs, {4, 1, 3}, SpreadHalves);
  EXPECT_EQ(fit[0], Placement({{0, 3}}));
  // Where spreading is faster, the job spreads.
  auto linear = [](size_t, const Shape& shape) {
    int n = 0;
    for (int g : shape) n += g;
    return static_cast<double>(n);
  };
  EXPECT_EQ(PlaceJobs(spec, jobs, {4, 1, 3}, linear)[0].NumGpus(), 4);
}

// Note [Workers of several GPUs]: four 4-GPU nodes with 1, 3, 1 and 3 GPUs
// free (10 in all). A job of 2-GPU workers asking for 8 gets only the pairs
// the free GPUs hold, one on each node with 3 free: 4 GPUs, never an odd
// share; the single GPUs stay free. Fit-aware placement keeps the rule.
TEST(SchedPlacerTest, WorkersOfTwoGpusArePlacedInPairsOnAFragmentedCluster) {
  CountSpeed speed;
  ClusterSpec spec{4, 4};
  std::vector<JobView> jobs = {MakeJob(0, &speed, {}, 2), MakeJob(1, &speed, Placement({{0, 3}})),
                               MakeJob(2, &speed, Placement({{1, 1}})), MakeJob(3, &speed, Placement({{2, 3}})),
                               MakeJob(4, &speed, Placement({{3, 1}}))};
  const std::vector<int> counts = {8, 3, 1, 3, 1};
  for (bool fit_aware : {false, true}) {
    std::vector<Placement> out = PlaceJobs(spec, jobs, counts, fit_aware ? RateOn(SpreadHalves) : nullptr);
    EXPECT_EQ(out[0], Placement({{1, 2}, {3, 2}})) << "fit-aware " << fit_aware;
    for (size_t i = 1; i < jobs.size(); ++i) EXPECT_EQ(out[i], jobs[i].placement);
    ExpectWholeWorkers(jobs, out, spec);
  }
  // A count that is not whole workers is rounded down.
  EXPECT_EQ(PlaceJobs(spec, jobs, {3, 3, 1, 3, 1})[0].NumGpus(), 2);
  // Workers of 4 GPUs find no node free enough: the job gets nothing.
  jobs[0].gpus_per_worker = 4;
  EXPECT_TRUE(PlaceJobs(spec, jobs, {4, 3, 1, 3, 1})[0].empty());
}

// Spreading takes the nodes with the most GPUs free in whole workers and,
// among those, the tightest: pairs on nodes with 3, 2 and 2 free go to the
// two nodes with 2 free, leaving the node with 3 whole for a 3-GPU job.
TEST(SchedPlacerTest, SpreadingPrefersNodesWithNoneLeftOver) {
  CountSpeed speed;
  ClusterSpec spec{3, 4};
  std::vector<JobView> jobs = {MakeJob(0, &speed, {}, 2), MakeJob(1, &speed, {}, 3),
                               MakeJob(2, &speed, Placement({{0, 1}})), MakeJob(3, &speed, Placement({{1, 2}})),
                               MakeJob(4, &speed, Placement({{2, 2}}))};
  std::vector<Placement> out = PlaceJobs(spec, jobs, {4, 3, 1, 2, 2});
  EXPECT_EQ(out[0], Placement({{1, 2}, {2, 2}}));
  EXPECT_EQ(out[1], Placement({{0, 3}}));
  ExpectWholeWorkers(jobs, out, spec);
}

// PlaceableCounts accepts a count only where PlaceJobs places every count so
// far in full.
TEST(SchedPlacerTest, PlaceableCountsRefusesWhatDoesNotFitInWorkers) {
  CountSpeed speed;
  ClusterSpec spec{2, 4};
  // One GPU held on each node: 6 free, but only 4 of them in pairs.
  std::vector<JobView> jobs = {MakeJob(0, &speed, Placement({{0, 1}})), MakeJob(1, &speed, Placement({{1, 1}})),
                               MakeJob(2, &speed, {}, 2), MakeJob(3, &speed, {}, 2), MakeJob(4, &speed)};
  PlaceableCounts counts(spec, jobs);
  EXPECT_TRUE(counts.TrySet(0, 1));
  EXPECT_TRUE(counts.TrySet(1, 1));
  EXPECT_FALSE(counts.TrySet(2, 6)) << "6 free GPUs, but 3 + 3";
  EXPECT_FALSE(counts.TrySet(2, 3)) << "not whole workers";
  EXPECT_TRUE(counts.TrySet(2, 4));
  EXPECT_EQ(counts.free(), 2);
  EXPECT_FALSE(counts.TrySet(3, 2)) << "the free GPUs are single";
  EXPECT_TRUE(counts.TrySet(4, 2));
  std::vector<Placement> out = counts.Place();
  EXPECT_EQ(out[2].NumGpus(), 4);
  EXPECT_TRUE(out[3].empty());
  EXPECT_EQ(out[4].NumGpus(), 2);
  ExpectWholeWorkers(jobs, out, spec);
}

}  // namespace
}  // namespace frugal::sched
