#include "frugal/models/model.h"

#include <gtest/gtest.h>

namespace frugal::models {
namespace {

struct Expected {
  const char* name;
  int64_t params;  // as documented in docs/design/models.md
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

// docs/design/models.md: gpt-tiny has 3,323,392 parameters and maps [N, T] byte ids
// to [N, 256, T] logits.
TEST(GptTinyTest, ParameterCountAndOutputShape) {
  torch::manual_seed(0);
  auto model = CreateModel("gpt-tiny", 256);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(CountParameters(**model), 3323392);
  EXPECT_EQ(SequenceLength("gpt-tiny"), 128);
  EXPECT_EQ(SequenceLength("mlp"), 0);
  (*model)->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = torch::randint(0, 256, {2, 128}, torch::kLong);
  auto out = (*model)->forward(tokens);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 256, 128}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  // The layout cross_entropy takes for a sequence; at initialisation the loss is near ln(256) = 5.55.
  const double loss = torch::nn::functional::cross_entropy(out, tokens).item<double>();
  EXPECT_GT(loss, 4.5);
  EXPECT_LT(loss, 7.5);
}

TEST(GptTinyTest, IsCausal) {
  torch::manual_seed(1);
  auto model = CreateModel("gpt-tiny", 256);
  ASSERT_TRUE(model.ok());
  (*model)->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::randint(0, 256, {1, 64}, torch::kLong);
  torch::Tensor b = a.clone();
  b[0][40] = (a[0][40].item<int64_t>() + 1) % 256;
  torch::Tensor la = (*model)->forward(a), lb = (*model)->forward(b);
  // Positions before 40 cannot see the change; position 40 and later do.
  EXPECT_TRUE(torch::allclose(la.slice(2, 0, 40), lb.slice(2, 0, 40)));
  EXPECT_FALSE(torch::allclose(la.slice(2, 40, 41), lb.slice(2, 40, 41)));
}

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
