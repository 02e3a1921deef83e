#include "frugal/compress/sparsifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <random>

#include "block_scan.h"
#include "sparsifier_impl.h"
#include "sparsifier_test_util.h"

namespace frugal::compress {
namespace {

using test_util::BruteTopk;
using test_util::HeavyTailed;
using test_util::Make;

// The B best blocks by L1 score (ties: lower id), as element indices.
std::vector<uint32_t> BruteBlocks(const std::vector<float>& g, size_t k) {
  const size_t n = g.size();
  const size_t nb = (n + 15) / 16;
  std::vector<float> score(nb);
  for (size_t b = 0; b < nb; ++b) score[b] = internal::ShortBlockScore(g.data() + 16 * b, std::min<size_t>(16, n - 16 * b));
  std::vector<uint32_t> ids(nb);
  std::iota(ids.begin(), ids.end(), 0u);
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  ids.resize(std::min(nb, (k + 15) / 16));
  std::sort(ids.begin(), ids.end());
  std::vector<uint32_t> out;
  for (uint32_t b : ids) {
    for (size_t i = 16 * size_t{b}; i < std::min<size_t>(16 * size_t{b} + 16, n); ++i) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

TEST(TargetCount, RoundsAndClamps) {
  EXPECT_EQ(TargetCount(0, 0.5), 0u);
  EXPECT_EQ(TargetCount(10, 0.0), 0u);
  EXPECT_EQ(TargetCount(10, 0.001), 1u);
  EXPECT_EQ(TargetCount(1000, 0.01), 10u);
  EXPECT_EQ(TargetCount(10, 1.0), 10u);
}

TEST(TopkSparsifier, MatchesBruteForce) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{1} << 20}) {
    std::vector<float> g = HeavyTailed(n, static_cast<uint32_t>(n) + 3);
    for (double d : {0.001, 0.01, 0.3, 1.0}) {
      auto s = Make("topk");
      SparseVector out;
      ASSERT_TRUE(s->Sparsify(g, d, &out).ok());
      std::vector<uint32_t> want = BruteTopk(g, TargetCount(n, d));
      ASSERT_EQ(out.indices, want) << "n=" << n << " d=" << d;
      for (size_t j = 0; j < out.nnz(); ++j) EXPECT_EQ(out.values[j], g[out.indices[j]]);
      EXPECT_EQ(out.dense_size, n);
    }
  }
}

TEST(BlockSparsifier, SelectsTheBestBlocksEveryCall) {
  // Across calls on changing data, including sudden scale shifts that make the
  // remembered threshold far too high or far too low, and tails of 1..15.
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{100003}}) {
    auto s = Make("block");
    for (int call = 0; call < 8; ++call) {
      float scale = (call == 4) ? 100.0f : (call == 6 ? 0.001f : 1.0f);
      std::vector<float> g = HeavyTailed(n, static_cast<uint32_t>(call * 7919 + n), scale);
      SparseVector out;
      ASSERT_TRUE(s->Sparsify(g, 0.05, &out).ok());
      ASSERT_EQ(out.indices, BruteBlocks(g, TargetCount(n, 0.05))) << "n=" << n << " call=" << call;
      for (size_t j = 0; j < out.nnz(); ++j) ASSERT_EQ(out.values[j], g[out.indices[j]]);
    }
  }
}

TEST(BlockSparsifier, TracksTargetCountOnShiftingDistributions) {
  const size_t n = 200000;
  auto s = Make("block");
  const size_t k = TargetCount(n, 0.01);
  for (int call = 0; call < 20; ++call) {
    std::vector<float> g = HeavyTailed(n, 100 + call);
    // From call 10 on, the large gradients move to the back half of the tensor.
    if (call >= 10) {
      for (size_t i = 0; i < n / 2; ++i) g[i] *= 0.01f;
    }
    SparseVector out;
    ASSERT_TRUE(s->Sparsify(g, 0.01, &out).ok());
    if (call >= 3) {
      EXPECT_GE(out.nnz(), 0.8 * k) << call;
      EXPECT_LE(out.nnz(), 1.2 * k) << call;
    }
    if (call >= 10) {
      // Whole tensor scanned: the selection follows the mass to the back.
      size_t back = std::count_if(out.indices.begin(), out.indices.end(), [&](uint32_t i) { return i >= n / 2; });
      EXPECT_GT(back, out.nnz() * 9 / 10);
    }
  }
  EXPECT_GT(s->state().threshold, 0.0);
}

