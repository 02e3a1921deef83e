#include "frugal/sched/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "frugal/common/random.h"
#include "frugal/sched/decision.h"
#include "policy_test_util.h"

namespace frugal::sched {
namespace {

TEST(SchedPolicyTest, UnknownNameListsKnownPolicies) {
  auto p = CreatePolicy("lottery");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("afs-p"), std::string::npos);
}

// AFS rule, hand-computed. Three GPUs, two jobs, A finishes first. Each job
// first gets one GPU (a job without GPUs has an infinite relative gain).
// Third GPU: A gains (T_A(2)-T_A(1))/T_A(1), B gains (T_B(2)-T_B(1))/T_B(2).
TEST(SchedAfsTest, GivesTheGpuToTheLargerRelativeGain) {
  TableSpeed a({1.0, 1.5});  // A: 0.5 / 1.0 = 0.5
  TableSpeed b({1.0, 1.9});  // B: 0.9 / 1.9 = 0.47 (although its naive gain 0.9 is larger)
  std::vector<JobView> jobs = {Job(0, &a, 0, 1, 2), Job(1, &b, 0, 1, 2)};
  jobs[0].remaining_progress = 10;   // A finishes first.
  jobs[1].remaining_progress = 100;
  auto out = Make("afs-l")->Schedule(Cluster(1, 3), jobs);
  EXPECT_EQ(out[0].NumGpus(), 2);
  EXPECT_EQ(out[1].NumGpus(), 1);

  TableSpeed b2({1.0, 2.2});  // B: 1.2 / 2.2 = 0.545 > 0.5
  jobs[1].speed = &b2;
  out = Make("afs-l")->Schedule(Cluster(1, 3), jobs);
  EXPECT_EQ(out[0].NumGpus(), 1);
  EXPECT_EQ(out[1].NumGpus(), 2);
}

TEST(SchedAfsTest, FinishOrderDecidesWhoPlaysA) {
  // Same curves as the first case, but B finishes first: now B's gain is
  // measured against T_B(1) (0.9) and A's against T_A(2) (0.33): B wins.
  TableSpeed a({1.0, 1.5});
  TableSpeed b({1.0, 1.9});
  std::vector<JobView> jobs = {Job(0, &a, 0, 1, 2), Job(1, &b, 0, 1, 2)};
  jobs[0].remaining_progress = 100;
  jobs[1].remaining_progress = 10;
  auto out = Make("afs-l")->Schedule(Cluster(1, 3), jobs);
  EXPECT_EQ(out[0].NumGpus(), 1);
  EXPECT_EQ(out[1].NumGpus(), 2);
}

TEST(SchedAfsTest, TwoGpusTwoJobsEachGetsOne) {
  // With two GPUs and two jobs that scale sub-linearly, no job's relative
  // gain beats a job with no GPU (relative gain 1): one each.
  TableSpeed a({1.0, 1.8});
  TableSpeed b({1.0, 1.2});
  std::vector<JobView> jobs = {Job(0, &a), Job(1, &b)};
  jobs[0].remaining_progress = 10;
  jobs[1].remaining_progress = 100;
  auto out = Make("afs-l")->Schedule(Cluster(1, 2), jobs);
  EXPECT_EQ(out[0].NumGpus(), 1);
  EXPECT_EQ(out[1].NumGpus(), 1);
}

TEST(SchedAfsPTest, NewJobIsPreferredOverOneWithMuchProgress) {
  TableSpeed s({1.0, 1.9});
  std::vector<JobView> jobs = {Job(0, &s, 0, 1, 1), Job(1, &s, 100, 1, 1)};
  jobs[0].progress = 1e6;  // Long-running: estimated to be long.
  jobs[0].placement = Placement({{0, 1}});
  auto out = Make("afs-p")->Schedule(Cluster(1, 1), jobs);
  EXPECT_EQ(out[0].NumGpus(), 0);
  EXPECT_EQ(out[1].NumGpus(), 1);
  EXPECT_TRUE(std::isnan(jobs[0].remaining_progress));  // No oracle needed.
  EXPECT_FALSE(Make("afs-p")->UsesOracle());
}

TEST(SchedSrtfTest, RunsShortestRemainingFirstAndPreempts) {
  TableSpeed s({1.0, 2.0});
  // Four GPUs, three jobs asking for two each: the two shortest run.
  std::vector<JobView> jobs = {Job(0, &s, 0, 2), Job(1, &s, 1, 2), Job(2, &s, 2, 2)};
  jobs[0].remaining_progress = 300;
  jobs[0].placement = Placement({{0, 2}});  // Running, but now the longest.
  jobs[1].remaining_progress = 200;
  jobs[2].remaining_progress = 100;
  auto out = Make("srtf")->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(out[0].NumGpus(), 0);
  EXPECT_EQ(out[1].NumGpus(), 2);
  EXPECT_EQ(out[2].NumGpus(), 2);
}

TEST(SchedSrtfTest, BackfillsSmallerJobs) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &s, 0, 3), Job(1, &s, 0, 3), Job(2, &s, 0, 1)};
  jobs[0].remaining_progress = 10;
  jobs[1].remaining_progress = 20;
  jobs[2].remaining_progress = 1000;
  auto out = Make("srtf")->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(out[0].NumGpus(), 3);
  EXPECT_EQ(out[1].NumGpus(), 0);  // Does not fit.
  EXPECT_EQ(out[2].NumGpus(), 1);  // Backfilled.
}

