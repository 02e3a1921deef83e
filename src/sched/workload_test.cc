#include "frugal/sched/workload.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "frugal/build_config.h"
#include "frugal/sched/workload_generator.h"
#include "test_data.h"

namespace frugal::sched {
namespace {

namespace fs = std::filesystem;
const std::string kData = SchedulerDataDir();

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ = fs::temp_directory_path() / ("frugal_wl_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++) + ".csv");
    std::ofstream(path_) << text;
  }
  ~TempFile() { fs::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(SchedWorkloadTest, LoadsPolluxWorkload) {
  FRUGAL_SKIP_WITHOUT_SCHEDULER_DATA();
  auto jobs = LoadWorkload(kData + "/pollux-workloads/workload-1.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 160u);
  EXPECT_EQ((*jobs)[0].name, "cifar10-0");
  EXPECT_EQ((*jobs)[0].submit_time, 107);
  EXPECT_EQ((*jobs)[0].num_replicas, 6);
  EXPECT_EQ((*jobs)[0].batch_size, 2048);
  for (size_t i = 1; i < jobs->size(); ++i) EXPECT_LE((*jobs)[i - 1].submit_time, (*jobs)[i].submit_time);
}

TEST(SchedWorkloadTest, MalformedRowsNameFileAndLine) {
  TempFile short_row("name,time,application,num_replicas,batch_size\na,0,ncf,1,32\nb,5,ncf,1\n");
  auto r = LoadWorkload(short_row.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r.status().message().find(short_row.path() + ":3"), std::string::npos) << r.status().message();

  TempFile bad_number("name,time,application,num_replicas,batch_size\na,0,ncf,1,32\n\nb,soon,ncf,1,32\n");
  r = LoadWorkload(bad_number.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":4"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("time"), std::string::npos);

  TempFile fractional_gpus("name,time,application,num_replicas,batch_size\na,0,ncf,1.5,32\n");
  r = LoadWorkload(fractional_gpus.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":2"), std::string::npos);

  TempFile missing_column("name,time,application,batch_size\na,0,ncf,32\n");
  r = LoadWorkload(missing_column.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_replicas"), std::string::npos);

  r = LoadWorkload("/nonexistent/workload.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
}

TEST(SchedWorkloadTest, WriteThenReadRoundTrips) {
  std::vector<JobSpec> jobs = {{"a", 0, "ncf", 1, 32768}, {"b", 60, "bert", 8, 384}};
  TempFile f("");
  ASSERT_TRUE(WriteWorkload(f.path(), jobs).ok());
  auto back = LoadWorkload(f.path());
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].application, "bert");
  EXPECT_EQ((*back)[1].num_replicas, 8);
}

TEST(SchedWorkloadTest, TailsAreAnOptionalColumn) {
  std::vector<JobSpec> jobs = {{"a", 0, "ncf", 1, 32768, 12.5}, {"b", 60, "bert", 8, 384}};
  TempFile f("");
  ASSERT_TRUE(WriteWorkload(f.path(), jobs).ok());
  auto back = LoadWorkload(f.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ((*back)[0].tail_gpu_seconds, 12.5);
  EXPECT_DOUBLE_EQ((*back)[1].tail_gpu_seconds, 0);
  TempFile bad("name,time,application,num_replicas,batch_size,tail_gpu_s\na,0,ncf,1,32,-1\n");
  auto err = LoadWorkload(bad.path());
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find(":2: tail_gpu_s must be in [0, 1e8] GPU-seconds, got -1"), std::string::npos)
      << err.status().message();
}

// Note [Workers of several GPUs]: an optional column, written only where a
// job's workers take several GPUs; it must divide the job's GPUs.
TEST(SchedWorkloadTest, WorkerSizeIsAnOptionalColumn) {
  std::vector<JobSpec> jobs = {{"a", 0, "ncf", 1, 32768}, {"b", 60, "bert", 8, 384}};
  TempFile plain("");
  ASSERT_TRUE(WriteWorkload(plain.path(), jobs).ok());
  std::string header;
  std::getline(std::ifstream(plain.path()), header);
  EXPECT_EQ(header, "name,time,application,num_replicas,batch_size");
  jobs[1].gpus_per_worker = 4;
  jobs[1].tail_gpu_seconds = 3;
  TempFile f("");
  ASSERT_TRUE(WriteWorkload(f.path(), jobs).ok());
  auto back = LoadWorkload(f.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)[0].gpus_per_worker, 1);
  EXPECT_EQ((*back)[1].gpus_per_worker, 4);
  EXPECT_DOUBLE_EQ((*back)[1].tail_gpu_seconds, 3);
  TempFile bad("name,time,application,num_replicas,batch_size,gpus_per_worker\na,0,ncf,6,32,4\n");
  auto err = LoadWorkload(bad.path());
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find(":2: gpus_per_worker must be positive and divide num_replicas (6), got 4"),
            std::string::npos)
      << err.status().message();
  TempFile zero("name,time,application,num_replicas,batch_size,gpus_per_worker\na,0,ncf,6,32,0\n");
  EXPECT_FALSE(LoadWorkload(zero.path()).ok());
}

TEST(SchedPhillyTest, BadTimestampNamesLine) {
  TempFile f("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,x\nyesterday,1,1,1,x\n");
  auto r = LoadPhillyTrace(f.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":3"), std::string::npos) << r.status().message();
}

TEST(SchedPhillyTest, GeneratesDeterministicWorkloads) {
  FRUGAL_SKIP_WITHOUT_SCHEDULER_DATA();
  auto trace = LoadPhillyTrace(kData + "/philly.csv");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_GT(trace->size(), 80000u);
  auto catalog = LoadPolluxTraces(kData + "/pollux-traces");
  ASSERT_TRUE(catalog.ok());
  WorkloadGeneratorOptions options;
  options.num_jobs = 300;
  options.cluster_gpus = 64;
  options.seed = 5;
  auto a = GenerateWorkload(*trace, *catalog, options);
  auto b = GenerateWorkload(*trace, *catalog, options);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->size(), 300u);
  std::set<std::string> apps;
  for (size_t i = 0; i < a->size(); ++i) {
    const JobSpec& j = (*a)[i];
    EXPECT_EQ(j.name, (*b)[i].name);
    EXPECT_EQ(j.submit_time, (*b)[i].submit_time);
    EXPECT_NE(catalog->Find(j.application), nullptr);
    EXPECT_GE(j.num_replicas, 1);
    EXPECT_LE(j.num_replicas, 64);
    if (i > 0) {
      EXPECT_LE((*a)[i - 1].submit_time, j.submit_time);
    }
    apps.insert(j.application);
  }
  EXPECT_GE(apps.size(), 2u);  // The GPU-time mix maps onto several applications.
  options.seed = 6;
  auto c = GenerateWorkload(*trace, *catalog, options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)[5].submit_time + (*c)[9].submit_time, (*a)[5].submit_time + (*a)[9].submit_time);
}

}  // namespace
}  // namespace frugal::sched