TEST(BlockSparsifier, ScalarAndVectorPathsAgree) {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  if (DetectSimdLevel() == SimdLevel::kAvx2 || DetectSimdLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx2);
  if (DetectSimdLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  if (levels.size() == 1) GTEST_SKIP() << "CPU has no AVX2";
  // Raw scores and splits must be bit-identical, not just the final selections.
  // 4099 blocks: 256 groups of 16 for the transposed AVX-512 path plus a remainder.
  std::vector<float> g = HeavyTailed(16 * 4099, 5);
  const size_t nb = 4099;
  std::vector<float> ref(nb), got(nb);
  std::vector<uint32_t> ref_sel(nb), ref_cand(nb), sel(nb), cand(nb);
  internal::GetScoreSplitFn(SimdLevel::kScalar)(g.data(), nb, 0.0f, 0.0f, ref.data(), ref_sel.data(), ref_cand.data());
  std::vector<float> sorted = ref;
  std::sort(sorted.begin(), sorted.end());
  const float hi = sorted[nb * 3 / 4], lo = sorted[nb / 4];  // about a quarter selected, half candidates
  internal::BlockSplit r0 = internal::GetScoreSplitFn(SimdLevel::kScalar)(g.data(), nb, hi, lo, ref.data(),
                                                                          ref_sel.data(), ref_cand.data());
  EXPECT_GT(r0.num_sel, 0u);
  EXPECT_GT(r0.num_cand, 0u);
  EXPECT_LT(r0.num_sel + r0.num_cand, nb);
  for (SimdLevel level : levels) {
    internal::BlockSplit r = internal::GetScoreSplitFn(level)(g.data(), nb, hi, lo, got.data(), sel.data(), cand.data());
    for (size_t b = 0; b < nb; ++b) ASSERT_EQ(std::memcmp(&ref[b], &got[b], 4), 0) << SimdLevelName(level) << b;
    ASSERT_EQ(r.num_sel, r0.num_sel);
    ASSERT_EQ(r.num_cand, r0.num_cand);
    EXPECT_TRUE(std::equal(sel.begin(), sel.begin() + r.num_sel, ref_sel.begin()));
    EXPECT_TRUE(std::equal(cand.begin(), cand.begin() + r.num_cand, ref_cand.begin()));
    EXPECT_TRUE(r.finite);
    // A NaN in the middle of a 16-block group is reported by every path.
    std::vector<float> bad = g;
    bad[16 * 37 + 5] = std::nanf("");
    EXPECT_FALSE(internal::GetScoreSplitFn(level)(bad.data(), nb, hi, lo, got.data(), sel.data(), cand.data()).finite);
  }
  // Whole sparsifier over a sequence of calls, including state.
  for (size_t n : {size_t{33}, size_t{65536 + 7}, size_t{300001}}) {
    std::vector<std::unique_ptr<Sparsifier>> s;
    for (SimdLevel level : levels) {
      SparsifierOptions o;
      o.simd = level;
      s.push_back(Make("block", o));
    }
    for (int call = 0; call < 5; ++call) {
      std::vector<float> x = HeavyTailed(n, static_cast<uint32_t>(call + n));
      SparseVector first;
      ASSERT_TRUE(s[0]->Sparsify(x, 0.01, &first).ok());
      for (size_t v = 1; v < s.size(); ++v) {
        SparseVector out;
        ASSERT_TRUE(s[v]->Sparsify(x, 0.01, &out).ok());
        ASSERT_EQ(out.indices, first.indices) << SimdLevelName(levels[v]);
        ASSERT_EQ(s[v]->state().threshold, s[0]->state().threshold);
      }
    }
  }
}

TEST(RandomkSparsifier, PicksKDistinctSortedAndIsReproducible) {
  std::vector<float> g = HeavyTailed(10000, 9);
  SparsifierOptions o;
  o.seed = 42;
  auto a = Make("randomk", o);
  SparseVector out;
  ASSERT_TRUE(a->Sparsify(g, 0.1, &out).ok());
  EXPECT_EQ(out.nnz(), 1000u);
  EXPECT_TRUE(ValidateSparseVector(out).ok());
  SparsifierState mid = a->state();
  SparseVector next_a;
  ASSERT_TRUE(a->Sparsify(g, 0.1, &next_a).ok());
  EXPECT_NE(next_a.indices, out.indices);
  auto b = Make("randomk");
  ASSERT_TRUE(b->RestoreState(mid).ok());
  SparseVector next_b;
  ASSERT_TRUE(b->Sparsify(g, 0.1, &next_b).ok());
  EXPECT_EQ(next_b.indices, next_a.indices);
  // All of a small tensor.
  ASSERT_TRUE(b->Sparsify(Span<const float>(g.data(), 17), 1.0, &out).ok());
  EXPECT_EQ(out.nnz(), 17u);
}

TEST(Sparsifier, NonFiniteInputIsAnErrorNamingTheTensor) {
  for (const char* kind : {"topk", "block", "randomk", "sampled_topk"}) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      std::vector<float> g = HeavyTailed(1000, 1);
      g[777] = bad;
      SparsifierOptions o;
      o.tensor_name = "fc2.weight";
      auto s = Make(kind, o);
      SparseVector out;
      Status st = s->Sparsify(g, 0.01, &out);
      ASSERT_EQ(st.code(), Status::Code::kInvalidArgument) << kind;
      EXPECT_NE(st.message().find("fc2.weight"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("777"), std::string::npos) << st.message();
    }
  }
}

