#include "sharded_eval.h"

#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "control_kinds.h"
#include "frugal/data/dataset.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/models/model.h"
#include "testing/test_world.h"

namespace frugal::engine {
namespace {

using comm::testing::Backend;

TEST(EvalShardTest, ShardsCoverTheDatasetOnceInOrder) {
  for (int64_t size : {0, 1, 7, 1000, 10001}) {
    for (int world : {1, 2, 3, 4, 7}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        auto [begin, end] = EvalShard(size, r, world);
        EXPECT_EQ(begin, next);
        EXPECT_LE(end - begin, size / world + 1);
        EXPECT_GE(end - begin, size / world);
        next = end;
      }
      EXPECT_EQ(next, size);
    }
  }
}

// The multi-rank tests, over each backend (comm/testing/test_world.h).
class ShardedEvalTest : public ::testing::TestWithParam<Backend> {};

// Three ranks with one model each (identical weights) get exactly the
// one-rank accuracy, and the same loss up to summation order.
TEST_P(ShardedEvalTest, EveryRankGetsTheWholeDatasetsEvaluation) {
  constexpr int kWorld = 3;
  train::TensorDataset test = train::ToTensorDataset(data::MakeSynthetic(1001, 5));
  torch::manual_seed(3);
  auto model = models::CreateModel("mlp");
  ASSERT_TRUE(model.ok());
  const train::Evaluation whole = train::EvaluateModel(**model, test, torch::kCPU);
  ASSERT_GT(whole.accuracy, 0.0);

  comm::testing::World w = comm::testing::MakeWorld(GetParam(), std::vector<std::string>(kWorld, "local"));
  ASSERT_EQ(w.ranks.size(), static_cast<size_t>(kWorld));
  std::vector<std::future<Result<train::Evaluation>>> done;
  for (int r = 0; r < kWorld; ++r) {
    done.push_back(std::async(std::launch::async, [&, t = std::move(w.ranks[r])]() mutable {
      auto own = models::CreateModel("mlp");
      if (!own.ok()) return Result<train::Evaluation>(own.status());
      torch::NoGradGuard no_grad;
      auto src = (**model).parameters();
      auto dst = (**own).parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      return EvaluateSharded(*t, ControlTag(50, kEvaluation), std::chrono::seconds(30), **own, test, torch::kCPU);
    }));
  }
  for (int r = 0; r < kWorld; ++r) {
    Result<train::Evaluation> got = done[r].get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->accuracy, whole.accuracy) << "rank " << r;
    EXPECT_NEAR(got->loss, whole.loss, 1e-5 * std::abs(whole.loss)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ShardedEvalTest, comm::testing::AllBackends(), comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::engine
