#include "frugal/compress/sparsifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <numeric>
#include <random>

#include "block_scan.h"
#include "magnitude_scan.h"
#include "sparsifier_impl.h"

namespace frugal::compress {
namespace {

// Heavy-tailed values (Student-t like: normal / sqrt(uniform)), with some exact
// zeros and repeated magnitudes so tie-breaking is exercised.
std::vector<float> HeavyTailed(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.05f, 1.0f);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t r = rng() % 16;
    if (r == 0) g[i] = 0.0f;
    else if (r == 1) g[i] = (rng() & 1) ? 0.5f : -0.5f;
    else g[i] = scale * normal(rng) / std::sqrt(uni(rng));
  }
  return g;
}

std::unique_ptr<Sparsifier> Make(const std::string& kind, SparsifierOptions options = {}) {
  auto s = CreateSparsifier(kind, options);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Brute force: sort all indices by (|g| desc, index asc), take k, sort by index.
std::vector<uint32_t> BruteTopk(const std::vector<float>& g, size_t k) {
  std::vector<uint32_t> idx(g.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    float ma = std::fabs(g[a]), mb = std::fabs(g[b]);
    return ma > mb || (ma == mb && a < b);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

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

// Like the kernels benchmark's data: Student-t-like values times a log-normal
// scale per row of 1024, so magnitudes are heavy-tailed and clustered.
std::vector<float> RowScaled(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.02f, 1.0f);
  std::vector<float> g(n);
  float row_scale = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 1024 == 0) row_scale = std::exp(normal(rng));
    g[i] = 1e-3f * row_scale * normal(rng) / std::sqrt(uni(rng));
  }
  return g;
}

void ExpectSameSelection(const SparseVector& got, const SparseVector& want, const std::string& what) {
  ASSERT_EQ(got.dense_size, want.dense_size) << what;
  ASSERT_EQ(got.indices, want.indices) << what;
  ASSERT_EQ(got.values.size(), want.values.size()) << what;
  EXPECT_EQ(std::memcmp(got.values.data(), want.values.data(), 4 * got.values.size()), 0) << what;
}

TEST(SampledTopkSparsifier, EqualsExactTopkOnEveryCall) {
  // Every path of Note [Sampled top-k]: tiny and dense tensors (exact), sampled
  // ones across densities, and sudden 100x / 0.001x shifts in scale.
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}, size_t{16383}, size_t{16384}, size_t{65543},
                   size_t{300001}}) {
    auto s = Make("sampled_topk");
    auto t = Make("topk");
    for (int call = 0; call < 6; ++call) {
      float scale = (call == 3) ? 100.0f : (call == 5 ? 0.001f : 1.0f);
      std::vector<float> g = HeavyTailed(n, static_cast<uint32_t>(call * 7919 + n), scale);
      for (double d : {0.0, 0.0005, 0.01, 0.05, 0.2, 0.3, 1.0}) {
        SparseVector got, want;
        ASSERT_TRUE(s->Sparsify(g, d, &got).ok());
        ASSERT_TRUE(t->Sparsify(g, d, &want).ok());
        ASSERT_EQ(got.nnz(), TargetCount(n, d));
        ExpectSameSelection(got, want, "n=" + std::to_string(n) + " d=" + std::to_string(d));
      }
    }
  }
  if (HasFailure()) return;
  std::vector<float> g = HeavyTailed(1000, 77);
  SparseVector got;
  ASSERT_TRUE(Make("sampled_topk")->Sparsify(g, 0.03, &got).ok());
  EXPECT_EQ(got.indices, BruteTopk(g, 30));
}

TEST(SampledTopkSparsifier, SampleNarrowsTheSearchOnHeavyTailedData) {
  // The result never depends on the sample; the cost does. On realistic data
  // almost every call must be served by the sampled lists, and the mass sent
  // is exactly top-k's.
  const size_t n = 1 << 18;
  auto s = Make("sampled_topk");
  auto t = Make("topk");
  double mass = 0, exact_mass = 0;
  for (int call = 0; call < 60; ++call) {
    std::vector<float> g = RowScaled(n, 1000 + call);
    const double d = (call % 3 == 0) ? 0.001 : (call % 3 == 1 ? 0.01 : 0.1);
    SparseVector got, want;
    ASSERT_TRUE(s->Sparsify(g, d, &got).ok());
    ASSERT_TRUE(t->Sparsify(g, d, &want).ok());
    ExpectSameSelection(got, want, "call " + std::to_string(call));
    for (float v : got.values) mass += std::fabs(v);
    for (float v : want.values) exact_mass += std::fabs(v);
  }
  EXPECT_EQ(mass, exact_mass);
  const internal::SampledTopkStats& st = *internal::SampledTopkStatsOf(*s);
  EXPECT_EQ(st.sampled, 60u);
  EXPECT_EQ(st.exact_direct, 0u);
  EXPECT_LE(st.rescans, 2u);
  EXPECT_EQ(st.exact_fallbacks, 0u);
  EXPECT_EQ(st.zero_fills, 0u);
  EXPECT_EQ(internal::SampledTopkStatsOf(*t), nullptr);
}