TEST(Sparsifier, HugeFiniteValuesAreNotMistakenForInf) {
  std::vector<float> g(64, 3e38f);  // block sums overflow, values are finite
  auto s = Make("block");
  SparseVector out;
  EXPECT_TRUE(s->Sparsify(g, 0.25, &out).ok());
  EXPECT_EQ(out.nnz(), 16u);
}

TEST(Sparsifier, RejectsBadArguments) {
  EXPECT_FALSE(CreateSparsifier("dgc").ok());
  auto s = Make("block");
  std::vector<float> g(10, 1.0f);
  SparseVector out;
  EXPECT_EQ(s->Sparsify(g, 1.5, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->Sparsify(g, -0.1, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s->Sparsify(g, std::nan(""), &out).code(), Status::Code::kInvalidArgument);
}

TEST(SparsifierState, SerializesAndRestores) {
  auto s = Make("block");
  std::vector<float> g = HeavyTailed(50000, 3);
  SparseVector out;
  ASSERT_TRUE(s->Sparsify(g, 0.01, &out).ok());
  SparsifierState st = s->state();
  EXPECT_EQ(st.kind, "block");
  EXPECT_EQ(st.calls, 1u);
  std::vector<uint8_t> bytes = st.Serialize();
  auto back = SparsifierState::Deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->threshold, st.threshold);
  EXPECT_EQ(back->calls, 1u);
  auto t = Make("block");
  ASSERT_TRUE(t->RestoreState(*back).ok());
  EXPECT_EQ(t->state().threshold, st.threshold);
  EXPECT_FALSE(Make("topk")->RestoreState(*back).ok());
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_FALSE(SparsifierState::Deserialize(Span<const uint8_t>(bytes.data(), len)).ok());
  }
  bytes[0] ^= 1;
  EXPECT_FALSE(SparsifierState::Deserialize(bytes).ok());
}

}  // namespace
}  // namespace frugal::compress
