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

// Result of one fused score-and-split pass.
struct BlockSplit {
  size_t num_sel = 0;   // ids written to sel
  size_t num_cand = 0;  // ids written to cand
  bool finite = true;   // false if some score is NaN or Inf
};

// For every full block b < num_blocks: scores[b] = its L1 norm; b is appended
// to sel if scores[b] >= hi, to cand if lo <= scores[b] < hi (ids increasing).
// REQUIRES: scores, sel and cand have room for num_blocks entries.
using ScoreSplitFn = BlockSplit (*)(const float* x, size_t num_blocks, float hi, float lo, float* scores,
                                    uint32_t* sel, uint32_t* cand);

BlockSplit ScoreSplitScalar(const float* x, size_t num_blocks, float hi, float lo, float* scores, uint32_t* sel,
                            uint32_t* cand);
#if defined(__x86_64__)
BlockSplit ScoreSplitAvx2(const float* x, size_t num_blocks, float hi, float lo, float* scores, uint32_t* sel,
                          uint32_t* cand);
BlockSplit ScoreSplitAvx512(const float* x, size_t num_blocks, float hi, float lo, float* scores, uint32_t* sel,
                            uint32_t* cand);
#endif

// Score of a short block (len < 16): the same tree with zeros for the missing values.
float ShortBlockScore(const float* x, size_t len);

// The kernel for `level` (kAuto = best available). Returns nullptr if the CPU
// lacks the requested instruction set.
ScoreSplitFn GetScoreSplitFn(SimdLevel level);

}  // namespace frugal::compress::internal