TEST(SchedTiresiasTest, DemotesJobsPastTheThreshold) {
  TableSpeed s({1.0});
  PolicyOptions options;
  options.tiresias_threshold_gpu_seconds = 3600;
  // One GPU. Job 0 came first and has run for a while.
  std::vector<JobView> jobs = {Job(0, &s, 0), Job(1, &s, 500)};
  jobs[0].placement = Placement({{0, 1}});
  jobs[0].attained_service = 3599;  // Still in the high-priority queue: FIFO keeps it.
  auto out = Make("tiresias", options)->Schedule(Cluster(1, 1), jobs);
  EXPECT_EQ(out[0].NumGpus(), 1);
  EXPECT_EQ(out[1].NumGpus(), 0);
  jobs[0].attained_service = 3600;  // Demoted: the newcomer preempts it.
  out = Make("tiresias", options)->Schedule(Cluster(1, 1), jobs);
  EXPECT_EQ(out[0].NumGpus(), 0);
  EXPECT_EQ(out[1].NumGpus(), 1);
  EXPECT_FALSE(Make("tiresias")->UsesOracle());
}

// Note [Held jobs]: DecideRound keeps a held job where it is, and the job
// the policy gave its GPUs to gives way.
TEST(SchedDecideRoundTest, AHeldJobKeepsItsPlacement) {
  TableSpeed s({1.0, 2.0});
  PolicyOptions options;
  options.tiresias_threshold_gpu_seconds = 3600;
  std::vector<JobView> jobs = {Job(0, &s, 0, 2, 2), Job(1, &s, 500, 1, 1), Job(2, &s, 600, 1, 1)};
  jobs[0].placement = Placement({{0, 2}});
  jobs[0].attained_service = 7200;  // Demoted: the newcomers preempt it.
  auto policy = Make("tiresias", options);
  auto d = DecideRound(*policy, Cluster(1, 2), jobs);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->placements[0].NumGpus(), 0);
  EXPECT_EQ(d->placements[1].NumGpus(), 1);

  jobs[0].Hold();  // Past its last step.
  d = DecideRound(*policy, Cluster(1, 2), jobs);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->placements[0], Placement({{0, 2}}));
  EXPECT_TRUE(d->placements[1].empty());
  EXPECT_TRUE(d->placements[2].empty());
}

TEST(SchedTiresiasTest, AttainedServiceCountsGpus) {
  // Two-dimensional LAS: a 4-GPU job accrues service four times faster, so it
  // is demoted after a quarter of the time a 1-GPU job would be.
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  PolicyOptions options;
  options.tiresias_threshold_gpu_seconds = 4000;
  std::vector<JobView> jobs = {Job(0, &s, 0, 4), Job(1, &s, 10, 4)};
  jobs[0].placement = Placement({{0, 4}});
  jobs[0].attained_service = 4 * 1000.0;  // 1,000 s on 4 GPUs.
  auto out = Make("tiresias", options)->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(out[0].NumGpus(), 0);
  EXPECT_EQ(out[1].NumGpus(), 4);
}

TEST(SchedFifoTest, HeadOfLineBlocks) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &s, 0, 2), Job(1, &s, 1, 4), Job(2, &s, 2, 1)};
  auto out = Make("fifo")->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(out[0].NumGpus(), 2);
  EXPECT_EQ(out[1].NumGpus(), 0);
  EXPECT_EQ(out[2].NumGpus(), 0);  // Would fit, but FIFO does not backfill.
}

