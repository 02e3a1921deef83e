#include "magnitude_scan.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "sparsifier_impl.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized false positives (as in block_scan.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace frugal::compress::internal {
namespace {

inline uint32_t BitsAt(const float* x, size_t i) {
  uint32_t bits;
  std::memcpy(&bits, x + i, sizeof(bits));
  return bits;
}

// Branch-free: writes every value and advances only past the ones that pass,
// so the time does not depend on how often they do.
inline void ScanScalarRange(const float* x, size_t begin, size_t end, uint32_t lo, uint32_t* ids, uint32_t* bits,
                            ScanResult* r) {
  for (size_t i = begin; i < end; ++i) {
    const uint32_t b = BitsAt(x, i);
    const uint32_t key = b & kSignMask;
    ids[r->count] = static_cast<uint32_t>(i);
    bits[r->count] = b;
    r->count += key >= lo;
    r->max_key = std::max(r->max_key, key);
  }
}

}  // namespace

ScanResult MagnitudeScanScalar(const float* x, size_t n, uint32_t lo, uint32_t* ids, uint32_t* bits, size_t cap) {
  ScanResult r;
  for (size_t start = 0; start < n; start += kScanSlack) {
    ScanScalarRange(x, start, std::min(n, start + kScanSlack), lo, ids, bits, &r);
    if (r.count > cap) {
      r.overflow = true;
      return r;
    }
  }
  return r;
}

#if defined(__x86_64__)

namespace {

// Left-pack permutations for 8 lanes: entry m lists the set bits of m in
// increasing order (then zeros), so permutevar8x32 moves the chosen lanes to
// the front in their original order.
constexpr std::array<std::array<uint32_t, 8>, 256> MakeLeftPack() {
  std::array<std::array<uint32_t, 8>, 256> t{};
  for (uint32_t m = 0; m < 256; ++m) {
    uint32_t j = 0;
    for (uint32_t lane = 0; lane < 8; ++lane) {
      if (m >> lane & 1) t[m][j++] = lane;
    }
  }
  return t;
}
constexpr std::array<std::array<uint32_t, 8>, 256> kLeftPack = MakeLeftPack();

}  // namespace

// Note [Branch-free scan]
// At the densities this serves, about half of all 32-value chunks hold a
// candidate, so "skip chunks without one" mispredicts constantly. Every
// 8 (AVX2) or 16 (AVX-512) values are instead compared, left-packed
// (permute by a table / compress into a register) and stored whole, and the
// output position advances by the popcount. The full-register stores write
// past the count, which is what kScanSlack leaves room for.
__attribute__((target("avx2,popcnt"))) ScanResult MagnitudeScanAvx2(const float* x, size_t n, uint32_t lo,
                                                                    uint32_t* ids, uint32_t* bits, size_t cap) {
  ScanResult r;
  const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(kSignMask));
  // Keys are <= 0x7fffffff, so a signed compare with lo - 1 (>= -1) is key >= lo.
  const __m256i below = _mm256_set1_epi32(static_cast<int>(lo) - 1);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i vmax = _mm256_setzero_si256();
  size_t count = 0;
  size_t start = 0;
  for (; start + kScanSlack <= n; start += kScanSlack) {
    for (size_t g = start; g < start + kScanSlack; g += 8) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g));
      const __m256i key = _mm256_and_si256(b, abs_mask);
      vmax = _mm256_max_epu32(vmax, key);
      const int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below)));
      const __m256i perm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLeftPack[m].data()));
      const __m256i id = _mm256_add_epi32(iota, _mm256_set1_epi32(static_cast<int>(g)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ids + count), _mm256_permutevar8x32_epi32(id, perm));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + count), _mm256_permutevar8x32_epi32(b, perm));
      count += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(m)));
    }
    if (count > cap) break;
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), vmax);
  r.max_key = *std::max_element(lanes, lanes + 8);
  r.count = count;
  if (count <= cap) ScanScalarRange(x, start, n, lo, ids, bits, &r);
  r.overflow = r.count > cap;
  return r;
}

__attribute__((target("avx512f,avx2,popcnt"))) ScanResult MagnitudeScanAvx512(const float* x, size_t n, uint32_t lo,
                                                                             uint32_t* ids, uint32_t* bits,
                                                                             size_t cap) {
  ScanResult r;
  const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kSignMask));
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i vmax = _mm512_setzero_si512();
  size_t count = 0;
  size_t start = 0;
  for (; start + kScanSlack <= n; start += kScanSlack) {
    for (size_t g = start; g < start + kScanSlack; g += 16) {
      const __m512i b = _mm512_loadu_si512(x + g);
      const __m512i key = _mm512_and_si512(b, abs_mask);
      vmax = _mm512_max_epu32(vmax, key);
      const __mmask16 m = _mm512_cmpge_epu32_mask(key, vlo);
      const __m512i id = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(g)));
      // Compress into a register and store it whole: compress-to-memory is
      // microcoded and slow on some AMD cores.
      _mm512_storeu_si512(ids + count, _mm512_maskz_compress_epi32(m, id));
      _mm512_storeu_si512(bits + count, _mm512_maskz_compress_epi32(m, b));
      count += static_cast<size_t>(__builtin_popcount(m));
    }
    if (count > cap) break;
  }
  r.max_key = static_cast<uint32_t>(_mm512_reduce_max_epu32(vmax));
  r.count = count;
  if (count <= cap) ScanScalarRange(x, start, n, lo, ids, bits, &r);
  r.overflow = r.count > cap;
  return r;
}

#endif

MagnitudeScanFn GetMagnitudeScanFn(SimdLevel level) {
#if defined(__x86_64__)
  return PickSimdKernel<MagnitudeScanFn>(level, &MagnitudeScanScalar, &MagnitudeScanAvx2, &MagnitudeScanAvx512);
#else
  MagnitudeScanFn none = nullptr;
  return PickSimdKernel<MagnitudeScanFn>(level, &MagnitudeScanScalar, none, none);
#endif
}

}  // namespace frugal::compress::internal
