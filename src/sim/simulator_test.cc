#include "frugal/sim/simulator.h"

#include <cmath>

#include <gtest/gtest.h>

namespace frugal::sim {
namespace {

// Every decoder kernel takes `fwd` (forward) or `bwd` (backward) seconds;
// embedding and head cost nothing, so all pipeline stages are equal.
class FixedCostModel : public OperatorCostModel {
 public:
  FixedCostModel(double fwd, double bwd) : fwd_(fwd), bwd_(bwd) {}
  double Seconds(const Operator& op, Pass pass) const override {
    if (op.kind == OpKind::kTensorParallelAllReduce) return 0;
    if (op.name == "embedding_lookup" || op.name == "final_layernorm" || op.name == "logits" ||
        op.name == "cross_entropy") {
      return 0;
    }
    return pass == Pass::kForward ? fwd_ : bwd_;
  }

 private:
  double fwd_, bwd_;
};

class FreeNetwork : public NetworkModel {
 public:
  double AllReduceSeconds(double, const CommGroup&, CollectiveAlgorithm) const override { return 0; }
  double AllGatherSeconds(double, const CommGroup&) const override { return 0; }
  double PointToPointSeconds(double, bool) const override { return 0; }
};

// The built-in A100 without the overhead terms (dispatch floor,
// per-micro-batch cost), so that the closed forms below hold exactly;
// overhead_test.cc tests those terms.
HardwareSpec A100() {
  Result<HardwareSpec> hw = BuiltinHardware("a100-80g");
  EXPECT_TRUE(hw.ok());
  hw->efficiency.dispatch_us = 0;
  hw->efficiency.collective_latency_us = 0;
  hw->efficiency.p2p_latency_us = 0;
  hw->efficiency.microbatch_overhead_us = 0;
  hw->efficiency.iteration_overhead_us = 0;
  return *hw;
}

// Kernels per decoder layer, and the optimizer step that follows the pipeline.
int KernelsPerLayer(const ModelSpec& m) {
  Result<Workload> w = BuildWorkload(m, WorkloadOptions{});
  int n = 0;
  for (const Operator& op : w->blocks[0].ops) n += op.kind != OpKind::kTensorParallelAllReduce;
  return n;
}

TEST(SimulatorTest, PureComputeIsTheSumOfKernelTimes) {
  const ModelSpec m = MakeTransformer("t", 4, 512, 8, 256, 1000);
  HardwareSpec hw = A100();
  hw.efficiency.kernel_overhead_us = 0;
  Simulator sim(hw, std::make_unique<FixedCostModel>(1e-3, 2e-3), std::make_unique<FreeNetwork>());
  ParallelStrategy s;
  s.micro_batch = 1;
  s.global_batch = 3;  // 3 micro-batches, no pipeline, no data parallelism.
  s.recompute = Recompute::kNone;
  Result<IterationPrediction> p = sim.Predict(m, s);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const int k = KernelsPerLayer(m);
  Result<Workload> w = BuildWorkload(m, WorkloadOptions{});
  double params = w->pre.params + w->post.params;
  for (const Block& b : w->blocks) params += b.params;
  const double optimizer = params * (2 * 12 + 2 * 2) / (hw.device.memory_bandwidth_gbs * 1e9 * hw.efficiency.memory);
  EXPECT_NEAR(p->iteration_s, 3 * 4 * k * 3e-3 + optimizer, 1e-9);
  // Full recomputation adds one forward per layer per micro-batch.
  s.recompute = Recompute::kFull;
  Result<IterationPrediction> full = sim.Predict(m, s);
  ASSERT_TRUE(full.ok());
  EXPECT_NEAR(full->iteration_s - p->iteration_s, 3 * 4 * k * 1e-3, 1e-9);
}

TEST(SimulatorTest, RooflineGemmTimeIsClosedForm) {
  HardwareSpec hw = A100();
  hw.efficiency.kernel_overhead_us = 0;
  auto cost = CreateRooflineCostModel(hw, true);
  Operator op;
  op.kind = OpKind::kMatmul;
  op.m = op.n = op.k = 8192;
  op.fwd_flops = 2.0 * 8192 * 8192 * 8192;
  op.fwd_bytes = 3.0 * 8192 * 8192 * 2;
  const double eff = MatmulEfficiency(hw.efficiency, 8192, 8192, 8192);
  EXPECT_NEAR(eff, hw.efficiency.matmul_max * std::pow(8192 / (8192 + hw.efficiency.matmul_half_dim), 3), 1e-12);
  EXPECT_NEAR(cost->Seconds(op, Pass::kForward), op.fwd_flops / (312e12 * eff), 1e-12);
  // Small GEMMs run further below peak.
  EXPECT_LT(MatmulEfficiency(hw.efficiency, 64, 64, 64), 0.5 * eff);
}

TEST(SimulatorTest, RingAllReduceTimeIsClosedForm) {
  HardwareSpec hw = A100();
  auto net = CreateAnalyticNetworkModel(hw);
  const double bytes = 1e9;
  CommGroup in_node{8, 8};
  const double bw = hw.intra_link_gbs * 1e9 * hw.efficiency.intra_link;
  EXPECT_NEAR(net->AllReduceSeconds(bytes, in_node, CollectiveAlgorithm::kRing),
              2.0 * 7 / 8 * bytes / bw + 2 * 7 * hw.intra_latency_us * 1e-6, 1e-12);
  // One rank per node across 4 nodes: the per-GPU NIC is the bottleneck.
  CommGroup across{4, 1};
  const double nic = hw.inter_node_gbps * 1e9 / 8 / hw.gpus_per_node * hw.efficiency.inter_link;
  EXPECT_NEAR(net->AllReduceSeconds(bytes, across, CollectiveAlgorithm::kRing),
              2.0 * 3 / 4 * bytes / nic + 2 * 3 * hw.inter_latency_us * 1e-6, 1e-12);
  EXPECT_EQ(net->AllReduceSeconds(bytes, CommGroup{1, 1}, CollectiveAlgorithm::kRing), 0.0);
  // Hierarchical beats a flat ring of 32 ranks with 8 per node on latency.
  CommGroup big{32, 8};
  EXPECT_LT(net->AllReduceSeconds(1e3, big, CollectiveAlgorithm::kHierarchical),
            net->AllReduceSeconds(1e3, big, CollectiveAlgorithm::kRing));
}

class BubbleTest : public ::testing::TestWithParam<std::tuple<PipelineSchedule, int, int>> {};

TEST_P(BubbleTest, MatchesClosedForm) {
  const auto [schedule, p, m] = GetParam();
  const ModelSpec model = MakeTransformer("t", 2 * p, 512, 8, 256, 1000);
  HardwareSpec hw = A100();
  Simulator sim(hw, std::make_unique<FixedCostModel>(1e-3, 2e-3), std::make_unique<FreeNetwork>());
  ParallelStrategy s;
  s.pipeline_parallel = p;
  s.global_batch = m;
  s.schedule = schedule;
  s.recompute = Recompute::kNone;
  Result<IterationPrediction> r = sim.Predict(model, s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->bubble_fraction, (p - 1.0) / (m + p - 1.0), 1e-9);
  const int k = KernelsPerLayer(model);
  const double per_mb = 2 * k * 3e-3;  // Two layers per stage, forward + backward.
  EXPECT_GE(r->iteration_s, (m + p - 1) * per_mb - 1e-9);
  EXPECT_LT(r->iteration_s, (m + p - 1) * per_mb + 0.01);  // + optimizer step.
}

INSTANTIATE_TEST_SUITE_P(Schedules, BubbleTest,
                         ::testing::Values(std::make_tuple(PipelineSchedule::kGPipe, 4, 8),
                                           std::make_tuple(PipelineSchedule::kGPipe, 8, 3),
                                           std::make_tuple(PipelineSchedule::k1F1B, 4, 8),
                                           std::make_tuple(PipelineSchedule::k1F1B, 8, 32),
                                           std::make_tuple(PipelineSchedule::k1F1B, 2, 1)));

TEST(SimulatorTest, InterleavingShrinksTheBubble) {
  const ModelSpec model = MakeTransformer("t", 16, 512, 8, 256, 1000);
  Simulator sim(A100(), std::make_unique<FixedCostModel>(1e-3, 2e-3), std::make_unique<FreeNetwork>());
  ParallelStrategy s;
  s.pipeline_parallel = 4;
  s.global_batch = 8;
  s.recompute = Recompute::kNone;
  Result<IterationPrediction> plain = sim.Predict(model, s);
  s.schedule = PipelineSchedule::kInterleaved1F1B;
  s.chunks = 2;
  Result<IterationPrediction> inter = sim.Predict(model, s);
  ASSERT_TRUE(plain.ok() && inter.ok()) << inter.status().ToString();
  // Narayanan 2021: bubble (p-1)/(v m) of the ideal time instead of (p-1)/m.
  EXPECT_NEAR(inter->bubble_fraction, (4 - 1.0) / 2 / (8 + (4 - 1.0) / 2), 1e-9);
  EXPECT_LT(inter->iteration_s, plain->iteration_s);
}

TEST(SimulatorTest, MemoryAccountingAndOom) {
  Result<ModelSpec> m = BuiltinModel("gpt-1.3b");
  ASSERT_TRUE(m.ok());
  HardwareSpec hw = A100();
  Simulator sim(hw);
  ParallelStrategy s;
  s.global_batch = 8;
  s.micro_batch = 1;
  s.recompute = Recompute::kFull;
  Result<MemoryEstimate> mem = sim.EstimateMemory(*m, s);
  ASSERT_TRUE(mem.ok());
  Result<Workload> w = BuildWorkload(*m, WorkloadOptions{});
  double params = w->pre.params + w->post.params;
  for (const Block& b : w->blocks) params += b.params;
  EXPECT_DOUBLE_EQ(mem->weights_bytes, 2 * params);
  EXPECT_DOUBLE_EQ(mem->gradients_bytes, 2 * params);
  EXPECT_DOUBLE_EQ(mem->optimizer_bytes, 12 * params);
  // Full recomputation: the 2sbh input of each of the 24 layers, one layer's
  // full activations while it is recomputed, the embedding output and fp32 logits.
  const double sbh = 2048.0 * 2048;
  const double act = 24 * 2 * sbh + w->blocks[0].act_bytes_none + 2 * sbh + w->post.act_bytes_none;
  EXPECT_NEAR(mem->activation_bytes, act, 1.0);
  EXPECT_FALSE(mem->oom());
  // ZeRO-1 shards the Adam state over data parallel ranks.
  s.data_parallel = 8;
  s.distributed_optimizer = true;
  Result<MemoryEstimate> zero = sim.EstimateMemory(*m, s);
  ASSERT_TRUE(zero.ok());
  EXPECT_DOUBLE_EQ(zero->optimizer_bytes, 12 * params / 8);

  // GPT-175B does not fit on one pipeline of 8 GPUs; it does with tp8 pp8.
  Result<ModelSpec> big = BuiltinModel("gpt-175b");
  ParallelStrategy t8;
  t8.tensor_parallel = 8;
  t8.global_batch = 8;
  Result<IterationPrediction> oom = sim.Predict(*big, t8);
  ASSERT_TRUE(oom.ok());
  EXPECT_TRUE(oom->memory.oom());
  t8.pipeline_parallel = 8;
  Result<MemoryEstimate> fits = sim.EstimateMemory(*big, t8);
  ASSERT_TRUE(fits.ok());
  EXPECT_FALSE(fits->oom());
  // GPipe holds every micro-batch, 1F1B at most p on the first stage.
  t8.global_batch = 64;
  t8.recompute = Recompute::kNone;
  Result<MemoryEstimate> f1b = sim.EstimateMemory(*big, t8);
  t8.schedule = PipelineSchedule::kGPipe;
  Result<MemoryEstimate> gpipe = sim.EstimateMemory(*big, t8);
  ASSERT_TRUE(f1b.ok() && gpipe.ok());
  EXPECT_EQ(f1b->max_in_flight, 8);
  EXPECT_EQ(gpipe->max_in_flight, 64);
  EXPECT_TRUE(gpipe->oom());
}

TEST(SimulatorTest, RejectsStrategiesThatDoNotFit) {
  Result<ModelSpec> m = BuiltinModel("gpt-1.3b");
  Simulator sim(A100());
  ParallelStrategy s;
  s.data_parallel = 3;
  s.global_batch = 8;
  EXPECT_EQ(sim.Predict(*m, s).status().code(), Status::Code::kInvalidArgument);
  s.data_parallel = 1;
  s.pipeline_parallel = 5;  // 24 layers
  EXPECT_EQ(sim.Predict(*m, s).status().code(), Status::Code::kInvalidArgument);
  s.pipeline_parallel = 4;
  s.schedule = PipelineSchedule::kInterleaved1F1B;
  s.chunks = 2;
  s.global_batch = 6;  // Not a multiple of the 4 stages.
  EXPECT_EQ(sim.Predict(*m, s).status().code(), Status::Code::kInvalidArgument);
}

TEST(SimulatorTest, DataParallelOverlapHidesCommunication) {
  Result<ModelSpec> m = BuiltinModel("gpt-1.3b");
  HardwareSpec hw = A100();
  hw.inter_node_gbps = 100;  // Slow enough that the all-reduce matters.
  Simulator sim(hw);
  ParallelStrategy s;
  s.data_parallel = 64;
  s.global_batch = 64;
  Result<IterationPrediction> overlap = sim.Predict(*m, s);
  s.overlap_dp = false;
  Result<IterationPrediction> serial = sim.Predict(*m, s);
  ASSERT_TRUE(overlap.ok() && serial.ok());
  EXPECT_GT(overlap->dp_comm_s, 0.0);
  EXPECT_NEAR(serial->dp_exposed_s, serial->dp_comm_s, 1e-9);
  EXPECT_LT(overlap->dp_exposed_s, serial->dp_exposed_s);
  EXPECT_LT(overlap->iteration_s, serial->iteration_s);
}

TEST(SimulatorTest, PredictionsAreDeterministic) {
  Result<ModelSpec> m = BuiltinModel("gpt-13b");
  Simulator sim(A100());
  ParallelStrategy s;
  s.tensor_parallel = 4;
  s.pipeline_parallel = 4;
  s.data_parallel = 4;
  s.global_batch = 128;
  s.schedule = PipelineSchedule::kInterleaved1F1B;
  s.chunks = 2;
  Result<IterationPrediction> a = sim.Predict(*m, s);
  Result<IterationPrediction> b = sim.Predict(*m, s);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(a->iteration_s, b->iteration_s);
  EXPECT_EQ(a->events, b->events);
}

}  // namespace
}  // namespace frugal::sim