TEST(SchedOptimusTest, GrowsTheJobWithTheLargestTimeReduction) {
  // Both jobs get one GPU; the third goes where remaining time drops most:
  // A: 100/1 - 100/1.5 = 33.3; B: 100/1 - 100/1.9 = 47.4.
  TableSpeed a({1.0, 1.5});
  TableSpeed b({1.0, 1.9});
  std::vector<JobView> jobs = {Job(0, &a, 0, 1, 2), Job(1, &b, 0, 1, 2)};
  jobs[0].remaining_progress = 100;
  jobs[1].remaining_progress = 100;
  auto out = Make("optimus")->Schedule(Cluster(1, 3), jobs);
  EXPECT_EQ(out[0].NumGpus(), 1);
  EXPECT_EQ(out[1].NumGpus(), 2);
}

TEST(SchedAfsTest, HysteresisKeepsRunningJobsWhenTheGainIsSmall) {
  // Job 0 runs on 2 GPUs; a third GPU would add 2% throughput. With the
  // default cost/horizon (30/600 = 5%) it stays on 2 GPUs.
  TableSpeed s({1.0, 1.9, 1.94});
  std::vector<JobView> jobs = {Job(0, &s, 0, 1, 3)};
  jobs[0].remaining_progress = 10;
  jobs[0].placement = Placement({{0, 2}});
  auto out = Make("afs-l")->Schedule(Cluster(1, 3), jobs);
  EXPECT_EQ(out[0].NumGpus(), 2);
  PolicyOptions no_damping;
  no_damping.stickiness_horizon = 0;
  out = Make("afs-l", no_damping)->Schedule(Cluster(1, 3), jobs);
  EXPECT_EQ(out[0].NumGpus(), 3);
}

// Note [Switch cost], contended pass, hand-computed. Two identical running
// jobs on one 4-GPU node, A (first by submission) on 3 GPUs, B on 1; rates
// 1, 1.8, 2.4, 2.9 at 1-4 GPUs. The plain AFS rule gives 2 + 2 (B's step
// 1 -> 2, 0.8 / 1.8 = 0.44, beats A's 2 -> 3, 0.6 / 1.8 = 0.33). With the
// 30 s switch cost over the 60 s contended horizon, counts other than the
// current one are worth 60 / 90 of their rate: A's step to its current 3
// GPUs (1.2 -> 2.4, gain 1.0) beats B's 1 -> 2 (1 -> 1.2, 0.17), so
// nobody is resized.
TEST(SchedAfsPTest, SwitchCostKeepsRunningJobsUnderContention) {
  TableSpeed s({1.0, 1.8, 2.4, 2.9});
  std::vector<JobView> jobs = {Job(0, &s, 0, 1, 4), Job(1, &s, 1, 1, 4)};
  for (JobView& j : jobs) {
    j.progress = 1000;
    j.max_gpus_at_max_batch = 4;
  }
  jobs[0].placement = Placement({{0, 3}});
  jobs[1].placement = Placement({{0, 1}});
  for (const std::string name : {"afs-p", "afs-goodput"}) {
    auto out = Make(name)->Schedule(Cluster(1, 4), jobs);
    EXPECT_EQ(out[0].NumGpus(), 3) << name;
    EXPECT_EQ(out[1].NumGpus(), 1) << name;
    PolicyOptions free_switch;
    free_switch.reallocation_cost = 0;
    out = Make(name, free_switch)->Schedule(Cluster(1, 4), jobs);
    EXPECT_EQ(out[0].NumGpus(), 2) << name;
    EXPECT_EQ(out[1].NumGpus(), 2) << name;
  }
}

// Note [Switch cost], leftover pass: one job on 2 of 4 GPUs (rates 1, 1.9,
// 2.2, 2.5). In the contended pass 3 or 4 GPUs are worth 2.2 or 2.5 x 60/90
// (1.47, 1.67) < 1.9, so it stays on 2; the 2 idle GPUs are then valued
// over its remaining time (1000 progress / 2.2 per s = 455 s: 2.2 x 455 /
// 485 = 2.06 > 1.9), and it grows to 4.
TEST(SchedAfsPTest, SwitchCostStillGrowsIntoIdleGpus) {
  TableSpeed s({1.0, 1.9, 2.2, 2.5});
  std::vector<JobView> jobs = {Job(0, &s, 0, 1, 4)};
  jobs[0].progress = 1000;
  jobs[0].placement = Placement({{0, 2}});
  EXPECT_EQ(Make("afs-p")->Schedule(Cluster(1, 4), jobs)[0].NumGpus(), 4);
  // A much longer contended horizon changes nothing here: the GPUs are idle.
  PolicyOptions long_horizon;
  long_horizon.contended_horizon = 6000;
  EXPECT_EQ(Make("afs-p", long_horizon)->Schedule(Cluster(1, 4), jobs)[0].NumGpus(), 4);
}

