#include "frugal/compress/round_kernels.h"

#include <cassert>

namespace frugal::compress {

// Plain loops over restrict pointers: the compiler vectorises them, and each
// element's arithmetic is the one expression the round has always used, so
// the results are bit-identical to the engine's element loops they replace.
void PseudoGradient(Span<const float> anchor, Span<const float> master, Span<float> delta, Span<float> base) {
  assert(anchor.size() == master.size() && delta.size() == master.size() && base.size() == master.size());
  const float* __restrict a = anchor.data();
  const float* __restrict m = master.data();
  float* __restrict d = delta.data();
  float* __restrict b = base.data();
  const size_t n = master.size();
  for (size_t i = 0; i < n; ++i) {
    d[i] = a[i] - m[i];
    b[i] = m[i];
  }
}

void Rebase(Span<const float> anchor, Span<const float> base, Span<float> master) {
  assert(anchor.size() == master.size() && base.size() == master.size());
  const float* __restrict a = anchor.data();
  const float* __restrict b = base.data();
  float* __restrict m = master.data();
  const size_t n = master.size();
  for (size_t i = 0; i < n; ++i) m[i] = a[i] - (b[i] - m[i]);
}

}  // namespace frugal::compress
