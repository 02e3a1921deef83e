#include "plain_sum.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "frugal/compress/sparsifier.h"

namespace frugal::bench {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float SumAvx512(const float* x, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  float s = 0;
  for (float l : lanes) s += l;
  for (; i < n; ++i) s += x[i];
  return s;
}
#endif

float SumPortable(const float* x, size_t n) {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j];
  }
  float s = 0;
  for (float a : acc) s += a;
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace

float PlainSum(const float* x, size_t n) {
#if defined(__x86_64__)
  static const bool avx512 = compress::DetectSimdLevel() == compress::SimdLevel::kAvx512;
  if (avx512) return SumAvx512(x, n);
#endif
  return SumPortable(x, n);
}

}  // namespace frugal::bench