// Note [Two queues], hand-computed. One 4-GPU node, two waiting jobs that
// scale linearly (rates 1, 2, 3, 4): S is new (estimated 600 s of work), L
// has done 100,000 one-GPU seconds (long: >= 38,400 s). The plain AFS rule
// gives each a GPU, then S's step 1 -> 2 (relative gain 1 / 1) beats L's
// (1 / 2), L's 1 -> 2 (1 / 2) ties S's 2 -> 3 (1 / 2) and wins, S takes the
// last: 2 + 2. With two queues the short job gets all it can use first: 4 + 0.
TEST(SchedAfsGoodputTwoQueueTest, ShortJobGetsTheGpusBeforeALongOne) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &s, 0, 1, 4), Job(1, &s, 1, 1, 4)};
  for (JobView& j : jobs) j.max_gpus_at_max_batch = 4;
  jobs[1].progress = 1e5;
  auto plain = Make("afs-goodput")->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(plain[0].NumGpus(), 2);
  EXPECT_EQ(plain[1].NumGpus(), 2);
  auto policy = Make("afs-goodput-2q");
  EXPECT_FALSE(policy->UsesOracle());
  auto two_queues = policy->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(two_queues[0].NumGpus(), 4);
  EXPECT_EQ(two_queues[1].NumGpus(), 0);
  // Below the threshold both jobs are short and share as under afs-goodput.
  PolicyOptions high;
  high.long_job_seconds = 2e5;
  auto one_queue = Make("afs-goodput-2q", high)->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(one_queue[0].NumGpus(), 2);
  EXPECT_EQ(one_queue[1].NumGpus(), 2);
}

// A new job's prior is the prior on each GPU it asked for: a new job that
// asks for 64 GPUs is estimated at 64 x 600 s = 38,400 s, i.e. long, and
// waits while a new one-GPU job can use the GPUs.
TEST(SchedAfsGoodputTwoQueueTest, PriorScalesWithTheRequestedGpus) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &s, 0, 64, 64), Job(1, &s, 1, 1, 4)};
  for (JobView& j : jobs) j.max_gpus_at_max_batch = 4;
  auto out = Make("afs-goodput-2q")->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(out[0].NumGpus(), 0);
  EXPECT_EQ(out[1].NumGpus(), 4);
  PolicyOptions bad;
  bad.long_job_seconds = 0;
  EXPECT_FALSE(CreatePolicy("afs-goodput-2q", bad).ok());
}

// Note [Long queue order]: two long jobs (100,000 one-GPU seconds done) on
// four GPUs, linear scaling. Under the AFS rule they share 2 + 2; oldest
// first, the older one takes all four, whatever its length class (here it has
// done more, so it is later in the AFS finish order).
TEST(SchedAfsGoodputTwoQueueTest, LongJobsOldestFirst) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &s, 5, 1, 4), Job(1, &s, 1, 1, 4)};
  for (JobView& j : jobs) j.max_gpus_at_max_batch = 4;
  jobs[0].progress = 1e5;
  jobs[1].progress = 4e5;  // Older (submitted at 1 s) and a higher length class.
  auto shared = Make("afs-goodput-2q")->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(shared[0].NumGpus(), 2);
  EXPECT_EQ(shared[1].NumGpus(), 2);
  PolicyOptions fifo;
  fifo.long_queue_order = LongQueueOrder::kSubmission;
  auto oldest_first = Make("afs-goodput-2q", fifo)->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(oldest_first[0].NumGpus(), 0);
  EXPECT_EQ(oldest_first[1].NumGpus(), 4);
  // A short job still comes first.
  jobs.push_back(Job(2, &s, 9, 1, 4));
  jobs.back().max_gpus_at_max_batch = 4;
  auto with_short = Make("afs-goodput-2q", fifo)->Schedule(Cluster(1, 4), jobs);
  EXPECT_EQ(with_short[2].NumGpus(), 4);
}

