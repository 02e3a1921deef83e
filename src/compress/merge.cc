#include "frugal/compress/merge.h"

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
  out->indices.reserve(total);
  out->values.reserve(total);
  std::vector<size_t> pos(inputs.size(), 0);
  std::vector<Head> heap;
  heap.reserve(inputs.size());
  for (size_t w = 0; w < inputs.size(); ++w) {
    if (inputs[w]->nnz() > 0) heap.push_back({inputs[w]->indices[0], static_cast<uint32_t>(w)});
  }
  for (size_t i = heap.size(); i-- > 0;) SiftDown(heap, i);
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

}  // namespace frugal::compress
