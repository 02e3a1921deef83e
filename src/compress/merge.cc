#include "frugal/compress/merge.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace frugal::compress {
namespace {

// Heap entry: the next index of one input. Ordered by (index, input) so equal
// indices pop in input order.
struct Head {
  uint32_t index;
  uint32_t input;
};
inline bool Before(const Head& a, const Head& b) {
  return a.index < b.index || (a.index == b.index && a.input < b.input);
}

void SiftDown(std::vector<Head>& heap, size_t i) {
  const size_t size = heap.size();
  Head item = heap[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= size) break;
    if (c + 1 < size && Before(heap[c + 1], heap[c])) ++c;
    if (!Before(heap[c], item)) break;
    heap[i] = heap[c];
    i = c;
  }
  heap[i] = item;
}

// A heap of every non-empty input's first index.
std::vector<Head> FirstHeads(Span<const SparseVector* const> inputs) {
  std::vector<Head> heap;
  heap.reserve(inputs.size());
  for (size_t w = 0; w < inputs.size(); ++w) {
    if (inputs[w]->nnz() > 0) heap.push_back({inputs[w]->indices[0], static_cast<uint32_t>(w)});
  }
  for (size_t i = heap.size(); i-- > 0;) SiftDown(heap, i);
  return heap;
}

// Note [Block merge]
// The block sparsifier's vectors hold whole aligned blocks of kBlockSize
// coordinates, and so do the merged updates built from them. When every
// input does, the merge runs over blocks: one heap step per block instead of
// per run, and a block is added in place or appended as 16 indices and
// values at once into the output reserved up front, with no per-element
// test. The sums
// are the same additions in the same input order as the element-wise path,
// so the result is bit-identical. Measured by bench/kernels (Merge/W/D).
bool WholeBlocks(const SparseVector& v) {
  const size_t n = v.nnz();
  if (n % kBlockSize != 0) return false;
  for (size_t b = 0; b < n; b += kBlockSize) {
    if (v.indices[b] % kBlockSize != 0 || v.indices[b + kBlockSize - 1] != v.indices[b] + (kBlockSize - 1)) {
      return false;
    }
  }
  return true;
}

// REQUIRES: every input is WholeBlocks and valid; *out is empty, with
// dense_size set.
void MergeBlocks(Span<const SparseVector* const> inputs, SparseVector* out) {
  std::vector<size_t> pos(inputs.size(), 0);
  std::vector<Head> heap = FirstHeads(inputs);
  uint32_t block[kBlockSize];
  while (!heap.empty()) {
    const Head top = heap[0];
    const SparseVector& v = *inputs[top.input];
    const size_t p = pos[top.input];
    const float* src = v.values.data() + p;
    const size_t n = out->indices.size();
    if (n > 0 && out->indices[n - kBlockSize] == top.index) {
      float* dst = out->values.data() + n - kBlockSize;
      for (size_t k = 0; k < kBlockSize; ++k) dst[k] += src[k];
    } else {
      for (size_t k = 0; k < kBlockSize; ++k) block[k] = top.index + static_cast<uint32_t>(k);
      out->indices.insert(out->indices.end(), block, block + kBlockSize);
      out->values.insert(out->values.end(), src, src + kBlockSize);
    }
    pos[top.input] = p + kBlockSize;
    if (p + kBlockSize < v.nnz()) {
      heap[0].index = v.indices[p + kBlockSize];
    } else {
      heap[0] = heap.back();
      heap.pop_back();
    }
    if (!heap.empty()) SiftDown(heap, 0);
  }
}

// Note [Dense merge]
// A density-1 round's vectors hold every index (the codec's kAllIndices
// messages decode to 0 .. n-1). When every input does, the heap merge
// would add input w's value at each index in input order; the same sums
// are taken here element-wise, a cache-sized chunk at a time: the chunk of
// input 0 is copied, then inputs 1, 2, ... are added to it in order. The
// additions and their order are the heap merge's, so the result is
// bit-identical (Merge.DenseInputsMergeBitIdenticallyToTheHeapPath), at a
// streaming pass instead of a heap step per block.
bool HoldsEveryIndex(const SparseVector& v) { return v.nnz() > 0 && v.nnz() == v.dense_size; }

// REQUIRES: every input HoldsEveryIndex and is valid (so indices[j] == j);
// *out is empty, with dense_size set.
void MergeDense(Span<const SparseVector* const> inputs, SparseVector* out) {
  const size_t n = out->dense_size;
  out->indices.resize(n);
  std::iota(out->indices.begin(), out->indices.end(), uint32_t{0});
  out->values.resize(n);
  float* __restrict dst = out->values.data();
  constexpr size_t kChunk = 4096;  // 16 KB of output: stays in L1 while the inputs stream by
  for (size_t lo = 0; lo < n; lo += kChunk) {
    const size_t hi = std::min(n, lo + kChunk);
    const float* __restrict first = inputs[0]->values.data();
    for (size_t i = lo; i < hi; ++i) dst[i] = first[i];
    for (size_t w = 1; w < inputs.size(); ++w) {
      const float* __restrict src = inputs[w]->values.data();
      for (size_t i = lo; i < hi; ++i) dst[i] += src[i];
    }
  }
}

}  // namespace