// TableSpeed at 40% when the shape spans more than one node.
class SpreadSpeed : public TableSpeed {
 public:
  using TableSpeed::TableSpeed;
  double ProgressRate(const Shape& shape) const override {
    return TableSpeed::ProgressRate(shape) * (shape.size() > 1 ? 0.4 : 1.0);
  }
};

// Note [Fit-aware placement]: jobs 1 and 2 run on 2 GPUs of each node and can
// use no more; new job 0 (linear up to 4 GPUs) is given the other 4, which
// the free GPUs hold only as 2 + 2 over both nodes (rate 4 x 0.4 = 1.6).
// Fit-aware, it takes 2 GPUs on one node instead (rate 2).
TEST(SchedAfsGoodputTwoQueueTest, FitAwarePlacementAvoidsASlowSpread) {
  TableSpeed linear({1.0, 2.0, 3.0, 4.0});
  SpreadSpeed spread({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &spread, 10, 1, 4), Job(1, &linear, 0, 1, 2), Job(2, &linear, 1, 1, 2)};
  jobs[0].max_gpus_at_max_batch = 4;
  jobs[1].max_gpus_at_max_batch = jobs[2].max_gpus_at_max_batch = 2;
  jobs[1].placement = Placement({{0, 2}});
  jobs[2].placement = Placement({{1, 2}});
  PolicyOptions off;
  off.fit_aware_placement = false;
  auto plain = Make("afs-goodput-2q", off)->Schedule(Cluster(2, 4), jobs);
  EXPECT_EQ(ShapeOf(plain[0]), (Shape{2, 2}));
  auto fit = Make("afs-goodput-2q")->Schedule(Cluster(2, 4), jobs);
  EXPECT_EQ(fit[0].NumNodes(), 1);
  EXPECT_EQ(fit[0].NumGpus(), 2);
  EXPECT_EQ(fit[1], jobs[1].placement);
  EXPECT_EQ(fit[2], jobs[2].placement);
}

// Note [Promotion]: a long job (one GPU asked for) that has been in the
// system 1,000 s and got 100 GPU-seconds has service 100 s. With the knob at
// 4 (promoted from 5 x 100 = 500 s on) it is back in the short queue and the
// two jobs share 2 + 2 as under afs-goodput; with the knob at 20 (2,100 s) or
// off it waits: 4 + 0 for the new short job.
TEST(SchedAfsGoodputTwoQueueTest, StarvedLongJobIsPromoted) {
  TableSpeed s({1.0, 2.0, 3.0, 4.0});
  std::vector<JobView> jobs = {Job(0, &s, 1000, 1, 4), Job(1, &s, 0, 1, 4)};
  for (JobView& j : jobs) j.max_gpus_at_max_batch = 4;
  jobs[1].progress = 1e5;
  jobs[1].attained_service = 100;
  const ClusterView cluster{{1, 4}, 1000};
  auto off = Make("afs-goodput-2q")->Schedule(cluster, jobs);
  EXPECT_EQ(off[0].NumGpus(), 4);
  EXPECT_EQ(off[1].NumGpus(), 0);
  PolicyOptions age;
  age.promote_knob = 4;
  auto promoted = Make("afs-goodput-2q", age)->Schedule(cluster, jobs);
  EXPECT_EQ(promoted[0].NumGpus(), 2);
  EXPECT_EQ(promoted[1].NumGpus(), 2);
  age.promote_knob = 20;
  auto not_yet = Make("afs-goodput-2q", age)->Schedule(cluster, jobs);
  EXPECT_EQ(not_yet[0].NumGpus(), 4);
  EXPECT_EQ(not_yet[1].NumGpus(), 0);
}

// A job whose goodput depends on the batch: rate(n, B) = n * f(B / n) with a
// per-GPU sweet spot at 64 samples.
class BatchSpeed : public SpeedEstimate {
 public:
  double ProgressRate(const Shape& shape) const override { return ProgressRateAt(shape, 128); }
  double ProgressRateAt(const Shape& shape, int batch) const override {
    int n = 0;
    for (int g : shape) n += g;
    if (n == 0) return 0;
    double local = static_cast<double>(batch) / n;
    return n * local / (1 + (local / 64) * (local / 64));  // Peaks at local = 64.
  }
};

