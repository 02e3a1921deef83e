#include "frugal/compress/sparse_vector.h"

#include <algorithm>
#include <string>

namespace frugal::compress {

Status ValidateSparseVector(const SparseVector& v) {
  if (v.indices.size() != v.values.size()) {
    return Status::InvalidArgument("sparse vector has " + std::to_string(v.indices.size()) +
                                   " indices but " + std::to_string(v.values.size()) + " values");
  }
  for (size_t j = 0; j < v.indices.size(); ++j) {
    if (v.indices[j] >= v.dense_size) {
      return Status::InvalidArgument("index " + std::to_string(v.indices[j]) + " at position " +
                                     std::to_string(j) + " is out of range for dense size " +
                                     std::to_string(v.dense_size));
    }
    if (j > 0 && v.indices[j] <= v.indices[j - 1]) {
      return Status::InvalidArgument("indices are not strictly increasing at position " +
                                     std::to_string(j));
    }
  }
  return Status::Ok();
}

void Densify(const SparseVector& v, Span<float> dense) {
  assert(dense.size() == v.dense_size);
  std::fill(dense.begin(), dense.end(), 0.0f);
  for (size_t j = 0; j < v.indices.size(); ++j) dense[v.indices[j]] = v.values[j];
}

}  // namespace frugal::compress
