// Tests for the "sampled_topk" sparsifier and its magnitude scan kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "frugal/compress/sparsifier.h"
#include "magnitude_scan.h"
#include "sparsifier_impl.h"
#include "sparsifier_test_util.h"

namespace frugal::compress {
namespace {

using test_util::BruteTopk;
using test_util::HeavyTailed;
using test_util::Make;

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
  // Bit patterns (-0 vs 0, NaN payloads); memcmp of empty vectors' null data() is undefined (UBSan).
  if (!got.values.empty()) {
    EXPECT_EQ(std::memcmp(got.values.data(), want.values.data(), 4 * got.values.size()), 0) << what;
  }
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

}  // namespace
}  // namespace frugal::compress
