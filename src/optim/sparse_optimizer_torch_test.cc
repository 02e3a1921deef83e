// The sparse optimizers given every index must equal LibTorch's dense
// torch::optim::SGD / Adam / AdamW: relative error <= 1e-6 over 100 steps,
// where relative error = max_i |ours_i - torch_i| / max_i |torch_i|.
// The only file in src/optim that includes torch (slow to compile).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <random>

#include "frugal/optim/sparse_optimizer.h"

namespace frugal::optim {
namespace {

constexpr size_t kN = 4099;  // not a multiple of any vector width: tails too
constexpr int kSteps = 100;

struct Case {
  const char* name;
  OptimizerOptions ours;
};

std::unique_ptr<torch::optim::Optimizer> MakeTorch(const OptimizerOptions& o, torch::Tensor p) {
  std::vector<torch::Tensor> params = {p};
  if (o.kind == "sgd") {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                           .momentum(o.momentum)
                                                           .dampening(o.dampening)
                                                           .nesterov(o.nesterov)
                                                           .weight_decay(o.weight_decay));
  }
  if (o.kind == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  }
  return std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
}

double RelErr(const std::vector<float>& ours, const torch::Tensor& theirs) {
  const float* t = theirs.data_ptr<float>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(ours[i]) - t[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(t[i])));
  }
  return diff / scale;
}

class TorchEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(TorchEquivalence, HundredStepsWithAllIndices) {
  torch::set_num_threads(1);
  const OptimizerOptions& o = GetParam().ours;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> ours(kN);
  for (float& x : ours) x = normal(rng);
  torch::Tensor p = torch::from_blob(ours.data(), {static_cast<int64_t>(kN)}, torch::kFloat32).clone();
  p.set_requires_grad(true);
  auto theirs = MakeTorch(o, p);
  auto opt = std::move(CreateSparseOptimizer(o, kN, "p").value());
  std::vector<uint32_t> all(kN);
  std::iota(all.begin(), all.end(), 0u);
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> g(kN);
    // Gradients of varying scale, with a pull towards 0 so params stay O(1).
    for (size_t i = 0; i < kN; ++i) g[i] = normal(rng) * (0.1f + static_cast<float>(i % 7)) + 0.1f * ours[i];
    p.mutable_grad() = torch::from_blob(g.data(), {static_cast<int64_t>(kN)}, torch::kFloat32).clone();
    theirs->step();
    ASSERT_TRUE(opt->Step(ours, all, g).ok());
    worst = std::max(worst, RelErr(ours, p.detach()));
  }
  RecordProperty("max_rel_err", std::to_string(worst));
  std::cout << GetParam().name << ": max relative error over " << kSteps << " steps = " << worst << "\n";
  EXPECT_LE(worst, 1e-6);
}

OptimizerOptions Sgd(double lr, double momentum, double dampening, bool nesterov, double wd) {
  OptimizerOptions o;
  o.kind = "sgd";
  o.lr = lr;
  o.momentum = momentum;
  o.dampening = dampening;
  o.nesterov = nesterov;
  o.weight_decay = wd;
  return o;
}

OptimizerOptions Adam(const char* kind, double lr, double wd) {
  OptimizerOptions o;
  o.kind = kind;
  o.lr = lr;
  o.weight_decay = wd;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, TorchEquivalence,
    ::testing::Values(Case{"sgd_plain", Sgd(0.05, 0, 0, false, 0)},
                      Case{"sgd_momentum", Sgd(0.05, 0.9, 0, false, 0)},
                      Case{"sgd_momentum_dampening_wd", Sgd(0.05, 0.9, 0.3, false, 1e-3)},
                      Case{"sgd_nesterov_wd", Sgd(0.05, 0.9, 0, true, 5e-4)},
                      Case{"adam", Adam("adam", 1e-2, 0)},
                      Case{"adam_wd", Adam("adam", 1e-2, 1e-2)},
                      Case{"adamw", Adam("adamw", 1e-2, 1e-2)}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace frugal::optim
