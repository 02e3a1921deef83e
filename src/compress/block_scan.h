// Internal: the per-block L1 scoring kernels of the `block` sparsifier, one per
// instruction set, picked at run time (no global -mavx flags: the library must
// run on any x86-64).
//
// Note [Block score order]
// Floating-point addition is not associative, so "the L1 norm of 16 values"
// is only well defined once the order of additions is fixed. Every kernel
// uses the same pairwise tree, which is the natural shape of a SIMD
// reduction:
//   t8[i] = |a[i]| + |a[i+8]|   (i < 8)
//   t4[i] = t8[i] + t8[i+4]     (i < 4)
//   t2[i] = t4[i] + t4[i+2]     (i < 2)
//   score = t2[0] + t2[1]
// Hence scalar, AVX2 and AVX-512 produce bit-identical scores, and therefore
// identical selections (tested in block_sparsifier_test.cc).
#pragma once

#include <cstddef>

#include "frugal/compress/sparsifier.h"

namespace frugal::compress::internal {

// scores[b] = L1 norm of x[16b, 16b + 16) for b < num_blocks.
using BlockScoresFn = void (*)(const float* x, size_t num_blocks, float* scores);

void BlockScoresScalar(const float* x, size_t num_blocks, float* scores);
#if defined(__x86_64__)
void BlockScoresAvx2(const float* x, size_t num_blocks, float* scores);
void BlockScoresAvx512(const float* x, size_t num_blocks, float* scores);
#endif

// Score of a short block (len < 16): the same tree with zeros for the missing values.
float ShortBlockScore(const float* x, size_t len);

// The kernel for `level` (kAuto = best available). Returns nullptr if the CPU
// lacks the requested instruction set.
BlockScoresFn GetBlockScoresFn(SimdLevel level);

}  // namespace frugal::compress::internal
