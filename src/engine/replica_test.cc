#include "frugal/engine/replica.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/engine/run_config.h"
#include "testing/test_world.h"

namespace frugal::engine {
namespace {

// A one-rank replica of a small linear model, trained for `steps`
// iterations, then begun on the next one (where a snapshot is taken). One
// rank sends nothing over a transport: in-process only.
struct OneRank {
  explicit OneRank(int staleness, uint64_t seed) {
    torch::manual_seed(seed);
    model = torch::nn::Linear(8, 3);
    RunConfig c;
    c.distributed.staleness = staleness;
    c.distributed.density = 0.5;
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
    replica = std::move(Replica::Create(MakeReplicaOptions(c, [](int64_t) { return 0.1; }), named,
                                        world.ranks.at(0).get())
                            .value());
  }
  void Step(int64_t t) {
    ASSERT_TRUE(replica->BeginIteration(t).ok());
    model->forward(torch::arange(16, torch::kFloat32).view({2, 8}) / 16).pow(2).sum().backward();
    ASSERT_TRUE(replica->EndBackward().ok());
  }
  std::vector<torch::Tensor> Params() {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }

  comm::testing::World world = comm::testing::MakeWorld(comm::testing::Backend::kInProc, {"a"});
  torch::nn::Linear model{nullptr};
  std::unique_ptr<Replica> replica;
};

// --leader-residual reaches the step pipeline's collective through the
// resolved plan: the replica options carry the leader mode it names.
TEST(ReplicaTest, LeaderResidualOptionReachesThePipeline) {
  auto lr = [](int64_t) { return 0.1; };
  RunConfig c;
  ASSERT_TRUE(SetOption(&c, "sync", "step").ok());
  EXPECT_EQ(MakeReplicaOptions(ResolvePlan(c, HostFacts{}), lr).pipeline.leader, collective::LeaderMode::kMerge);
  ASSERT_TRUE(SetOption(&c, "leader-residual", "true").ok());
  const RunConfig plan = ResolvePlan(c, HostFacts{});
  EXPECT_TRUE(plan.distributed.leader_residual);
  const ReplicaOptions ro = MakeReplicaOptions(plan, lr);
  EXPECT_TRUE(ro.gradient_pipeline);
  EXPECT_EQ(ro.pipeline.leader, collective::LeaderMode::kResidual);
}

// Note [Parameters from masters]: at staleness 0 a snapshot's parameters
// are its masters, so a joiner can be sent the masters alone; at staleness
// 1 they are one update behind and the check must say so.
TEST(ReplicaTest, ParametersAreTheMastersOnlyAtStalenessZero) {
  for (int staleness : {0, 1}) {
    OneRank a(staleness, 1);
    for (int64_t t = 0; t < 3; ++t) a.Step(t);
    ASSERT_TRUE(a.replica->BeginIteration(3).ok());
    auto state = a.replica->SavePipelineState(GradientPipeline::StateParts::kShared);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ(a.replica->ParametersAreMasters(), staleness == 0) << "staleness " << staleness;
    if (staleness == 0) {
      OneRank joiner(staleness, 2);  // other initial values
      ASSERT_TRUE(joiner.replica->LoadStateWithMastersAsParameters(*state, /*residuals=*/false).ok());
      ASSERT_TRUE(joiner.replica->BeginIteration(3).ok());  // keeps the loaded parameters
      auto want = a.Params();
      auto got = joiner.Params();
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(want[i], got[i])) << i;
      EXPECT_TRUE(joiner.replica->ParametersAreMasters());
      ASSERT_TRUE(joiner.replica->EndBackward().ok());
      ASSERT_TRUE(joiner.replica->Finish().ok());
    }
    ASSERT_TRUE(a.replica->EndBackward().ok());
    ASSERT_TRUE(a.replica->Finish().ok());
  }
}

}  // namespace
}  // namespace frugal::engine
