// The reference pass of the round benchmark: a plain vectorised sum over a
// buffer, one thread, the memory-bandwidth ceiling a streaming stage is
// compared against (bench/kernels' PlainSum benchmark runs it too).
#pragma once

#include <cstddef>

namespace frugal::bench {

// Sum of x[0, n), AVX-512 where the CPU has it, else 16 portable lanes.
float PlainSum(const float* x, size_t n);

}  // namespace frugal::bench