TEST(SampledTopkSparsifier, DegenerateDistributions) {
  const size_t n = 100000;
  // Fewer nonzeros than k: all of them plus the lowest-index zeros.
  std::vector<float> sparse(n, 0.0f);
  for (size_t i = 7; i < n; i += 331) sparse[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i);
  sparse[5] = -0.0f;
  // One value everywhere: the lists overflow and exact selection takes over.
  std::vector<float> flat(n, 0.25f);
  // Many values tied exactly at the k-th magnitude.
  std::vector<float> tied = HeavyTailed(n, 5);
  for (size_t i = 0; i < n; i += 3) tied[i] = 2.0f;
  for (const auto* g : {&sparse, &flat, &tied}) {
    auto s = Make("sampled_topk");
    auto t = Make("topk");
    SparseVector got, want;
    ASSERT_TRUE(s->Sparsify(*g, 0.01, &got).ok());
    ASSERT_TRUE(t->Sparsify(*g, 0.01, &want).ok());
    ExpectSameSelection(got, want, "case " + std::to_string(g == &sparse ? 0 : g == &flat ? 1 : 2));
    EXPECT_EQ(got.indices, BruteTopk(*g, 1000));
  }
  auto s = Make("sampled_topk");
  SparseVector out;
  ASSERT_TRUE(s->Sparsify(sparse, 0.01, &out).ok());
  EXPECT_EQ(internal::SampledTopkStatsOf(*s)->zero_fills, 1u);
  ASSERT_TRUE(s->Sparsify(flat, 0.01, &out).ok());
  EXPECT_EQ(internal::SampledTopkStatsOf(*s)->exact_fallbacks, 1u);
  EXPECT_EQ(out.indices.back(), 999u);
}

