#include "frugal/sim/workload.h"

#include <gtest/gtest.h>

#include <memory>

namespace frugal::sim {
namespace {

double SumGemmFlops(const Block& blk) {
  double f = 0;
  for (const Operator& op : blk.ops) {
    if (op.kind == OpKind::kMatmul) f += op.fwd_flops;
  }
  return f;
}

TEST(WorkloadTest, TransformerLayerFlopsMatchMegatronFormula) {
  const ModelSpec m = MakeTransformer("t", 4, 1024, 16, 512, 50000);
  for (int t : {1, 2, 4}) {
    WorkloadOptions opt;
    opt.tensor_parallel = t;
    opt.micro_batch = 2;
    Result<Workload> w = BuildWorkload(m, opt);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(w->blocks.size(), 4u);
    const double b = 2, s = 512, h = 1024;
    EXPECT_DOUBLE_EQ(SumGemmFlops(w->blocks[0]), (24 * b * s * h * h + 4 * b * s * s * h) / t);
    int allreduces = 0;
    for (const Operator& op : w->blocks[0].ops) allreduces += op.kind == OpKind::kTensorParallelAllReduce;
    EXPECT_EQ(allreduces, 2);
    // Logits GEMM: 2 b s h V / t.
    EXPECT_DOUBLE_EQ(SumGemmFlops(w->post), 2 * b * s * h * 50000 / t);
  }
}

TEST(WorkloadTest, ParameterCountOfGpt175b) {
  Result<ModelSpec> m = BuiltinModel("gpt-175b");
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR(m->ParameterCount() / 1e9, 174.6, 0.5);
  // Per-device parameters sum to the model's (TP 1, untied head counted once).
  Result<Workload> w = BuildWorkload(*m, WorkloadOptions{});
  ASSERT_TRUE(w.ok());
  double sum = w->pre.params;
  for (const Block& b : w->blocks) sum += b.params;
  EXPECT_NEAR(sum / m->ParameterCount(), 1.0, 1e-3);
}

TEST(WorkloadTest, ZooModelParameterCounts) {
  Result<ModelSpec> mlp = BuiltinModel("mlp");
  ASSERT_TRUE(mlp.ok());
  EXPECT_DOUBLE_EQ(mlp->ParameterCount(), 784.0 * 2048 + 2048 + 2048.0 * 2048 + 2048 + 2048.0 * 10 + 10);
  Result<ModelSpec> cnn = BuiltinModel("cnn");
  ASSERT_TRUE(cnn.ok());
  EXPECT_DOUBLE_EQ(cnn->ParameterCount(), 320.0 + 18496 + 3136.0 * 512 + 512 + 5130);
  Result<ModelSpec> resnet = BuiltinModel("resnet18");
  ASSERT_TRUE(resnet.ok());
  EXPECT_DOUBLE_EQ(resnet->ParameterCount(), 11172810);  // As src/models builds it.
}

TEST(WorkloadTest, ConvFlopsAreImplicitGemm) {
  Result<ModelSpec> cnn = BuiltinModel("cnn");
  WorkloadOptions opt;
  opt.micro_batch = 8;
  Result<Workload> w = BuildWorkload(*cnn, opt);
  ASSERT_TRUE(w.ok());
  const Operator& conv2 = w->blocks[1].ops[0];
  EXPECT_EQ(conv2.kind, OpKind::kConv);
  EXPECT_DOUBLE_EQ(conv2.fwd_flops, 2.0 * 8 * 14 * 14 * 64 * 32 * 9);
}

// Note [Recorded workloads]: a recorded module scales with the batch, its
// parameters do not, and the Frugal predictions take it like a zoo model.
TEST(WorkloadTest, RecordedWorkloadScalesWithTheBatch) {
  auto w = std::make_shared<Workload>();
  Block blk;
  blk.name = "recorded";
  Operator mm;
  mm.name = "aten::addmm";
  mm.kind = OpKind::kMatmul;
  mm.m = 8;
  mm.n = 64;
  mm.k = 32;
  mm.fwd_flops = 2.0 * 8 * 64 * 32;
  blk.ops.push_back(mm);
  blk.params = 32 * 64 + 64;
  blk.act_bytes_none = blk.act_bytes_selective = blk.act_bytes_full = 1000;
  w->blocks.push_back(blk);
  w->total_params = blk.params;
  ModelSpec model;
  model.name = "mine";
  model.is_transformer = false;
  model.bytes_per_value = 4;
  model.recorded = w;
  model.recorded_batch = 8;
  EXPECT_DOUBLE_EQ(model.ParameterCount(), 32 * 64 + 64);
  WorkloadOptions opt;
  opt.micro_batch = 32;
  Result<Workload> big = BuildWorkload(model, opt);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->blocks[0].ops[0].m, 32);
  EXPECT_DOUBLE_EQ(big->blocks[0].ops[0].fwd_flops, 4 * mm.fwd_flops);
  EXPECT_DOUBLE_EQ(big->blocks[0].act_bytes_none, 4000);
  EXPECT_DOUBLE_EQ(big->total_params, w->total_params);
  EXPECT_DOUBLE_EQ(ModelFlopsPerSample(model), mm.fwd_flops / 8);
  opt.tensor_parallel = 2;
  EXPECT_FALSE(BuildWorkload(model, opt).ok());
  model.recorded_batch = 0;
  EXPECT_FALSE(BuildWorkload(model, WorkloadOptions{}).ok());
}

TEST(WorkloadTest, RejectsImpossibleShapes) {
  const ModelSpec m = MakeTransformer("t", 4, 1024, 16, 512, 50000);
  WorkloadOptions opt;
  opt.tensor_parallel = 3;
  Result<Workload> w = BuildWorkload(m, opt);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("does not divide"), std::string::npos);
  Result<ModelSpec> mlp = BuiltinModel("mlp");
  opt.tensor_parallel = 2;
  EXPECT_FALSE(BuildWorkload(*mlp, opt).ok());
  EXPECT_EQ(BuiltinModel("gpt-9000").status().code(), Status::Code::kNotFound);
}

TEST(WorkloadTest, RecomputationShrinksSavedActivations) {
  const ModelSpec m = MakeTransformer("t", 2, 4096, 32, 2048, 51200);
  WorkloadOptions opt;
  opt.tensor_parallel = 8;
  opt.sequence_parallel = true;
  Result<Workload> w = BuildWorkload(m, opt);
  ASSERT_TRUE(w.ok());
  const Block& b = w->blocks[0];
  const double sbh = 2048.0 * 4096;
  EXPECT_DOUBLE_EQ(b.act_bytes_selective, sbh * 34 / 8);  // Korthikanti eq. for SP + selective.
  EXPECT_GT(b.act_bytes_none, b.act_bytes_selective);
  EXPECT_GT(b.act_bytes_selective, b.act_bytes_full);
}

}  // namespace
}  // namespace frugal::sim