TEST(SchedAfsGoodputTest, BatchFollowsTheAllocation) {
  BatchSpeed speed;
  JobView job = Job(0, &speed, 0, 1, 4);
  job.batch_size = 128;
  job.min_batch_size = 32;
  job.max_batch_size = 512;
  job.max_gpus_at_max_batch = 4;
  job.remaining_progress = 100;
  auto policy = Make("afs-goodput");
  EXPECT_FALSE(policy->UsesOracle());
  std::vector<JobView> jobs = {job};
  auto placements = policy->Schedule(Cluster(1, 4), jobs);
  ASSERT_EQ(placements[0].NumGpus(), 4);
  std::vector<int> batches = policy->ChooseBatchSizes(Cluster(1, 4), jobs, placements);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0], 256);  // 4 GPUs x the 64-sample sweet spot.
  placements[0] = Placement({{0, 1}});
  batches = policy->ChooseBatchSizes(Cluster(1, 4), jobs, placements);
  EXPECT_EQ(batches[0], 64);
  // Fixed-batch policies leave batch sizes alone.
  EXPECT_TRUE(Make("afs-p")->ChooseBatchSizes(Cluster(1, 4), jobs, placements).empty());
}

TEST(SchedBatchCandidatesTest, GeometricGridIncludesEndsAndCurrent) {
  JobView job;
  job.batch_size = 100;
  job.min_batch_size = 32;
  job.max_batch_size = 512;
  std::vector<int> c = BatchSizeCandidates(job);
  EXPECT_EQ(c.front(), 32);
  EXPECT_EQ(c.back(), 512);
  EXPECT_NE(std::find(c.begin(), c.end(), 100), c.end());
  EXPECT_NE(std::find(c.begin(), c.end(), 64), c.end());
  job.min_batch_size = job.max_batch_size = 100;
  EXPECT_EQ(BatchSizeCandidates(job), std::vector<int>{100});
}

// Invariants on random cluster states: no node over-committed, no job above
// its limit, non-elastic policies give 0 or the requested count.
TEST(SchedPolicyInvariantTest, RandomStates) {
  SplitMix64 rng(7);
  std::vector<std::unique_ptr<TableSpeed>> speeds;
  for (int trial = 0; trial < 30; ++trial) {
    ClusterSpec spec{1 + static_cast<int>(rng.Below(6)), 1 + static_cast<int>(rng.Below(8))};
    int n = 1 + static_cast<int>(rng.Below(25));
    std::vector<JobView> jobs;
    std::vector<int> free(spec.num_nodes, spec.gpus_per_node);
    for (int i = 0; i < n; ++i) {
      std::vector<double> curve;
      double r = 0;
      for (int g = 0; g < 16; ++g) curve.push_back(r += rng.NextDouble());
      speeds.push_back(std::make_unique<TableSpeed>(curve));
      JobView v = Job(i, speeds.back().get(), rng.NextDouble() * 100,
                      1 + static_cast<int>(rng.Below(spec.TotalGpus())), 1 + static_cast<int>(rng.Below(20)));
      v.max_gpus = std::max(v.max_gpus, v.requested_gpus);
      v.remaining_progress = 1 + rng.NextDouble() * 1000;
      v.progress = rng.NextDouble() * 1000;
      v.attained_service = rng.NextDouble() * 1e5;
      // Some jobs already hold a valid placement.
      int node = static_cast<int>(rng.Below(spec.num_nodes));
      if (rng.Below(2) == 0 && free[node] > 0) {
        int g = 1 + static_cast<int>(rng.Below(free[node]));
        free[node] -= g;
        v.placement = Placement({{node, g}});
      }
      jobs.push_back(v);
    }
    for (const std::string& name : PolicyNames()) {
      auto out = Make(name)->Schedule(ClusterView{spec, 0}, jobs);
      ASSERT_EQ(out.size(), jobs.size());
      std::vector<int> used(spec.num_nodes, 0);
      for (size_t i = 0; i < out.size(); ++i) {
        for (const NodeShare& s : out[i].shares()) {
          ASSERT_GE(s.node, 0);
          ASSERT_LT(s.node, spec.num_nodes);
          used[s.node] += s.gpus;
        }
        int got = out[i].NumGpus();
        if (name == "fifo" || name == "srtf" || name == "tiresias") {
          EXPECT_TRUE(got == 0 || got == jobs[i].requested_gpus) << name;
        } else {
          EXPECT_LE(got, jobs[i].max_gpus) << name;
        }
      }
      for (int u : used) EXPECT_LE(u, spec.gpus_per_node) << name << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace frugal::sched