Status MergeSparse(Span<const SparseVector* const> inputs, SparseVector* out) {
  out->Clear(inputs.empty() ? 0 : inputs[0]->dense_size);
  size_t total = 0;
  for (size_t w = 0; w < inputs.size(); ++w) {
    const SparseVector& v = *inputs[w];
    if (v.dense_size != out->dense_size) {
      return Status::InvalidArgument("merge: input " + std::to_string(w) + " has dense size " +
                                     std::to_string(v.dense_size) + ", input 0 has " +
                                     std::to_string(out->dense_size));
    }
    Status st = ValidateSparseVector(v);
    if (!st.ok()) return st.WithContext("merge: input " + std::to_string(w));
    total += v.nnz();
  }
  bool dense = !inputs.empty();
  for (size_t w = 0; w < inputs.size() && dense; ++w) dense = HoldsEveryIndex(*inputs[w]);
  if (dense) {
    MergeDense(inputs, out);
    return Status::Ok();
  }
  out->indices.reserve(total);
  out->values.reserve(total);
  bool blocks = true;
  for (size_t w = 0; w < inputs.size() && blocks; ++w) blocks = WholeBlocks(*inputs[w]);
  if (blocks) {
    MergeBlocks(inputs, out);
    return Status::Ok();
  }
  std::vector<size_t> pos(inputs.size(), 0);
  std::vector<Head> heap = FirstHeads(inputs);
  while (!heap.empty()) {
    const Head top = heap[0];
    const SparseVector& v = *inputs[top.input];
    size_t p = pos[top.input];
    const float value = v.values[p];
    if (!out->indices.empty() && out->indices.back() == top.index) {
      out->values.back() += value;
    } else {
      out->indices.push_back(top.index);
      out->values.push_back(value);
    }
    ++p;
    // Runs: while this input's next index still comes before every other
    // input's head (the smaller child of the root), copy it without touching
    // the heap. Block-sparse inputs are runs of 16, so most elements take
    // this path; it cannot produce duplicates, the other heads are all larger.
    if (heap.size() > 1) {
      Head second = heap[1];
      if (heap.size() > 2 && Before(heap[2], second)) second = heap[2];
      while (p < v.nnz() && Before(Head{v.indices[p], top.input}, second)) {
        out->indices.push_back(v.indices[p]);
        out->values.push_back(v.values[p]);
        ++p;
      }
    } else {
      out->indices.insert(out->indices.end(), v.indices.begin() + p, v.indices.end());
      out->values.insert(out->values.end(), v.values.begin() + p, v.values.end());
      p = v.nnz();
    }
    pos[top.input] = p;
    if (p < v.nnz()) {
      heap[0].index = v.indices[p];
    } else {
      heap[0] = heap.back();
      heap.pop_back();
    }
    if (!heap.empty()) SiftDown(heap, 0);
  }
  return Status::Ok();
}

// Note [Merged updates]
// A merged update that travels on (a hierarchical leader's cluster sum, sent
// to other leaders and to its members) is encoded again, in
// MergedWireFormat: integer codes become int8, whose rounding is not fed
// back. A rank's final combine (every rank in the flat exchange, each
// leader's last one) needs no encoding: the pipeline takes the exchange's
// parts uncombined (SparseExchange::RunUncombined) and merges them straight
// into the update it applies. That saved an int8 encode and decode of the
// whole merged update per bucket and step, and the flat exchange's update is
// now the exact sum of what the ranks sent. Every rank merges the same parts
// in rank order, so the replicas still apply identical updates.

Status DecodeAndMerge(const std::vector<std::vector<uint8_t>>& parts, SparseVector* out) {
  if (parts.size() == 1) return Decode(Span<const uint8_t>(parts[0].data(), parts[0].size()), {}, out);
  // Reused by this pipeline thread from call to call: the decoded parts of a
  // bucket are megabytes, and fresh vectors paid their page faults anew at
  // every step (3% of a 4-worker mlp run's CPU in exc_page_fault).
  thread_local std::vector<SparseVector> decoded;
  if (decoded.size() < parts.size()) decoded.resize(parts.size());
  std::vector<const SparseVector*> ptrs;
  ptrs.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    FRUGAL_RETURN_IF_ERROR(Decode(Span<const uint8_t>(parts[i].data(), parts[i].size()), {}, &decoded[i]));
    ptrs.push_back(&decoded[i]);
  }
  return MergeSparse(Span<const SparseVector* const>(ptrs.data(), ptrs.size()), out);
}

Result<std::vector<uint8_t>> CombineEncoded(const std::vector<std::vector<uint8_t>>& parts, WireFormat wire) {
  thread_local SparseVector merged;  // reused like `decoded` above
  FRUGAL_RETURN_IF_ERROR(DecodeAndMerge(parts, &merged));
  std::vector<uint8_t> out;  // a union of whole blocks is whole blocks, so the wire format still fits
  FRUGAL_RETURN_IF_ERROR(Encode(merged, MergedWireFormat(wire), &out));
  return out;
}

}  // namespace frugal::compress