namespace frugal::sim {
namespace {

TEST(ProfileDatabaseTest, MeasuredTimesWinOverRoofline) {
  Result<ProfileDatabase> db = ProfileDatabase::ParseCsv(
      "# measured on a test box\nkey,forward_us,backward_us\ngemm:1x2048x6144x2048,1000,2500\n", "p.csv");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ(db->size(), 1u);
  auto model = CreateProfiledCostModel(*db, CreateRooflineCostModel(*BuiltinHardware("a100-80g"), true));
  Operator hit;
  hit.kind = OpKind::kMatmul;
  hit.m = 2048;
  hit.n = 6144;
  hit.k = 2048;
  hit.fwd_flops = 2.0 * 2048 * 6144 * 2048;
  EXPECT_EQ(OperatorKey(hit), "gemm:1x2048x6144x2048");
  EXPECT_DOUBLE_EQ(model->Seconds(hit, Pass::kForward), 1e-3);
  EXPECT_DOUBLE_EQ(model->Seconds(hit, Pass::kBackward), 2.5e-3);
  Operator miss = hit;
  miss.m = 1024;
  EXPECT_GT(model->Seconds(miss, Pass::kForward), 0.0);
  EXPECT_LT(model->Seconds(miss, Pass::kForward), 1e-3);  // Roofline fallback.
}

TEST(ProfileDatabaseTest, ParseErrorsNameTheLine) {
  Result<ProfileDatabase> bad = ProfileDatabase::ParseCsv("key,forward_us,backward_us\ngemm:1x1x1x1,abc,1\n", "p.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("p.csv:2"), std::string::npos);
  EXPECT_FALSE(ProfileDatabase::ParseCsv("k,f\n", "p.csv").ok());
  EXPECT_EQ(ProfileDatabase::LoadCsv("/nonexistent.csv").status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace frugal::sim

namespace frugal::sim {
namespace {

TEST(NetworkModelTest, AutoPicksTheFastestAlgorithm) {
  for (const char* name : {"a100-80g", "rtx3090"}) {
    auto net = CreateAnalyticNetworkModel(*BuiltinHardware(name));
    for (double bytes : {1e3, 1e6, 1e9}) {
      const CommGroup g{16, 4};
      const double best = std::min({net->AllReduceSeconds(bytes, g, CollectiveAlgorithm::kRing),
                                    net->AllReduceSeconds(bytes, g, CollectiveAlgorithm::kTree),
                                    net->AllReduceSeconds(bytes, g, CollectiveAlgorithm::kHierarchical)});
      EXPECT_DOUBLE_EQ(net->AllReduceSeconds(bytes, g, CollectiveAlgorithm::kAuto), best) << name << " " << bytes;
    }
  }
  // Slow Ethernet between 4-GPU boxes: hierarchical wins for large gradients.
  auto slow = CreateAnalyticNetworkModel(*BuiltinHardware("rtx3090"));
  EXPECT_LT(slow->AllReduceSeconds(1e8, CommGroup{8, 4}, CollectiveAlgorithm::kHierarchical),
            slow->AllReduceSeconds(1e8, CommGroup{8, 4}, CollectiveAlgorithm::kRing));
}

}  // namespace
}  // namespace frugal::sim
