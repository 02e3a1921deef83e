#include "block_scan.h"

#include <cfloat>
#include <cmath>

#include "sparsifier_impl.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers build masked intrinsics from _mm512_undefined_*(),
// which -Wmaybe-uninitialized reports as a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace frugal::compress::internal {

namespace {

inline float TreeL1(const float* a) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = std::fabs(a[i]) + std::fabs(a[i + 8]);
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  float t2a = t4[0] + t4[2];
  float t2b = t4[1] + t4[3];
  return t2a + t2b;
}

// Branch-free append of block b by its score; shared by the scalar paths.
inline void Split(float s, uint32_t b, float hi, float lo, uint32_t* sel, uint32_t* cand, BlockSplit* r) {
  sel[r->num_sel] = b;
  cand[r->num_cand] = b;
  r->num_sel += s >= hi;
  r->num_cand += (s < hi) & (s >= lo);
  r->finite &= s <= FLT_MAX;
}

}  // namespace

float ShortBlockScore(const float* x, size_t len) {
  float a[16] = {};
  for (size_t i = 0; i < len && i < 16; ++i) a[i] = x[i];
  return TreeL1(a);
}

BlockSplit ScoreSplitScalar(const float* x, size_t num_blocks, float hi, float lo, float* scores, uint32_t* sel,
                            uint32_t* cand) {
  BlockSplit r;
  for (size_t b = 0; b < num_blocks; ++b) {
    const float s = TreeL1(x + 16 * b);
    scores[b] = s;
    Split(s, static_cast<uint32_t>(b), hi, lo, sel, cand, &r);
  }
  return r;
}

#if defined(__x86_64__)

namespace {

// t8 -> score (Note [Block score order]).
__attribute__((target("avx2"))) inline float Reduce8(__m256 t8) {
  __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  __m128 s = _mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2"))) inline float ScoreAvx2(const float* a) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 lo = _mm256_and_ps(_mm256_loadu_ps(a), abs_mask);
  __m256 hi = _mm256_and_ps(_mm256_loadu_ps(a + 8), abs_mask);
  return Reduce8(_mm256_add_ps(lo, hi));
}

}  // namespace

__attribute__((target("avx2"))) BlockSplit ScoreSplitAvx2(const float* x, size_t num_blocks, float hi, float lo,
                                                          float* scores, uint32_t* sel, uint32_t* cand) {
  BlockSplit r;
  for (size_t b = 0; b < num_blocks; ++b) {
    const float s = ScoreAvx2(x + 16 * b);
    scores[b] = s;
    Split(s, static_cast<uint32_t>(b), hi, lo, sel, cand, &r);
  }
  return r;
}

// Note [Transposed block reduction]
// Reducing one block at a time costs a chain of shuffles per cache line. The
// AVX-512 path instead reduces 16 blocks together: each level of the tree in
// Note [Block score order] combines halves of two registers with one pair of
// shuffles and one add, so after 4 levels one register holds the 16 scores
// (lane 4j+m holds block 4m+j; a final permute restores block order). Every
// score is still computed by exactly the same additions, so results stay
// bit-identical to the scalar path. The 16 scores are then compared with the
// thresholds and the block ids compress-stored into sel / cand.
__attribute__((target("avx512f,avx2"))) BlockSplit ScoreSplitAvx512(const float* x, size_t num_blocks, float hi,
                                                               float lo, float* scores, uint32_t* sel,
                                                               uint32_t* cand) {
  BlockSplit r;
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 vhi = _mm512_set1_ps(hi), vlo = _mm512_set1_ps(lo), vmax = _mm512_set1_ps(FLT_MAX);
  __mmask16 all_finite = 0xffff;
  size_t b = 0;
  for (; b + 16 <= num_blocks; b += 16) {
    const float* a = x + 16 * b;
    __m512 s1[8];
    for (int p = 0; p < 8; ++p) {
      __m512 va = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(a + 32 * p)), abs_mask));
      __m512 vb =
          _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(a + 32 * p + 16)), abs_mask));
      s1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(va, vb, 0x44), _mm512_shuffle_f32x4(va, vb, 0xEE));
    }
    __m512 s2[4];
    for (int q = 0; q < 4; ++q) {
      s2[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * q], s1[2 * q + 1], 0x88),
                            _mm512_shuffle_f32x4(s1[2 * q], s1[2 * q + 1], 0xDD));
    }
    __m512 s3[2];
    for (int t = 0; t < 2; ++t) {
      s3[t] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * t], s2[2 * t + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_ps(s2[2 * t], s2[2 * t + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    __m512 s4 = _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 s = _mm512_permutexvar_ps(order, s4);
    _mm512_storeu_ps(scores + b, s);
    const __mmask16 ge_hi = _mm512_cmp_ps_mask(s, vhi, _CMP_GE_OQ);
    const __mmask16 ge_lo = _mm512_cmp_ps_mask(s, vlo, _CMP_GE_OQ);
    const __mmask16 in_cand = static_cast<__mmask16>(ge_lo & ~ge_hi);
    all_finite &= _mm512_cmp_ps_mask(s, vmax, _CMP_LE_OQ);
    const __m512i ids = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(b)), iota);
    _mm512_mask_compressstoreu_epi32(sel + r.num_sel, ge_hi, ids);
    _mm512_mask_compressstoreu_epi32(cand + r.num_cand, in_cand, ids);
    r.num_sel += static_cast<size_t>(__builtin_popcount(ge_hi));
    r.num_cand += static_cast<size_t>(__builtin_popcount(in_cand));
  }
  r.finite = all_finite == 0xffff;
  for (; b < num_blocks; ++b) {
    const float s = ScoreAvx2(x + 16 * b);
    scores[b] = s;
    Split(s, static_cast<uint32_t>(b), hi, lo, sel, cand, &r);
  }
  return r;
}

#endif  // __x86_64__

ScoreSplitFn GetScoreSplitFn(SimdLevel level) {
#if defined(__x86_64__)
  return PickSimdKernel<ScoreSplitFn>(level, &ScoreSplitScalar, &ScoreSplitAvx2, &ScoreSplitAvx512);
#else
  return PickSimdKernel<ScoreSplitFn>(level, &ScoreSplitScalar, nullptr, nullptr);
#endif
}

}  // namespace frugal::compress::internal
