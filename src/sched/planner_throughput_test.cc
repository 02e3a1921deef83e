#include "frugal/sched/planner_throughput.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "frugal/sched/simulator.h"

namespace frugal::sched {
namespace {

namespace fs = std::filesystem;

class SchedPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("frugal_planner_apps_" + std::to_string(::getpid()) + ".csv");
  }
  void TearDown() override { fs::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  fs::path path_;
};

TEST_F(SchedPlannerTest, StepTimesComeFromThePlanner) {
  Write("application,model,hardware,total_samples\nresnet,resnet18,a100-80g,1e6\n");
  ApplicationCatalog catalog;
  Status st = LoadPlannerApplications(path_.string(), &catalog);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const ThroughputModel& tp = catalog.Find("resnet")->throughput();
  double one = tp.StepTime({1}, 512);
  double four = tp.StepTime({4}, 512);
  ASSERT_TRUE(std::isfinite(one));
  EXPECT_GT(one, 0);
  EXPECT_LT(four, one);  // Data parallelism helps.
  // Progress is counted in samples: the rate is samples per second.
  EXPECT_NEAR(catalog.Find("resnet")->ProgressRate({1}, 512, 0), 512 / one, 1e-9 * 512 / one);
}

TEST_F(SchedPlannerTest, PoliciesScheduleUnmeasuredJobs) {
  Write("application,model,hardware,total_samples\nresnet,resnet18,a100-80g,2e6\n");
  ApplicationCatalog catalog;
  ASSERT_TRUE(LoadPlannerApplications(path_.string(), &catalog).ok());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back({"r" + std::to_string(i), 100.0 * i, "resnet", 2, 512});
  SimulatorOptions options;
  options.cluster = {2, 4};
  for (const std::string& name : {std::string("tiresias"), std::string("afs-p")}) {
    auto policy = CreatePolicy(name);
    ASSERT_TRUE(policy.ok());
    auto r = Simulator(catalog, **policy, options).Run(jobs);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const JobResult& j : r->jobs) EXPECT_GE(j.jct, j.best_runtime * (1 - 1e-9)) << name;
  }
}

TEST_F(SchedPlannerTest, UnknownModelNamesTheLine) {
  Write("application,model,hardware,total_samples\nok,resnet18,a100-80g,1e6\nbad,resnet999,a100-80g,1e6\n");
  ApplicationCatalog catalog;
  Status st = LoadPlannerApplications(path_.string(), &catalog);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path_.string() + ":3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("resnet999"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace frugal::sched
