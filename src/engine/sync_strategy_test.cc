// CreateSyncStrategy builds the strategy the resolved plan names; each one
// trains a one-rank linear model, saves its state and restores it into a
// fresh strategy that then continues bit for bit; over the in-process
// transport and over ZeroMQ (a world of one rank: the multi-rank runs of
// the strategies are in local_sync_test.cc and site_sync_test.cc).
#include "frugal/engine/sync_strategy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "testing/test_world.h"

namespace frugal::engine {
namespace {

using comm::testing::Backend;

RunConfig PlanFor(SyncMode sync) {
  RunConfig c;
  c.distributed.sync = sync;
  c.distributed.density = 0.5;
  c.distributed.local_steps = 2;
  c.distributed.local_fragments = 1;  // a round syncs the whole model at once
  c.distributed.checksum_every = 0;
  return c;
}

// One rank of a small linear model under a strategy.
struct OneRank {
  OneRank(Backend backend, const RunConfig& plan, uint64_t seed) : world(comm::testing::MakeWorld(backend, {"a"})) {
    torch::manual_seed(seed);
    model = torch::nn::Linear(8, 3);
    if (world.ranks.size() != 1) return;  // MakeWorld recorded the failure
    SyncInputs in;
    in.config = plan;
    in.lr_at = [](int64_t) { return 0.1; };
    in.outer = OuterStep{0.7, 0.9};
    for (const auto& p : model->named_parameters()) in.params.emplace_back(p.key(), p.value());
    in.transport = world.ranks[0].get();
    created = CreateSyncStrategy(std::move(in));
  }
  SyncStrategy& sync() { return **created; }
  void Step(int64_t t) {
    ASSERT_TRUE(sync().BeginIteration(t, /*check_replicas=*/false).ok());
    model->forward(torch::arange(16, torch::kFloat32).view({2, 8}) / 16).pow(2).sum().backward();
    ASSERT_TRUE(sync().EndBackward(t).ok());
  }
  std::vector<float> Params() {
    std::vector<float> out;
    for (const auto& p : model->parameters()) {
      torch::Tensor c = p.detach().contiguous();
      out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
    return out;
  }

  comm::testing::World world;
  torch::nn::Linear model{nullptr};
  Result<std::unique_ptr<SyncStrategy>> created = Status::Internal("not built");
};

class SyncStrategyTest : public ::testing::TestWithParam<Backend> {};

TEST_P(SyncStrategyTest, TheFactoryBuildsWhatThePlanNames) {
  OneRank step(GetParam(), PlanFor(SyncMode::kStep), 1);
  ASSERT_TRUE(step.created.ok()) << step.created.status().ToString();
  EXPECT_NE(step.sync().pipeline(), nullptr);  // a controller can steer it
  EXPECT_EQ(step.sync().Describe(), "");
  EXPECT_EQ(step.sync().Progress(0.5), "density 50%");

  OneRank local(GetParam(), PlanFor(SyncMode::kLocal), 1);
  ASSERT_TRUE(local.created.ok()) << local.created.status().ToString();
  EXPECT_EQ(local.sync().pipeline(), nullptr);
  EXPECT_NE(local.sync().Describe().find("2 inner steps per round (on the host) in 1 fragment(s)"), std::string::npos) << local.sync().Describe();
  EXPECT_EQ(local.sync().Progress(0.5), "syncs 0");
  for (int64_t t = 0; t < 4; ++t) local.Step(t);
  ASSERT_TRUE(local.sync().BeginIteration(4, false).ok());
  EXPECT_EQ(local.sync().Progress(0.5), "syncs 2");
}

TEST_P(SyncStrategyTest, AnUnresolvedPlanIsRefused) {
  OneRank r(GetParam(), PlanFor(SyncMode::kAuto), 1);
  ASSERT_FALSE(r.created.ok());
  EXPECT_EQ(r.created.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.created.status().message().find("SyncOf"), std::string::npos) << r.created.status().ToString();
}

// Each strategy's state, saved mid-run into rank 0's file sections, and
// restored into a strategy built from other initial values: both continue
// with the same parameters, bit for bit.
TEST_P(SyncStrategyTest, SavedStateRestoresBitForBit) {
  for (SyncMode mode : {SyncMode::kStep, SyncMode::kLocal, SyncMode::kSite}) {
    OneRank a(GetParam(), PlanFor(mode), 1);
    ASSERT_TRUE(a.created.ok());
    for (int64_t t = 0; t < 3; ++t) a.Step(t);
    ASSERT_TRUE(a.sync().BeginIteration(3, false).ok());
    CheckpointSections sections;
    ASSERT_TRUE(a.sync().SaveState(StateScope::kRank0File, &sections).ok());
    CheckpointMeta meta;  // what the worker adds
    meta.step = 3;
    sections["meta"] = EncodeCheckpointMeta(meta);

    OneRank b(GetParam(), PlanFor(mode), 2);
    ASSERT_TRUE(b.created.ok());
    Status restored = b.sync().RestoreState(sections, nullptr, /*residuals=*/true, "test state");
    ASSERT_TRUE(restored.ok()) << restored.ToString();
    ASSERT_TRUE(b.sync().BeginIteration(3, false).ok());
    for (OneRank* r : {&a, &b}) {
      r->model->forward(torch::arange(16, torch::kFloat32).view({2, 8}) / 16).pow(2).sum().backward();
      ASSERT_TRUE(r->sync().EndBackward(3).ok());
      for (int64_t t = 4; t < 6; ++t) r->Step(t);
      ASSERT_TRUE(r->sync().Finish(6).ok());
    }
    EXPECT_EQ(a.Params(), b.Params()) << NameOf(mode);
  }
}

// A corrupt state names what is missing instead of crashing.
TEST_P(SyncStrategyTest, AMissingSectionIsCorruption) {
  for (SyncMode mode : {SyncMode::kStep, SyncMode::kLocal, SyncMode::kSite}) {
    OneRank r(GetParam(), PlanFor(mode), 1);
    ASSERT_TRUE(r.created.ok());
    CheckpointSections empty;
    Status st = r.sync().RestoreState(empty, nullptr, /*residuals=*/true, "test state");
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << NameOf(mode);
    EXPECT_NE(st.message().find("test state has no"), std::string::npos) << st.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SyncStrategyTest, comm::testing::AllBackends(), comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::engine
