// Span<T>: a non-owning view of a contiguous array (C++17 has no std::span).
// The torch-free modules (compress, optim, comm, sim, sched) take their
// buffers as spans so they never depend on a tensor type.
#pragma once

#include <cassert>
#include <cstddef>
#include <type_traits>
#include <vector>

namespace frugal {

template <typename T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(T* data, size_t size) : data_(data), size_(size) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  Span(std::vector<U>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT: implicit like std::span
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<const U (*)[], T (*)[]>>>
  Span(const std::vector<U>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  constexpr Span(Span<U> other) : data_(other.data()), size_(other.size()) {}  // NOLINT

  constexpr T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T* begin() const { return data_; }
  constexpr T* end() const { return data_ + size_; }
  T& operator[](size_t i) const {
    assert(i < size_);
    return data_[i];
  }
  // REQUIRES: offset + count <= size().
  Span subspan(size_t offset, size_t count) const {
    assert(offset + count <= size_);
    return Span(data_ + offset, count);
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace frugal
