#include "frugal/sched/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "frugal/build_config.h"
#include "frugal/common/random.h"
#include "table_model.h"
#include "test_data.h"

namespace frugal::sched {
namespace {

const std::string kTraces = SchedulerDataDir() + "/pollux-traces";

// One application: 100 samples/s on one GPU, 180 on two, 6,000 samples.
ApplicationCatalog TableCatalog() {
  ApplicationCatalog c;
  auto app = std::make_shared<Application>(
      "toy", std::make_shared<TableThroughputModel>(std::vector<std::pair<int, double>>{{1, 100}, {2, 180}}),
      std::make_shared<SampleCountConvergence>(6000));
  EXPECT_TRUE(c.Add(app).ok());
  return c;
}

JobSpec Spec(const std::string& name, double t, const std::string& app, int gpus, int batch) {
  JobSpec j;
  j.name = name;
  j.submit_time = t;
  j.application = app;
  j.num_replicas = gpus;
  j.batch_size = batch;
  return j;
}

Result<SimulationResult> RunPolicy(const ApplicationCatalog& catalog, const std::string& policy,
                                   const std::vector<JobSpec>& jobs, SimulatorOptions options = {}) {
  auto p = CreatePolicy(policy);
  if (!p.ok()) return p.status();
  Simulator sim(catalog, **p, options);
  return sim.Run(jobs);
}

TEST(SchedSimulatorTest, SingleJobHandComputed) {
  ApplicationCatalog catalog = TableCatalog();
  // Submitted at t=10; first round at t=60; 30 s start-up; 6,000 samples at
  // 100 samples/s on the one GPU it asked for: done at 60 + 30 + 60 = 150.
  SimulatorOptions options;
  options.cluster = {1, 1};
  auto r = RunPolicy(catalog, "fifo", {Spec("a", 10, "toy", 1, 32)}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(r->jobs[0].start_time, 60);
  EXPECT_NEAR(r->jobs[0].finish_time, 150, 1e-6);
  EXPECT_NEAR(r->avg_jct, 140, 1e-6);
  EXPECT_NEAR(r->jobs[0].gpu_seconds, 90, 1e-6);
  EXPECT_EQ(r->num_reallocations, 0);
}

TEST(SchedSimulatorTest, TwoJobsQueueUnderFifo) {
  ApplicationCatalog catalog = TableCatalog();
  SimulatorOptions options;
  options.cluster = {1, 1};
  // b waits for a (done at 90, see above with submit 0): its round is at 120,
  // then 30 + 60 s: finishes at 210.
  auto r = RunPolicy(catalog, "fifo", {Spec("a", 0, "toy", 1, 32), Spec("b", 0, "toy", 1, 32)}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->jobs[0].finish_time, 90, 1e-6);
  EXPECT_NEAR(r->jobs[1].finish_time, 210, 1e-6);
  EXPECT_NEAR(r->makespan, 210, 1e-6);
  EXPECT_NEAR(r->median_jct, 150, 1e-6);
}

TEST(SchedSimulatorTest, ElasticJobUsesBothGpus) {
  ApplicationCatalog catalog = TableCatalog();
  SimulatorOptions options;
  options.cluster = {1, 2};
  // afs-p grows the lone job to two GPUs: 30 + 6000/180 s.
  auto r = RunPolicy(catalog, "afs-p", {Spec("a", 0, "toy", 1, 32)}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].max_gpus_held, 2);
  EXPECT_NEAR(r->jobs[0].jct, 30 + 6000.0 / 180, 1e-6);
}

// Note [Held jobs]: past its last step a job keeps its GPUs for its tail
// (200 GPU-seconds on its two GPUs: 100 s); b, arriving meanwhile, waits for
// them instead of shrinking it.
TEST(SchedSimulatorTest, AJobHoldsItsGpusThroughItsTail) {
  ApplicationCatalog catalog = TableCatalog();
  SimulatorOptions options;
  options.cluster = {1, 2};
  JobSpec a = Spec("a", 0, "toy", 1, 32);
  a.tail_gpu_seconds = 200;
  auto r = RunPolicy(catalog, "afs-p", {a, Spec("b", 90, "toy", 1, 32)}, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double last_step = 30 + 6000.0 / 180;
  EXPECT_NEAR(r->jobs[0].finish_time, last_step + 100, 1e-6);
  EXPECT_NEAR(r->jobs[0].gpu_seconds, 2 * (last_step + 100), 1e-6) << "both GPUs, through the tail";
  EXPECT_EQ(r->jobs[0].num_reallocations, 0);
  EXPECT_NEAR(r->jobs[0].best_runtime, last_step + 100, 1e-6) << "on its 2 GPUs";
  EXPECT_DOUBLE_EQ(r->jobs[1].start_time, 180) << "the first round after a ends";
}

TEST(SchedSimulatorTest, UserErrorsAreReported) {
  ApplicationCatalog catalog = TableCatalog();
  SimulatorOptions options;
  options.cluster = {1, 2};
  auto r = RunPolicy(catalog, "fifo", {Spec("a", 0, "missing", 1, 32)}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown application 'missing'"), std::string::npos);
  r = RunPolicy(catalog, "fifo", {Spec("big", 0, "toy", 3, 32)}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("asks for 3 GPUs"), std::string::npos);
  // Batch 1 cannot be split over two GPUs.
  r = RunPolicy(catalog, "fifo", {Spec("tiny", 0, "toy", 2, 1)}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot run on 2 GPUs"), std::string::npos) << r.status().message();
}

// A policy that over-commits: the simulator must refuse, not simulate it.
class GreedyBugPolicy : public Policy {
 public:
  std::string Name() const override { return "bug"; }
  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    return std::vector<Placement>(jobs.size(), Placement({{0, cluster.spec.gpus_per_node}}));
  }
};

TEST(SchedSimulatorTest, OverCommittingPolicyIsAnError) {
  ApplicationCatalog catalog = TableCatalog();
  GreedyBugPolicy bug;
  SimulatorOptions options;
  options.cluster = {1, 2};
  Simulator sim(catalog, bug, options);
  auto r = sim.Run({Spec("a", 0, "toy", 1, 32), Spec("b", 0, "toy", 1, 32)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInternal);
  EXPECT_NE(r.status().message().find("over-committed"), std::string::npos);
}

// Delegates to a policy and checks every round's final placements (after
// DecideRound's Note [Held jobs], which ChooseBatchSizes is shown): every node
// share whole workers (Note [Workers of several GPUs] in placer.cc).
class WholeWorkerCheck : public Policy {
 public:
  explicit WholeWorkerCheck(const Policy& inner) : inner_(inner) {}
  std::string Name() const override { return inner_.Name(); }
  bool UsesOracle() const override { return inner_.UsesOracle(); }
  std::vector<Placement> Schedule(const ClusterView& cluster, const std::vector<JobView>& jobs) const override {
    return inner_.Schedule(cluster, jobs);
  }
  std::vector<int> ChooseBatchSizes(const ClusterView& cluster, const std::vector<JobView>& jobs,
                                    const std::vector<Placement>& placements) const override {
    ++rounds_;
    for (size_t i = 0; i < jobs.size(); ++i) {
      for (const NodeShare& s : placements[i].shares()) {
        if (s.gpus % jobs[i].gpus_per_worker != 0) ++bad_shares_;
        if (jobs[i].gpus_per_worker > 1) ++shares_of_several_;
      }
    }
    return inner_.ChooseBatchSizes(cluster, jobs, placements);
  }
  long rounds() const { return rounds_; }
  long bad_shares() const { return bad_shares_; }
  long shares_of_several() const { return shares_of_several_; }

 private:
  const Policy& inner_;
  // One simulation at a time (the test's).
  mutable long rounds_ = 0;
  mutable long bad_shares_ = 0;
  mutable long shares_of_several_ = 0;
};

// One application that scales to 8 GPUs (100, 180, 320, 560 samples/s on 1,
// 2, 4, 8), 12,000 samples.
ApplicationCatalog ScalingCatalog() {
  ApplicationCatalog c;
  const std::vector<std::pair<int, double>> points = {{1, 100}, {2, 180}, {4, 320}, {8, 560}};
  auto app = std::make_shared<Application>("scale", std::make_shared<TableThroughputModel>(points),
                                           std::make_shared<SampleCountConvergence>(12000));
  EXPECT_TRUE(c.Add(app).ok());
  return c;
}

JobSpec WorkerSpec(const std::string& name, double t, int gpus, int unit) {
  JobSpec j = Spec(name, t, "scale", gpus, 64);
  j.gpus_per_worker = unit;
  return j;
}

// Note [Workers of several GPUs] through the simulator: jobs of 2-GPU workers
// among one-GPU ones (and one of 3-GPU workers, one with a tail held past its
// last step) on three 4-GPU nodes finish under every policy, and no round
// ever places a share that is not whole workers.
TEST(SchedSimulatorTest, WorkersOfSeveralGpusUnderEveryPolicy) {
  ApplicationCatalog catalog = ScalingCatalog();
  SimulatorOptions options;
  options.cluster = {3, 4};
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 12; ++i) {
    const bool pairs = i % 3 != 2;
    jobs.push_back(WorkerSpec("j" + std::to_string(i), 40.0 * i, pairs ? 2 * (1 + i % 2) : 1 + i % 2, pairs ? 2 : 1));
  }
  jobs.push_back(WorkerSpec("threes", 100, 6, 3));
  jobs[4].tail_gpu_seconds = 120;
  for (const std::string& name : PolicyNames()) {
    auto policy = CreatePolicy(name);
    ASSERT_TRUE(policy.ok());
    WholeWorkerCheck check(**policy);
    Simulator sim(catalog, check, options);
    auto r = sim.Run(jobs);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    ASSERT_EQ(r->jobs.size(), jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_GE(r->jobs[i].finish_time, jobs[i].submit_time) << name << " " << jobs[i].name;
      EXPECT_EQ(r->jobs[i].max_gpus_held % jobs[i].gpus_per_worker, 0) << name << " " << jobs[i].name;
      EXPECT_GE(r->jobs[i].jct, r->jobs[i].best_runtime * (1 - 1e-9)) << name << " " << jobs[i].name;
    }
    EXPECT_GT(check.rounds(), 0) << name;
    EXPECT_GT(check.shares_of_several(), 0) << name;
    EXPECT_EQ(check.bad_shares(), 0) << name;
  }
}

TEST(SchedSimulatorTest, WorkersThatCannotBePlacedAreUserErrors) {
  ApplicationCatalog catalog = ScalingCatalog();
  SimulatorOptions options;
  options.cluster = {3, 4};
  auto r = RunPolicy(catalog, "fifo", {WorkerSpec("odd", 0, 3, 2)}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("workers of 2"), std::string::npos) << r.status().message();
  // Three 4-GPU nodes hold 9 GPUs in workers of 3, not 12.
  r = RunPolicy(catalog, "fifo", {WorkerSpec("big", 0, 12, 3)}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("holds 9"), std::string::npos) << r.status().message();
  r = RunPolicy(catalog, "fifo", {WorkerSpec("wide", 0, 8, 8)}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("holds 0"), std::string::npos) << r.status().message();
  EXPECT_TRUE(RunPolicy(catalog, "fifo", {WorkerSpec("fits", 0, 9, 3)}, options).ok());
}

// Random workloads on the real traces: every job completes, no job beats its
// best possible running time, GPU use never exceeds the cluster, and two runs
// with the same seed are identical.
class SchedRandomWorkloadTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (!HaveSchedulerData()) return;  // each test skips (SetUp)
    auto loaded = LoadPolluxTraces(kTraces);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    catalog_ = new ApplicationCatalog(std::move(loaded).value());
  }
  static void TearDownTestSuite() { delete catalog_; }
  void SetUp() override { FRUGAL_SKIP_WITHOUT_SCHEDULER_DATA(); }

  static std::vector<JobSpec> RandomWorkload(uint64_t seed, int n) {
    struct Kind {
      const char* app;
      int gpus;
      int batch;
    };
    // Short configurations so the suite stays fast.
    const Kind kinds[] = {{"ncf", 1, 32768}, {"ncf", 2, 32768}, {"cifar10", 8, 2048}, {"bert", 8, 384},
                          {"cifar10", 4, 1024}};
    SplitMix64 rng(seed);
    std::vector<JobSpec> jobs;
    double t = 0;
    for (int i = 0; i < n; ++i) {
      t += rng.NextDouble() * 300;
      const Kind& k = kinds[rng.Below(5)];
      jobs.push_back(Spec(std::string(k.app) + "-" + std::to_string(i), std::floor(t), k.app, k.gpus, k.batch));
    }
    return jobs;
  }
  static ApplicationCatalog* catalog_;
};
ApplicationCatalog* SchedRandomWorkloadTest::catalog_ = nullptr;

TEST_P(SchedRandomWorkloadTest, Invariants) {
  SimulatorOptions options;
  options.cluster = {4, 4};
  for (uint64_t seed : {1, 2}) {
    std::vector<JobSpec> jobs = RandomWorkload(seed, 25);
    auto r = RunPolicy(*catalog_, GetParam(), jobs, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->jobs.size(), jobs.size());
    double gpu_seconds = 0;
    for (const JobResult& j : r->jobs) {
      EXPECT_GE(j.finish_time, j.submit_time) << j.name;
      EXPECT_GE(j.jct, j.best_runtime * (1 - 1e-9)) << j.name << " under " << GetParam();
      EXPECT_LE(j.max_gpus_held, 16);
      gpu_seconds += j.gpu_seconds;
    }
    EXPECT_GT(r->gpu_utilization, 0);
    EXPECT_LE(r->gpu_utilization, 1 + 1e-9);
    EXPECT_LE(gpu_seconds, 16 * r->makespan * (1 + 1e-9));

    auto again = RunPolicy(*catalog_, GetParam(), jobs, options);
    ASSERT_TRUE(again.ok());
    for (size_t i = 0; i < jobs.size(); ++i) {
      EXPECT_EQ(r->jobs[i].finish_time, again->jobs[i].finish_time);
      EXPECT_EQ(r->jobs[i].num_reallocations, again->jobs[i].num_reallocations);
    }
  }
}

// The same workloads with every even-sized job run in 2-GPU workers: every
// job completes and no round places a share that is not whole workers.
TEST_P(SchedRandomWorkloadTest, WorkersOfTwoGpus) {
  SimulatorOptions options;
  options.cluster = {4, 4};
  std::vector<JobSpec> jobs = RandomWorkload(3, 25);
  for (JobSpec& j : jobs) j.gpus_per_worker = j.num_replicas % 2 == 0 ? 2 : 1;
  auto policy = CreatePolicy(GetParam());
  ASSERT_TRUE(policy.ok());
  WholeWorkerCheck check(**policy);
  auto r = Simulator(*catalog_, check, options).Run(jobs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_GE(r->jobs[i].jct, r->jobs[i].best_runtime * (1 - 1e-9)) << jobs[i].name;
    EXPECT_EQ(r->jobs[i].max_gpus_held % jobs[i].gpus_per_worker, 0) << jobs[i].name;
  }
  EXPECT_GT(check.shares_of_several(), 0);
  EXPECT_EQ(check.bad_shares(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, SchedRandomWorkloadTest, ::testing::ValuesIn(PolicyNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

TEST(SchedJobResultsTest, WritesOneRowPerJob) {
  ApplicationCatalog catalog = TableCatalog();
  SimulatorOptions options;
  options.cluster = {1, 1};
  auto r = RunPolicy(catalog, "fifo", {Spec("a", 0, "toy", 1, 32), Spec("b", 5, "toy", 1, 32)}, options);
  ASSERT_TRUE(r.ok());
  std::string path = std::filesystem::temp_directory_path() / ("frugal_jobs_" + std::to_string(::getpid()) + ".csv");
  ASSERT_TRUE(WriteJobResults(path, r.value()).ok());
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 3);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace frugal::sched
