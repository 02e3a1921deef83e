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