TEST(SampledTopkSparsifier, DeterministicAndStateRoundTrips) {
  std::vector<float> g = RowScaled(200000, 3);
  SparsifierOptions o;
  o.seed = 9;
  auto a = Make("sampled_topk", o);
  auto b = Make("sampled_topk", o);
  SparseVector out_a, out_b;
  for (int call = 0; call < 3; ++call) {
    ASSERT_TRUE(a->Sparsify(g, 0.01, &out_a).ok());
    ASSERT_TRUE(b->Sparsify(g, 0.01, &out_b).ok());
    ExpectSameSelection(out_a, out_b, "same seed");
  }
  SparsifierState st = a->state();
  EXPECT_EQ(st.kind, "sampled_topk");
  EXPECT_EQ(st.calls, 3u);
  EXPECT_GT(st.threshold, 0.0);
  EXPECT_EQ(st.rng_state, b->state().rng_state);
  EXPECT_NE(st.rng_state, 9u);
  // Another seed samples other positions but selects the same coordinates.
  o.seed = 10;
  auto c = Make("sampled_topk", o);
  SparseVector out_c;
  ASSERT_TRUE(c->Sparsify(g, 0.01, &out_c).ok());
  ExpectSameSelection(out_c, out_a, "other seed");
  EXPECT_NE(c->state().rng_state, st.rng_state);
  // Round trip through bytes.
  auto back = SparsifierState::Deserialize(st.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto r = Make("sampled_topk");
  ASSERT_TRUE(r->RestoreState(*back).ok());
  EXPECT_EQ(r->state().rng_state, st.rng_state);
  EXPECT_EQ(r->state().threshold, st.threshold);
  EXPECT_EQ(r->state().calls, 3u);
  ASSERT_TRUE(a->Sparsify(g, 0.01, &out_a).ok());
  ASSERT_TRUE(r->Sparsify(g, 0.01, &out_b).ok());
  ExpectSameSelection(out_b, out_a, "restored");
  EXPECT_EQ(r->state().rng_state, a->state().rng_state);
  EXPECT_FALSE(Make("topk")->RestoreState(*back).ok());
  EXPECT_FALSE(r->RestoreState(Make("block")->state()).ok());
}

TEST(SampledTopkSparsifier, NonFiniteFoundByTheScanAndOnOverflow) {
  const size_t n = 100000;
  for (size_t bad_at : {size_t{0}, size_t{77777}, n - 1}) {
    for (bool flat : {false, true}) {  // flat: the scan overflows before reaching it
      std::vector<float> g = flat ? std::vector<float>(n, 1.0f) : RowScaled(n, 4);
      g[bad_at] = (bad_at % 2) ? INFINITY : std::nanf("");
      SparsifierOptions o;
      o.tensor_name = "emb";
      auto s = Make("sampled_topk", o);
      SparseVector out;
      Status st = s->Sparsify(g, 0.01, &out);
      ASSERT_EQ(st.code(), Status::Code::kInvalidArgument);
      EXPECT_NE(st.message().find("emb"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("index " + std::to_string(bad_at)), std::string::npos) << st.message();
      EXPECT_EQ(s->state().calls, 0u);
    }
  }
}

TEST(SampledTopkSparsifier, ScalarAndVectorScansAgree) {
  using internal::ScanResult;
  std::vector<SimdLevel> levels;
  if (DetectSimdLevel() == SimdLevel::kAvx2 || DetectSimdLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx2);
  if (DetectSimdLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  if (levels.empty()) GTEST_SKIP() << "CPU has no AVX2";
  // 1000 * 32 + 19: whole chunks and a tail; special values at chunk edges.
  std::vector<float> g = HeavyTailed(32019, 8);
  g[31] = -0.0f;
  g[32] = 1e-45f;  // smallest denormal: key 1
  std::vector<uint32_t> keys(g.size());
  for (size_t i = 0; i < g.size(); ++i) keys[i] = internal::MagnitudeKey(g[i]);
  std::sort(keys.begin(), keys.end());
  for (uint32_t lo : {keys[keys.size() * 95 / 100], keys[keys.size() / 2], 1u, 0u}) {
    for (bool bad : {false, true}) {
      std::vector<float> x = g;
      if (bad) x[32000] = -INFINITY;
      for (size_t cap : {x.size(), size_t{1000}}) {  // and a cap that overflows
        const size_t room = cap + internal::kScanSlack;
        std::vector<uint32_t> ref_ids(room), ref_bits(room), ids(room), bits(room);
        ScanResult a = internal::MagnitudeScanScalar(x.data(), x.size(), lo, ref_ids.data(), ref_bits.data(), cap);
        size_t want = 0;
        for (float v : x) want += internal::MagnitudeKey(v) >= lo;
        EXPECT_EQ(a.overflow, want > cap);
        if (!a.overflow) {
          EXPECT_EQ(a.count, want);
          EXPECT_EQ(a.max_key >= internal::kInfKey, bad);
          for (size_t j = 0; j < a.count; ++j) {
            ASSERT_GE(internal::MagnitudeKey(x[ref_ids[j]]), lo);
            ASSERT_EQ(std::memcmp(&x[ref_ids[j]], &ref_bits[j], 4), 0);
            if (j > 0) {
              ASSERT_LT(ref_ids[j - 1], ref_ids[j]);
            }
          }
        }
        for (SimdLevel level : levels) {
          ScanResult b = internal::GetMagnitudeScanFn(level)(x.data(), x.size(), lo, ids.data(), bits.data(), cap);
          ASSERT_EQ(a.count, b.count) << SimdLevelName(level);
          EXPECT_EQ(a.overflow, b.overflow);
          EXPECT_EQ(a.max_key, b.max_key);
          const size_t len = std::min(a.count, cap);
          EXPECT_TRUE(std::equal(ref_ids.begin(), ref_ids.begin() + len, ids.begin())) << SimdLevelName(level);
          EXPECT_TRUE(std::equal(ref_bits.begin(), ref_bits.begin() + len, bits.begin())) << SimdLevelName(level);
        }
      }
    }
  }
  // Whole sparsifier, every path, over calls.
  for (size_t n : {size_t{16384 + 5}, size_t{300001}}) {
    SparsifierOptions o;
    o.simd = SimdLevel::kScalar;
    auto ref = Make("sampled_topk", o);
    for (SimdLevel level : levels) {
      o.simd = level;
      auto s = Make("sampled_topk", o);
      for (int call = 0; call < 4; ++call) {
        std::vector<float> x = RowScaled(n, static_cast<uint32_t>(call));
        SparseVector want, got;
        ASSERT_TRUE(ref->Sparsify(x, 0.01, &want).ok());
        ASSERT_TRUE(s->Sparsify(x, 0.01, &got).ok());
        ExpectSameSelection(got, want, SimdLevelName(level));
      }
    }
  }
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
