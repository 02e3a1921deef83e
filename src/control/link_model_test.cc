#include "frugal/control/link_model.h"

#include <cmath>

#include <gtest/gtest.h>

namespace frugal::control {
namespace {

// A window of `iters` iterations, each sending `messages` messages of
// `density * kBytesAtFull / messages` bytes, on a link with per-message
// cost alpha and rate beta; `noise` multiplies the busy time.
constexpr double kBytesAtFull = 3 * 5824522 * 2.25;  // 3 peers, mlp, 2.25 bytes per value

LinkWindowSample Window(double density, double alpha_s, double beta_bytes_per_s, double noise = 1.0,
                        double messages_per_iter = 24, int iters = 5) {
  LinkWindowSample w;
  w.messages = messages_per_iter * iters;
  w.bytes = density * kBytesAtFull * iters;
  w.busy_s = (w.messages * alpha_s + w.bytes / beta_bytes_per_s) * noise;
  return w;
}

TEST(LinkModelTest, RecoversAlphaAndBetaFromWindowsOfDifferentMessageSizes) {
  const double alpha = 0.004, beta = 100e6 / 8;  // 4 ms per message, 100 Mbit/s
  LinkModel model;
  // Densities as a controller walks them, with +-5% deterministic noise.
  const double densities[] = {0.01, 0.0056, 0.0032, 0.0032, 0.0056, 0.01, 0.018, 0.01};
  const double noise[] = {1.03, 0.96, 1.05, 0.98, 1.01, 0.95, 1.04, 0.99};
  for (int i = 0; i < 8; ++i) model.Add(Window(densities[i], alpha, beta, noise[i]));
  auto fit = model.Fit();
  ASSERT_TRUE(fit.has_value());
  EXPECT_TRUE(fit->separated);
  EXPECT_NEAR(fit->alpha_s, alpha, 0.2 * alpha);
  EXPECT_NEAR(fit->beta_bytes_per_s, beta, 0.15 * beta);
  // Bytes over busy time, the old estimate, reads far below beta at 0.32%.
  const LinkWindowSample small = Window(0.0032, alpha, beta);
  EXPECT_LT(small.bytes / small.busy_s, 0.5 * beta);
}

TEST(LinkModelTest, WithoutSizeVariationThereIsNoSeparatedFit) {
  LinkModel model;
  for (int i = 0; i < 6; ++i) model.Add(Window(0.01, 0.004, 12.5e6));
  EXPECT_FALSE(model.Fit().has_value());  // the caller keeps bytes over busy time
  // Windows without messages (an older peer) are ignored.
  LinkModel none;
  LinkWindowSample w = Window(0.01, 0.004, 12.5e6);
  w.messages = 0;
  none.Add(w);
  EXPECT_EQ(none.windows(), 0u);
}

TEST(LinkModelTest, NoLatencyGivesAlphaZeroAndBytesOverBusyTime) {
  LinkModel model;
  for (double d : {0.01, 0.005, 0.0025, 0.02}) model.Add(Window(d, 0.0, 50e6 / 8));
  auto fit = model.Fit();
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->alpha_s, 0.0, 1e-6);
  EXPECT_NEAR(fit->beta_bytes_per_s, 50e6 / 8, 1e-3 * 50e6 / 8);
}

// Small transfers faster per byte than large ones (a token-bucket shaper's
// burst) would fit a negative alpha: clamped to 0.
TEST(LinkModelTest, NegativeAlphaIsClampedToZero) {
  LinkModel model;
  for (double d : {0.01, 0.005, 0.0025}) {
    LinkWindowSample w = Window(d, 0.0, 50e6 / 8);
    w.busy_s *= d < 0.006 ? 0.6 : 1.0;
    model.Add(w);
  }
  auto fit = model.Fit();
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->alpha_s, 0.0);
  EXPECT_GT(fit->beta_bytes_per_s, 0.0);
}

TEST(LinkModelTest, AStalledWindowIsDroppedAsAnOutlier) {
  const double alpha = 0.002, beta = 200e6 / 8;
  LinkModel model;
  const double densities[] = {0.01, 0.005, 0.0025, 0.02, 0.01, 0.005, 0.0025};
  for (int i = 0; i < 7; ++i) model.Add(Window(densities[i], alpha, beta, i == 3 ? 1.8 : 1.0));
  auto fit = model.Fit();
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->alpha_s, alpha, 0.01 * alpha);
  EXPECT_NEAR(fit->beta_bytes_per_s, beta, 0.01 * beta);
}

// The link is reshaped from 500 to 50 Mbit/s: the history restarts at the
// first slow window and beta follows at once, with alpha kept as the prior.
TEST(LinkModelTest, ASlowerLinkRestartsTheHistoryKeepingAlpha) {
  const double alpha = 0.003;
  LinkModel model;
  for (double d : {0.01, 0.005, 0.0025, 0.02}) model.Add(Window(d, alpha, 500e6 / 8));
  ASSERT_TRUE(model.Fit().has_value());
  model.Add(Window(0.02, alpha, 50e6 / 8));
  EXPECT_EQ(model.windows(), 1u);
  auto fit = model.Fit();
  ASSERT_TRUE(fit.has_value());
  EXPECT_FALSE(fit->separated);
  EXPECT_NEAR(fit->alpha_s, alpha, 0.01 * alpha);
  EXPECT_NEAR(fit->beta_bytes_per_s, 50e6 / 8, 0.01 * 50e6 / 8);
}

// One window that ran much faster than the fit is ignored; two in a row
// restart the history.
TEST(LinkModelTest, OneFastWindowIsHeldBackTwoRestart) {
  const double alpha = 0.003;
  LinkModel model;
  for (double d : {0.01, 0.005, 0.0025, 0.02}) model.Add(Window(d, alpha, 50e6 / 8));
  model.Add(Window(0.02, alpha, 1000e6 / 8));
  EXPECT_EQ(model.windows(), 4u);
  EXPECT_NEAR(model.Fit()->beta_bytes_per_s, 50e6 / 8, 0.01 * 50e6 / 8);
  model.Add(Window(0.02, alpha, 1000e6 / 8));
  EXPECT_EQ(model.windows(), 1u);
  EXPECT_GT(model.Fit()->beta_bytes_per_s, 500e6 / 8);
}

}  // namespace
}  // namespace frugal::control
