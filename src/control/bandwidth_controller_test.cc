#include "frugal/control/bandwidth_controller.h"

#include <cmath>

#include <gtest/gtest.h>

namespace frugal::control {
namespace {

constexpr double kParams = 5824522;  // mlp

// Telemetry of `world` workers over `iters` iterations on a link of `mbit`,
// at `density`, each worker spending `s_per_sample[r]` per sample.
std::vector<engine::WorkerTelemetry> Recorded(double mbit, double density, int iters,
                                              std::vector<double> s_per_sample,
                                              const std::vector<int64_t>& batches) {
  int world = static_cast<int>(s_per_sample.size());
  std::vector<engine::WorkerTelemetry> out(world);
  for (int r = 0; r < world; ++r) {
    auto& w = out[r];
    w.rank = r;
    w.iterations = iters;
    w.samples = batches[r] * iters;
    w.compute_s = s_per_sample[r] * static_cast<double>(w.samples);
    w.link_bytes = (world - 1) * density * kParams * 2.25 * iters;
    w.link_busy_s = w.link_bytes * 8 / (mbit * 1e6);
    w.window_s = std::max(w.compute_s, w.link_busy_s) * 1.05;
  }
  return out;
}

ControllerOptions Options() {
  ControllerOptions o;
  o.model = "mlp";
  o.batch_per_worker = 64;
  o.staleness = 1;  // most tests check the staleness-1 rule (the exchange hidden behind compute)
  return o;
}

engine::Decision Start(int world) {
  engine::Decision d;
  d.density = 0.01;
  d.batch_sizes.assign(world, 64);
  return d;
}

TEST(BandwidthControllerTest, MoreBandwidthNeverMeansLowerDensity) {
  double previous = 0;
  for (double mbit : {25.0, 50.0, 100.0, 250.0, 500.0, 1000.0}) {
    auto c = BandwidthController::Create(Options());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    engine::Decision d = Start(4);
    for (int i = 0; i < 3; ++i) d = (*c)->Decide(5 * i, Recorded(mbit, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
    EXPECT_GE(d.density, previous) << mbit << " Mbit/s: " << d.reason;
    previous = d.density;
  }
  EXPECT_GT(previous, 0.01);
}

TEST(BandwidthControllerTest, ChosenDensityKeepsCommunicationHidden) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  for (int i = 0; i < 4; ++i) d = (*c)->Decide(5 * i, Recorded(100, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  // At 100 Mbit/s with 0.128 s of compute per iteration, the exchange of
  // 3 * d * P * 2.25 bytes must fit: d <= 0.128 * 100e6 / 8 / (3 * P * 2.25).
  double limit = 0.128 * 100e6 / 8 / (3 * kParams * 2.25);
  EXPECT_LE(d.density, limit * 1.1) << d.reason;
  EXPECT_GE(d.density, limit * 0.6) << d.reason;
}

TEST(BandwidthControllerTest, NoOscillationOnAConstantLink) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  int changes_after_settling = 0;
  for (int i = 0; i < 40; ++i) {
    engine::Decision next = (*c)->Decide(5 * i, Recorded(100, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
    if (i >= 4 && next.density != d.density) ++changes_after_settling;
    d = next;
  }
  EXPECT_EQ(changes_after_settling, 0);  // 180 iterations without a change
}

TEST(BandwidthControllerTest, SettlesWithinTenIterationsAfterAStepDown) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  for (int i = 0; i < 6; ++i) d = (*c)->Decide(5 * i, Recorded(500, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  const double at_500 = d.density;
  // The link drops to 50 Mbit/s; decisions every 5 iterations.
  std::vector<double> after;
  for (int i = 6; i < 12; ++i) {
    d = (*c)->Decide(5 * i, Recorded(50, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
    after.push_back(d.density);
  }
  // Hidden limit at 50 Mbit/s with 0.128 s of compute (see above).
  const double limit = 0.128 * 50e6 / 8 / (3 * kParams * 2.25);
  // Fast decrease: the first decision after the drop already picks it.
  EXPECT_LT(after[0], at_500 / 2);
  EXPECT_LE(after[0], limit * 1.1) << "after 5 iterations: " << after[0];
  EXPECT_GE(after[0], limit * 0.6) << "after 5 iterations: " << after[0];
  EXPECT_EQ(after[0], after.back());  // and stays there
}

// Slow increase: one window that saw a much faster link does not move the
// density; a second one in a row does.
TEST(BandwidthControllerTest, OneFastWindowDoesNotRaiseTheDensity) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  for (int i = 0; i < 6; ++i) d = (*c)->Decide(5 * i, Recorded(50, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  const double at_50 = d.density;
  d = (*c)->Decide(30, Recorded(500, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  EXPECT_EQ(d.density, at_50) << d.reason;
  d = (*c)->Decide(35, Recorded(50, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  EXPECT_EQ(d.density, at_50) << d.reason;
  for (int i = 8; i < 10; ++i) d = (*c)->Decide(5 * i, Recorded(500, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  EXPECT_GT(d.density, 2 * at_50) << d.reason;
}

TEST(BandwidthControllerTest, SlowWorkerGetsAProportionallySmallerBatch) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  d = (*c)->Decide(5, Recorded(1000, d.density, 5, {0.002, 0.004, 0.002, 0.002}, d.batch_sizes), d);
  ASSERT_EQ(d.batch_sizes.size(), 4u);
  EXPECT_EQ(d.batch_sizes[0] + d.batch_sizes[1] + d.batch_sizes[2] + d.batch_sizes[3], 256);
  EXPECT_NEAR(static_cast<double>(d.batch_sizes[1]), d.batch_sizes[0] / 2.0, 1.0) << d.reason;
  EXPECT_EQ(d.lr_scale, 1.0);
}

TEST(BandwidthControllerTest, BelowTheFloorTheBatchGrowsAndTheLearningRateScales) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  for (int i = 0; i < 3; ++i) d = (*c)->Decide(5 * i, Recorded(2, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  EXPECT_EQ(d.density, Options().density_floor) << d.reason;
  EXPECT_GT(d.lr_scale, 1.0);
  EXPECT_LE(d.lr_scale, Options().max_batch_growth);
  EXPECT_EQ(d.batch_sizes[0], static_cast<int64_t>(std::llround(64 * d.lr_scale)));
}

TEST(BandwidthControllerTest, DecisionsAreDeterministic) {
  auto a = BandwidthController::Create(Options());
  auto b = BandwidthController::Create(Options());
  engine::Decision da = Start(3), db = Start(3);
  for (int i = 0; i < 10; ++i) {
    double mbit = i < 5 ? 300 : 40;
    da = (*a)->Decide(5 * i, Recorded(mbit, da.density, 5, {0.002, 0.003, 0.002}, da.batch_sizes), da);
    db = (*b)->Decide(5 * i, Recorded(mbit, db.density, 5, {0.002, 0.003, 0.002}, db.batch_sizes), db);
    EXPECT_EQ(da.Serialize(), db.Serialize());
  }
}

TEST(BandwidthControllerTest, DecisionRoundTripsAndRejectsGarbage) {
  engine::Decision d = Start(2);
  d.reason = "x";
  auto back = engine::Decision::Deserialize(d.Serialize());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->Serialize(), d.Serialize());
  std::vector<uint8_t> junk = {'{', '"'};
  EXPECT_EQ(engine::Decision::Deserialize(junk).status().code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace frugal::control

namespace frugal::control {
namespace {

// A window with only a few milliseconds of transfers is not a bandwidth
// sample: the estimate stays; the controller probes upward (more traffic
// makes the next window measurable) instead of reading the round trips as
// a slow link.
TEST(BandwidthControllerTest, AWindowWithLittleTrafficIsNotASample) {
  auto c = BandwidthController::Create(Options());
  engine::Decision d = Start(4);
  for (int i = 0; i < 6; ++i) d = (*c)->Decide(5 * i, Recorded(100, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes), d);
  const double estimate = (*c)->bandwidth_mbit();
  const double density = d.density;
  auto thin = Recorded(100, d.density, 5, {0.002, 0.002, 0.002, 0.002}, d.batch_sizes);
  for (auto& w : thin) {
    w.link_bytes = 20000;   // 20 KB ...
    w.link_busy_s = 0.005;  // ... in 5 ms: "32 Mbit/s", mostly round trips
  }
  // A cluster member whose only traffic on the link is the controller's
  // telemetry: 500 bytes in 20 ms ("0.2 Mbit/s") is not a sample either.
  thin[1].link_bytes = 500;
  thin[1].link_busy_s = 0.02;
  d = (*c)->Decide(30, thin, d);
  EXPECT_DOUBLE_EQ((*c)->bandwidth_mbit(), estimate);
  EXPECT_GT(d.density, density) << d.reason;
  EXPECT_NE(d.reason.find("probing upward"), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace frugal::control

namespace frugal::control {
namespace {

// A token-bucket shaper lets small transfers through at line rate: on the
// testbed at 50 Mbit/s a window at density 0.42% read ~125 Mbit/s and one at
// 0.75% ~70 Mbit/s, and the density flapped between the two every 10-20
// iterations. Replayed here: the reading depends on the density in use;
// once settled the density changes less than once per 50 iterations.
TEST(BandwidthControllerTest, OverReadsOfSmallTransfersDoNotMakeTheDensityFlap) {
  ControllerOptions o = Options();
  o.staleness = 0;  // as on the testbed
  auto c = BandwidthController::Create(o);
  engine::Decision d = Start(4);
  for (int i = 0; i < 6; ++i) d = (*c)->Decide(5 * i, Recorded(500, d.density, 5, {0.00066, 0.00066, 0.00066, 0.00066}, d.batch_sizes), d);
  int changes = 0;
  for (int i = 6; i < 46; ++i) {
    const double reads = d.density < 0.006 ? 135 : 70;  // as measured
    engine::Decision next = (*c)->Decide(5 * i, Recorded(reads, d.density, 5, {0.00066, 0.00066, 0.00066, 0.00066}, d.batch_sizes), d);
    if (i >= 9 && next.density != d.density) ++changes;
    d = next;
  }
  EXPECT_LE(changes, 3) << d.reason;  // fewer than one per 50 of these 185 iterations
}

}  // namespace
}  // namespace frugal::control

namespace frugal::control {
namespace {

// The cnn case: on a 100 Mbit/s link whose
// every message costs 5 ms (late acks on busy cores), bytes over busy time
// reads ~21 Mbit/s at 1% and less at lower densities, and the controller
// walked the density down. With the link model it picks the density that
// maximises density^0.3 / the iteration time under the true alpha and beta.
constexpr double kAlpha = 0.005;          // s per message
constexpr double kMessagesPerIter = 24;   // 3 peers x 8 buckets
constexpr double kLinkMbit = 100;

std::vector<engine::WorkerTelemetry> WithLatency(double density, const std::vector<int64_t>& batches,
                                                 bool report_messages) {
  auto out = Recorded(kLinkMbit, density, 5, {0.002, 0.002, 0.002, 0.002}, batches);
  for (auto& w : out) {
    const double messages = kMessagesPerIter * static_cast<double>(w.iterations);
    w.link_busy_s += messages * kAlpha;
    w.window_s = std::max(w.compute_s, w.link_busy_s) * 1.05;
    w.link_messages = report_messages ? messages : 0;
  }
  return out;
}

// The true rate over one iteration's exchange at density d (Mbit/s).
double TrueRateMbit(double d) {
  const double bytes = 3 * d * kParams * 2.25;
  return bytes * 8 / (kMessagesPerIter * kAlpha + bytes * 8 / (kLinkMbit * 1e6)) / 1e6;
}

// The densities decided at t = 0, 5, 10, ...
std::vector<double> RunDecisions(BandwidthController* c, bool report_messages, int decisions) {
  engine::Decision d = Start(4);
  std::vector<double> densities;
  for (int i = 0; i < decisions; ++i) {
    d = c->Decide(5 * i, WithLatency(d.density, d.batch_sizes, report_messages), d);
    densities.push_back(d.density);
  }
  return densities;
}

TEST(BandwidthControllerTest, PerMessageLatencyIsNotReadAsLackOfBandwidth) {
  ControllerOptions o = Options();
  o.staleness = 0;  // the default, as in the cnn run
  o.density_exponent = 0.3;  // the objective when the cnn failure was recorded
  auto old_way = BandwidthController::Create(o);
  auto new_way = BandwidthController::Create(o);
  ASSERT_TRUE(old_way.ok() && new_way.ok());
  const double without = RunDecisions(old_way->get(), /*report_messages=*/false, 40).back();
  const std::vector<double> with = RunDecisions(new_way->get(), /*report_messages=*/true, 40);
  EXPECT_LT(without, 0.01);  // the failure, reproduced
  EXPECT_GT(with.back(), 1.5 * without);
  // The fit recovered the link.
  for (int r = 0; r < 4; ++r) {
    auto fit = (*new_way)->link_fit(r);
    ASSERT_TRUE(fit.has_value()) << r;
    EXPECT_NEAR(fit->alpha_s, kAlpha, 0.05 * kAlpha);
    EXPECT_NEAR(fit->beta_bytes_per_s * 8 / 1e6, kLinkMbit, 0.05 * kLinkMbit);
  }
  // The choice maximises the objective under the true link (within the
  // hysteresis ratio: the controller does not move for less).
  double best = 0, best_rate = 0;
  for (int i = 0; i < o.density_candidates; ++i) {
    const double d = o.min_density * std::pow(o.max_density / o.min_density, i / (o.density_candidates - 1.0));
    auto t = (*new_way)->PredictIteration(d, 64, 0.002, TrueRateMbit(d), 4);
    ASSERT_TRUE(t.ok());
    if (std::pow(d, o.density_exponent) / *t > best_rate) {
      best_rate = std::pow(d, o.density_exponent) / *t;
      best = d;
    }
  }
  // It gets there within 5 decisions (the fit needs 3 windows of different
  // sizes; the increase cooldown does not hold back a decrease that the
  // old estimate made) and stays.
  for (size_t i = 4; i < with.size(); ++i) {
    EXPECT_LE(std::abs(std::log(with[i] / best)), std::log(o.change_ratio)) << "t=" << 5 * i << ": " << with[i] << " vs " << best;
  }
  EXPECT_GT(best, 1.5 * without);
}

}  // namespace
}  // namespace frugal::control

namespace frugal::control {
namespace {

// Message counts on a link without per-message cost change nothing: the
// fit's alpha is 0, and the decisions are those made from bytes over busy
// time (also through a 500 -> 50 Mbit/s step).
TEST(BandwidthControllerTest, WithoutLatencyMessageCountsChangeNoDecision) {
  auto plain = BandwidthController::Create(Options());
  auto counted = BandwidthController::Create(Options());
  engine::Decision a = Start(4), b = Start(4);
  for (int i = 0; i < 20; ++i) {
    const double mbit = i < 8 ? 500 : 50;
    a = (*plain)->Decide(5 * i, Recorded(mbit, a.density, 5, {0.002, 0.002, 0.002, 0.002}, a.batch_sizes), a);
    auto seen = Recorded(mbit, b.density, 5, {0.002, 0.002, 0.002, 0.002}, b.batch_sizes);
    for (auto& w : seen) w.link_messages = 24.0 * w.iterations;
    b = (*counted)->Decide(5 * i, seen, b);
    EXPECT_EQ(a.density, b.density) << "t=" << 5 * i << ": " << b.reason;
    EXPECT_EQ(a.batch_sizes, b.batch_sizes);
  }
}

}  // namespace
}  // namespace frugal::control

namespace frugal::control {
namespace {

// The CPU stages are priced from telemetry (Note [CPU stages priced]): the
// slowest worker's measured sparsify and optimizer seconds reappear in the
// prediction at the density they ran at, the optimizer's grow with the
// merged density, and on a fast link a heavy optimizer keeps the density
// below what the link alone would allow.
TEST(BandwidthControllerTest, CpuStagesArePricedFromTelemetry) {
  ControllerOptions o = Options();
  o.staleness = 0;  // the engine's default: the stages add to compute
  o.density_exponent = 0.3;
  constexpr double kSparsifyS = 0.004;           // per iteration, whatever the density
  constexpr double kOptimizerPerMerged = 0.25;   // seconds per iteration per unit of merged density
  auto merged = [](double d) { return 1 - std::pow(1 - d, 4); };
  auto with_cpu = [&](double mbit, double density, double scale) {  // scale 0: no CPU telemetry
    auto seen = Recorded(mbit, density, 5, {0.002, 0.002, 0.002, 0.002}, {64, 64, 64, 64});
    for (auto& w : seen) {
      w.sparsify_s = scale * kSparsifyS * w.iterations;
      w.optimizer_s = scale * kOptimizerPerMerged * merged(density) * w.iterations;
    }
    seen[2].optimizer_s *= 1.5;  // the slowest worker sets the rate
    return seen;
  };
  auto priced = BandwidthController::Create(o);
  auto unpriced = BandwidthController::Create(o);
  ASSERT_TRUE(priced.ok() && unpriced.ok());
  engine::Decision a = Start(4), b = Start(4);
  for (int i = 0; i < 8; ++i) {
    a = (*priced)->Decide(5 * i, with_cpu(1000, a.density, 1.0), a);
    b = (*unpriced)->Decide(5 * i, with_cpu(1000, b.density, 0.0), b);
  }
  // The calibration reproduces the measurement at any density: the priced
  // prediction exceeds the unpriced one by the slowest worker's stages.
  for (double d : {0.01, 0.03, 0.1}) {
    auto p = (*priced)->PredictIteration(d, 64, 0.002, 1000, 4);
    auto u = (*unpriced)->PredictIteration(d, 64, 0.002, 1000, 4);
    ASSERT_TRUE(p.ok() && u.ok());
    EXPECT_NEAR(*p - *u, kSparsifyS + 1.5 * kOptimizerPerMerged * merged(d), 2e-3) << d;
  }
  EXPECT_LT(a.density, b.density / o.change_ratio) << a.reason << " | " << b.reason;
  // And the priced choice is the objective's best under the true costs
  // (within the hysteresis ratio).
  double best = 0, best_rate = 0;
  for (int i = 0; i < o.density_candidates; ++i) {
    const double d = o.min_density * std::pow(o.max_density / o.min_density, i / (o.density_candidates - 1.0));
    auto t = (*priced)->PredictIteration(d, 64, 0.002, 1000, 4);
    ASSERT_TRUE(t.ok());
    if (std::pow(d, o.density_exponent) / *t > best_rate) {
      best_rate = std::pow(d, o.density_exponent) / *t;
      best = d;
    }
  }
  EXPECT_LE(std::abs(std::log(a.density / best)), std::log(o.change_ratio)) << a.density << " vs " << best;
}

}  // namespace
}  // namespace frugal::control
