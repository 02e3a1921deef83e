#include "frugal/profiler/profiler.h"

#include <gtest/gtest.h>

#include "frugal/sim/cost_model.h"

namespace frugal::profiler {
namespace {

TEST(ProfilerTest, TimesEveryOperatorAndTheSimulatorReadsTheResult) {
  auto model = sim::BuiltinModel("cnn");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  sim::WorkloadOptions w;
  w.micro_batch = 8;
  auto workload = sim::BuildWorkload(*model, w);
  ASSERT_TRUE(workload.ok());
  std::vector<sim::Operator> ops = sim::DistinctOperators(*workload);
  ProfileOptions o;
  o.warmup = 0;
  o.repeats = 1;
  auto timings = ProfileOperators(ops, o);
  ASSERT_TRUE(timings.ok()) << timings.status().ToString();
  ASSERT_EQ(timings->size(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ((*timings)[i].key, sim::OperatorKey(ops[i]));
    EXPECT_GT((*timings)[i].forward_s, 0);
    EXPECT_GT((*timings)[i].backward_s, 0);
  }
  auto db = sim::ProfileDatabase::ParseCsv(ProfileCsv(*timings, "test"), "profile");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ(db->size(), ops.size());
  auto hw = sim::BuiltinHardware("cpu-local");
  auto cost = sim::CreateProfiledCostModel(*db, sim::CreateRooflineCostModel(*hw, false));
  EXPECT_NEAR(cost->Seconds(ops[0], sim::Pass::kForward), (*timings)[0].forward_s, 1e-9);
}

TEST(ProfilerTest, MachineMeasurementBecomesAHardwareDescription) {
  ProfileOptions o;
  o.warmup = 0;
  o.repeats = 1;
  auto m = MeasureMachine(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->matmul_tflops, 0);
  EXPECT_GT(m->memory_bandwidth_gbs, 0);
  EXPECT_GT(m->sparsify_gbs, 0);
  EXPECT_GT(m->sparse_optimizer_gbs, 0);
  EXPECT_GT(m->combine_gbs, 0);
  sim::HardwareSpec hw = ApplyMeasurement(*sim::BuiltinHardware("cpu-local"), *m, "this-machine");
  EXPECT_EQ(hw.device.peak_tflops_fp32, m->matmul_tflops);
  EXPECT_EQ(hw.host.cpu_combine_gbs, m->combine_gbs);
  auto parsed = sim::ParseHardwareToml(sim::HardwareToToml(hw), "roundtrip");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->name, "this-machine");
}

// Note [Runs per sample]: a small operator runs many times per sample, so the
// sync is not counted into its time; with min_sample_s = 0 it runs once.
TEST(ProfilerTest, SmallOperatorsRunSeveralTimesPerSample) {
  sim::Operator op;
  op.kind = sim::OpKind::kMatmul;
  op.batch = 1;
  op.m = op.n = op.k = 8;
  ProfileOptions o;
  o.warmup = 0;
  o.repeats = 3;
  // 20 ms per sample: far above an 8x8x8 GEMM even on a loaded machine, so
  // the calibration must batch runs whatever the scheduler does.
  o.min_sample_s = 20e-3;
  auto batched = ProfileOperators({op}, o);
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  ASSERT_EQ(batched->size(), 1u);
  EXPECT_GT((*batched)[0].forward_runs, 1);
  EXPECT_GT((*batched)[0].backward_runs, 1);
  EXPECT_GT((*batched)[0].forward_s, 0);
  // A run of an 8x8x8 GEMM is far below the 20 ms sample.
  EXPECT_LT((*batched)[0].forward_s, 1e-3);
  o.min_sample_s = 0;
  auto single = ProfileOperators({op}, o);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  EXPECT_EQ((*single)[0].forward_runs, 1);
  EXPECT_EQ((*single)[0].backward_runs, 1);
}

TEST(ProfilerTest, BadOptionsAreErrors) {
  ProfileOptions o;
  o.repeats = 0;
  EXPECT_FALSE(ProfileOperators({}, o).ok());
  o.repeats = 1;
  o.min_sample_s = -1;
  EXPECT_FALSE(ProfileOperators({}, o).ok());
  o.min_sample_s = 1e-3;
  o.device = "toaster";
  sim::Operator op;
  op.kind = sim::OpKind::kMatmul;
  op.m = op.n = op.k = 4;
  EXPECT_FALSE(ProfileOperators({op}, o).ok());
}

}  // namespace
}  // namespace frugal::profiler
