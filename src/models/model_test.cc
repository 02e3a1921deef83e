#include "frugal/models/model.h"

#include <gtest/gtest.h>

namespace frugal::models {
namespace {

struct Expected {
  const char* name;
  int64_t params;  // as documented in docs/models.md
};

class ModelZooTest : public ::testing::TestWithParam<Expected> {};

TEST_P(ModelZooTest, ParameterCountAndOutputShape) {
  torch::manual_seed(0);
  auto model = CreateModel(GetParam().name);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(CountParameters(**model), GetParam().params);
  (*model)->eval();
  torch::NoGradGuard no_grad;
  auto out = (*model)->forward(torch::randn({3, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 10}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Zoo, ModelZooTest,
                         ::testing::Values(Expected{"mlp", 5824522}, Expected{"cnn", 1630090},
                                           Expected{"resnet18", 11172810}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ModelTest, UnknownNameIsAnError) {
  auto m = CreateModel("vgg");
  EXPECT_EQ(m.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("vgg"), std::string::npos);
}

TEST(ModelTest, SameSeedSameWeights) {
  torch::manual_seed(3);
  auto a = CreateModel("cnn");
  torch::manual_seed(3);
  auto b = CreateModel("cnn");
  auto pa = (*a)->parameters();
  auto pb = (*b)->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

}  // namespace
}  // namespace frugal::models
