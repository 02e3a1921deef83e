#include "block_scan.h"

#include <cmath>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers build masked intrinsics from _mm512_undefined_*(),
// which -Wmaybe-uninitialized reports as a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
}  // namespace

void BlockScoresScalar(const float* x, size_t num_blocks, float* scores) {
  for (size_t b = 0; b < num_blocks; ++b) scores[b] = TreeL1(x + 16 * b);
}

float ShortBlockScore(const float* x, size_t len) {
  float a[16] = {};
  for (size_t i = 0; i < len && i < 16; ++i) a[i] = x[i];
  return TreeL1(a);
}

#if defined(__x86_64__)

namespace {

// t8 -> score, shared by both vector kernels (Note [Block score order]).
__attribute__((target("avx2"))) inline float Reduce8(__m256 t8) {
  __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  __m128 s = _mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace

__attribute__((target("avx2"))) void BlockScoresAvx2(const float* x, size_t num_blocks, float* scores) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (size_t b = 0; b < num_blocks; ++b) {
    const float* a = x + 16 * b;
    __m256 lo = _mm256_and_ps(_mm256_loadu_ps(a), abs_mask);
    __m256 hi = _mm256_and_ps(_mm256_loadu_ps(a + 8), abs_mask);
    scores[b] = Reduce8(_mm256_add_ps(lo, hi));
  }
}

__attribute__((target("avx512f,avx2"))) void BlockScoresAvx512(const float* x, size_t num_blocks,
                                                               float* scores) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  size_t b = 0;
  // Four cache lines per iteration to keep several loads in flight.
  for (; b + 4 <= num_blocks; b += 4) {
    __m512 v[4];
    for (int u = 0; u < 4; ++u) {
      v[u] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + 16 * (b + u))), abs_mask));
    }
    for (int u = 0; u < 4; ++u) {
      __m256 lo = _mm512_castps512_ps256(v[u]);
      __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(v[u], v[u], 0x4E));
      scores[b + u] = Reduce8(_mm256_add_ps(lo, hi));
    }
  }
  for (; b < num_blocks; ++b) {
    __m512 v = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + 16 * b)), abs_mask));
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0x4E));
    scores[b] = Reduce8(_mm256_add_ps(lo, hi));
  }
}

#endif  // __x86_64__

BlockScoresFn GetBlockScoresFn(SimdLevel level) {
  SimdLevel best = DetectSimdLevel();
  if (level == SimdLevel::kAuto) level = best;
  switch (level) {
    case SimdLevel::kScalar:
      return &BlockScoresScalar;
#if defined(__x86_64__)
    case SimdLevel::kAvx2:
      return best == SimdLevel::kScalar ? nullptr : &BlockScoresAvx2;
    case SimdLevel::kAvx512:
      return best == SimdLevel::kAvx512 ? &BlockScoresAvx512 : nullptr;
#endif
    default:
      return nullptr;
  }
}

}  // namespace frugal::compress::internal
