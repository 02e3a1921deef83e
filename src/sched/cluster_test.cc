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

JobView MakeJob(int64_t id, const SpeedEstimate* speed, Placement current = {}) {
  JobView v;
  v.id = id;
  v.speed = speed;
  v.placement = std::move(current);
  return v;
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

}  // namespace
}  // namespace frugal::sched
