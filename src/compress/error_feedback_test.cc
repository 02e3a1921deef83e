#include "frugal/compress/error_feedback.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

namespace frugal::compress {
namespace {

std::vector<float> Gradient(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng) * std::exp(2.0f * normal(rng));
  return g;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(ErrorFeedback, ConservesExactly) {
  // 70001 values: large enough for sampled_topk to sample rather than select exactly.
  for (const char* kind : {"topk", "block", "randomk", "sampled_topk"}) {
    const size_t n = std::string(kind) == "sampled_topk" ? 70001 : 10007;
    auto sparsifier = std::move(CreateSparsifier(kind).value());
    ErrorFeedback ef(n, {"w", 0.0f});
    for (int step = 0; step < 20; ++step) {
      std::vector<float> g = Gradient(n, step);
      std::vector<float> old(ef.residual().begin(), ef.residual().end());
      SparseVector sent;
      ASSERT_TRUE(ef.Compress(g, *sparsifier, 0.02, &sent).ok());
      std::vector<float> dense(n);
      Densify(sent, dense);
      for (size_t i = 0; i < n; ++i) {
        // sent + new residual == old residual + gradient, bit for bit.
        ASSERT_TRUE(SameBits(dense[i] + ef.residual()[i], old[i] + g[i])) << kind << " step " << step << " i " << i;
      }
      for (uint32_t i : sent.indices) ASSERT_EQ(ef.residual()[i], 0.0f);
    }
  }
}

TEST(ErrorFeedback, EverythingIsSentEventually) {
  // A constant gradient on a small tensor: with density 1/8 every coordinate's
  // residual grows until it is picked, so nothing is starved.
  const size_t n = 64;
  auto s = std::move(CreateSparsifier("topk").value());
  ErrorFeedback ef(n, {});
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 1.0f + 0.01f * static_cast<float>(i);
  std::vector<bool> seen(n, false);
  for (int step = 0; step < 40; ++step) {
    SparseVector sent;
    ASSERT_TRUE(ef.Compress(g, *s, 0.125, &sent).ok());
    for (uint32_t i : sent.indices) seen[i] = true;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), static_cast<long>(n));
}

// Note [Deferred mass]: held is |r + g|_1 before the send, sent is |sent|_1;
// a constant gradient at density 1/8 settles where the mass sent per step
// equals the mass that arrives, with a backlog of more than two steps.
TEST(ErrorFeedback, ReportsHeldAndSentMass) {
  for (float momentum : {0.0f, 0.5f}) {
    const size_t n = 1003;  // not a multiple of the eight summing lanes
    auto s = std::move(CreateSparsifier("topk").value());
    ErrorFeedback ef(n, {"w", momentum});
    EXPECT_EQ(ef.last_mass().held, 0.0);
    std::vector<float> g = Gradient(n, 7);
    double arriving = 0;
    for (float x : g) arriving += std::fabs(x);
    for (int step = 0; step < 200; ++step) {
      std::vector<float> acc(ef.residual().begin(), ef.residual().end());
      std::vector<float> u(ef.velocity().begin(), ef.velocity().end());
      for (size_t i = 0; i < n; ++i) acc[i] += momentum > 0 ? momentum * u[i] + g[i] : g[i];
      double held = 0, held_sq = 0;
      for (float x : acc) {
        held += std::fabs(x);
        held_sq += static_cast<double>(x) * x;
      }
      SparseVector sent;
      ASSERT_TRUE(ef.Compress(g, *s, 0.125, &sent).ok());
      double sent_l1 = 0, sent_sq = 0;
      for (float v : sent.values) {
        sent_l1 += std::fabs(v);
        sent_sq += static_cast<double>(v) * v;
      }
      ASSERT_NEAR(ef.last_mass().held, held, 1e-4 * held) << "step " << step;
      ASSERT_NEAR(ef.last_mass().sent, sent_l1, 1e-9 * sent_l1) << "step " << step;
      ASSERT_NEAR(ef.last_mass().held_sq, held_sq, 1e-4 * held_sq) << "step " << step;
      ASSERT_NEAR(ef.last_mass().sent_sq, sent_sq, 1e-9 * sent_sq) << "step " << step;
      ASSERT_LE(ef.last_mass().sent_sq, ef.last_mass().held_sq * (1 + 1e-4));
    }
    if (momentum > 0) continue;  // masking clears velocity: no simple steady state
    // Steady state: what leaves per step is what arrives, and the backlog
    // is some steps of arrivals (a delay > 1 at density 1/8).
    EXPECT_NEAR(ef.last_mass().sent, arriving, 0.05 * arriving);
    EXPECT_GT(ef.last_mass().held, 2 * arriving);
  }
}

TEST(ErrorFeedback, DgcMomentumCorrection) {
  const size_t n = 4;
  auto s = std::move(CreateSparsifier("topk").value());
  ErrorFeedback ef(n, {"w", 0.5f});
  std::vector<float> g = {1.0f, 2.0f, 4.0f, 8.0f};
  SparseVector sent;
  // Step 1: u = g, r = g; sends index 3 (8), clears u[3], r[3].
  ASSERT_TRUE(ef.Compress(g, *s, 0.25, &sent).ok());
  ASSERT_EQ(sent.indices, std::vector<uint32_t>{3});
  EXPECT_EQ(sent.values[0], 8.0f);
  // Step 2: u = 0.5u + g = {1.5, 3, 6, 8}; r = {2.5, 5, 10, 8}; sends index 2 (10).
  ASSERT_TRUE(ef.Compress(g, *s, 0.25, &sent).ok());
  ASSERT_EQ(sent.indices, std::vector<uint32_t>{2});
  EXPECT_EQ(sent.values[0], 10.0f);
  EXPECT_EQ(ef.residual()[0], 2.5f);
  EXPECT_EQ(ef.residual()[3], 8.0f);
  EXPECT_EQ(ef.velocity()[1], 3.0f);
  EXPECT_EQ(ef.velocity()[2], 0.0f);
}

TEST(ErrorFeedback, NonFiniteGradientIsRejectedAndStateKept) {
  auto s = std::move(CreateSparsifier("block").value());
  ErrorFeedback ef(100, {"encoder.layer3.bias", 0.0f});
  std::vector<float> g = Gradient(100, 1);
  SparseVector sent;
  ASSERT_TRUE(ef.Compress(g, *s, 0.1, &sent).ok());
  std::vector<float> before(ef.residual().begin(), ef.residual().end());
  g[42] = std::nanf("");
  Status st = ef.Compress(g, *s, 0.1, &sent);
  ASSERT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("encoder.layer3.bias"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("NaN"), std::string::npos) << st.message();
  EXPECT_TRUE(std::equal(before.begin(), before.end(), ef.residual().begin()));
  EXPECT_FALSE(ef.Compress(std::vector<float>(99), *s, 0.1, &sent).ok());
}

TEST(ErrorFeedback, SerializesState) {
  auto s = std::move(CreateSparsifier("topk").value());
  ErrorFeedback ef(50, {"w", 0.9f});
  SparseVector sent;
  ASSERT_TRUE(ef.Compress(Gradient(50, 3), *s, 0.1, &sent).ok());
  std::vector<uint8_t> bytes = ef.Serialize();
  EXPECT_EQ(bytes.size(), ef.SerializedSize());
  std::vector<uint8_t> appended = {42};  // AppendTo adds the same bytes after what is there
  ef.AppendTo(&appended);
  EXPECT_EQ(std::vector<uint8_t>(appended.begin() + 1, appended.end()), bytes);
  ErrorFeedback copy(50, {"w", 0.9f});
  ASSERT_TRUE(copy.Deserialize(bytes).ok());
  EXPECT_TRUE(std::equal(ef.residual().begin(), ef.residual().end(), copy.residual().begin()));
  EXPECT_TRUE(std::equal(ef.velocity().begin(), ef.velocity().end(), copy.velocity().begin()));
  ErrorFeedback wrong_size(51, {"w", 0.9f});
  EXPECT_FALSE(wrong_size.Deserialize(bytes).ok());
  ErrorFeedback no_momentum(50, {"w", 0.0f});
  EXPECT_FALSE(no_momentum.Deserialize(bytes).ok());
  bytes.pop_back();
  EXPECT_FALSE(copy.Deserialize(bytes).ok());
}

}  // namespace
}  // namespace frugal::compress
