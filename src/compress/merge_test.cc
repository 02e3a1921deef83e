#include "frugal/compress/merge.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace frugal::compress {
namespace {

SparseVector Random(uint64_t dense, double density, std::mt19937& rng) {
  SparseVector v;
  v.dense_size = dense;
  std::bernoulli_distribution take(density);
  std::uniform_int_distribution<int> val(-8, 8);
  for (uint64_t i = 0; i < dense; ++i) {
    if (take(rng)) {
      v.indices.push_back(static_cast<uint32_t>(i));
      v.values.push_back(0.5f * static_cast<float>(val(rng)));  // exact sums in any order
    }
  }
  return v;
}

TEST(Merge, MatchesDenseSum) {
  std::mt19937 rng(1);
  for (size_t w : {1, 2, 3, 8, 33}) {
    for (double density : {0.0, 0.01, 0.3, 1.0}) {
      const uint64_t n = 2000;
      std::vector<SparseVector> vs;
      for (size_t i = 0; i < w; ++i) vs.push_back(Random(n, density, rng));
      std::vector<const SparseVector*> ptrs;
      std::vector<float> dense(n, 0.0f);
      std::vector<bool> present(n, false);
      for (const auto& v : vs) {
        ptrs.push_back(&v);
        for (size_t j = 0; j < v.nnz(); ++j) {
          dense[v.indices[j]] += v.values[j];
          present[v.indices[j]] = true;
        }
      }
      SparseVector out;
      ASSERT_TRUE(MergeSparse(ptrs, &out).ok());
      ASSERT_TRUE(ValidateSparseVector(out).ok());
      EXPECT_EQ(out.dense_size, n);
      size_t j = 0;
      for (uint64_t i = 0; i < n; ++i) {
        if (!present[i]) continue;
        ASSERT_LT(j, out.nnz());
        ASSERT_EQ(out.indices[j], i);
        ASSERT_EQ(out.values[j], dense[i]);
        ++j;
      }
      EXPECT_EQ(j, out.nnz());
    }
  }
}

TEST(Merge, BlockStructuredInputsMatchDenseSum) {
  // Runs of 16 from each input, partly overlapping: exercises the run-copy path.
  std::mt19937 rng(9);
  const uint64_t n = 16 * 500 + 7;
  for (size_t w : {2, 3, 5}) {
    std::vector<SparseVector> vs(w);
    std::vector<float> dense(n, 0.0f);
    std::vector<bool> present(n, false);
    std::vector<const SparseVector*> ptrs;
    for (auto& v : vs) {
      v.dense_size = n;
      for (uint64_t b = 0; b * 16 < n; ++b) {
        if (rng() % 4 != 0) continue;
        for (uint64_t i = 16 * b; i < std::min<uint64_t>(n, 16 * b + 16); ++i) {
          v.indices.push_back(static_cast<uint32_t>(i));
          v.values.push_back(static_cast<float>(rng() % 9) - 4.0f);
          dense[i] += v.values.back();
          present[i] = true;
        }
      }
      ptrs.push_back(&v);
    }
    SparseVector out;
    ASSERT_TRUE(MergeSparse(ptrs, &out).ok());
    ASSERT_TRUE(ValidateSparseVector(out).ok());
    size_t j = 0;
    for (uint64_t i = 0; i < n; ++i) {
      if (!present[i]) continue;
      ASSERT_EQ(out.indices[j], i);
      ASSERT_EQ(out.values[j], dense[i]) << i;
      ++j;
    }
    EXPECT_EQ(j, out.nnz());
  }
}

// Note [Block merge]: inputs made only of whole aligned blocks take the
// block path. Its sums must be bit-identical to the element-wise path's;
// one extra single-element input (a 0 added last to a coordinate already
// present, which changes no sum) sends the same data down the element path.
TEST(Merge, WholeBlockInputsMergeBitIdenticallyToTheElementPath) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  const uint64_t n = 16 * 400;
  for (size_t w : {1, 2, 4, 7}) {
    std::vector<SparseVector> vs(w);
    std::vector<const SparseVector*> ptrs;
    std::vector<float> dense(n, 0.0f);
    for (auto& v : vs) {
      v.dense_size = n;
      for (uint64_t b = 0; b < n / 16; ++b) {
        if (b != 0 && rng() % 3 != 0) continue;  // block 0 in every input
        for (uint64_t i = 16 * b; i < 16 * b + 16; ++i) {
          v.indices.push_back(static_cast<uint32_t>(i));
          // Magnitudes 1e-3 to 1e5: fp32 sums depend on their order.
          v.values.push_back(mantissa(rng) * std::pow(10.0f, static_cast<float>(rng() % 9) - 3.0f));
          dense[i] += v.values.back();
        }
      }
      ptrs.push_back(&v);
    }
    SparseVector blocks;
    ASSERT_TRUE(MergeSparse(ptrs, &blocks).ok());
    ASSERT_TRUE(ValidateSparseVector(blocks).ok());
    SparseVector zero{n, {5}, {0.0f}};
    std::vector<const SparseVector*> mixed = ptrs;
    mixed.push_back(&zero);
    SparseVector elements;
    ASSERT_TRUE(MergeSparse(mixed, &elements).ok());
    EXPECT_EQ(blocks.indices, elements.indices) << w;
    EXPECT_EQ(blocks.values, elements.values) << w;
    size_t j = 0;
    for (uint64_t i = 0; i < n; ++i) {
      if (j < blocks.nnz() && blocks.indices[j] == i) {
        ASSERT_EQ(blocks.values[j++], dense[i]) << i;
      }
    }
    EXPECT_EQ(j, blocks.nnz());
    EXPECT_EQ(blocks.nnz() % 16, 0u);
  }
  // Input order inside the block path: 1e8 + 1 - 1e8 is 0 in fp32.
  SparseVector a{32, {}, {}}, b{32, {}, {}}, c{32, {}, {}};
  for (uint32_t i = 16; i < 32; ++i) {
    a.indices.push_back(i), a.values.push_back(1e8f);
    b.indices.push_back(i), b.values.push_back(1.0f);
    c.indices.push_back(i), c.values.push_back(-1e8f);
  }
  std::vector<const SparseVector*> in = {&a, &b, &c};
  SparseVector out;
  ASSERT_TRUE(MergeSparse(in, &out).ok());
  ASSERT_EQ(out.nnz(), 16u);
  EXPECT_EQ(out.indices.front(), 16u);
  for (float v : out.values) EXPECT_EQ(v, 0.0f);
}

TEST(Merge, SumsDuplicatesInInputOrder) {
  // 1e8 + 1 - 1e8 in fp32 depends on the order: input order gives 0.
  SparseVector a{10, {3}, {1e8f}}, b{10, {3}, {1.0f}}, c{10, {3}, {-1e8f}};
  std::vector<const SparseVector*> in = {&a, &b, &c};
  SparseVector out;
  ASSERT_TRUE(MergeSparse(in, &out).ok());
  ASSERT_EQ(out.nnz(), 1u);
  EXPECT_EQ(out.values[0], (1e8f + 1.0f) + -1e8f);
}

TEST(Merge, RejectsBadInputs) {
  SparseVector a{10, {1, 2}, {1, 1}}, b{11, {1}, {1}}, unsorted{10, {2, 1}, {1, 1}};
  SparseVector out;
  std::vector<const SparseVector*> sizes = {&a, &b};
  EXPECT_EQ(MergeSparse(sizes, &out).code(), Status::Code::kInvalidArgument);
  std::vector<const SparseVector*> order = {&a, &unsorted};
  EXPECT_EQ(MergeSparse(order, &out).code(), Status::Code::kInvalidArgument);
  std::vector<const SparseVector*> none;
  EXPECT_TRUE(MergeSparse(none, &out).ok());
  EXPECT_EQ(out.nnz(), 0u);
}

TEST(Merge, CombineEncodedIsTheMergeOfTheDecodedParts) {
  std::mt19937 rng(7);
  const WireFormat fp32{ValueEncoding::kFp32, IndexEncoding::kAbsoluteU32};
  std::vector<std::vector<uint8_t>> parts(3);
  std::vector<SparseVector> vs;
  for (auto& p : parts) {
    vs.push_back(Random(500, 0.1, rng));
    ASSERT_TRUE(Encode(vs.back(), fp32, &p).ok());
  }
  SparseVector merged, want, got;
  ASSERT_TRUE(DecodeAndMerge(parts, &merged).ok());
  std::vector<const SparseVector*> ptrs = {&vs[0], &vs[1], &vs[2]};
  ASSERT_TRUE(MergeSparse(ptrs, &want).ok());
  EXPECT_EQ(merged.indices, want.indices);
  EXPECT_EQ(merged.values, want.values);
  auto out = CombineEncoded(parts, fp32);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(Decode(Span<const uint8_t>(out->data(), out->size()), {}, &got).ok());
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.values, want.values);  // fp32 stays fp32 in the merged format
  parts[1].pop_back();  // a truncated part
  EXPECT_FALSE(CombineEncoded(parts, fp32).ok());
}

// Note [Dense merge]: inputs that hold every index take the element-wise
// path; an extra empty input sends the same ones through the heap merge.
// Values with full mantissas make the sums depend on their order.
TEST(Merge, DenseInputsMergeBitIdenticallyToTheHeapPath) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  for (size_t n : {1, 15, 16, 17, 4095, 4096, 4097, 10000}) {
    for (size_t w : {1, 2, 3, 4, 7}) {
      std::vector<SparseVector> vs(w);
      for (auto& v : vs) {
        v.dense_size = n;
        for (size_t i = 0; i < n; ++i) {
          v.indices.push_back(static_cast<uint32_t>(i));
          v.values.push_back(std::ldexp(val(rng), static_cast<int>(rng() % 40) - 20));
        }
      }
      SparseVector empty;
      empty.dense_size = n;
      std::vector<const SparseVector*> dense, heap;
      for (const auto& v : vs) dense.push_back(&v);
      heap = dense;
      heap.push_back(&empty);
      SparseVector got, want;
      ASSERT_TRUE(MergeSparse(Span<const SparseVector* const>(dense.data(), dense.size()), &got).ok());
      ASSERT_TRUE(MergeSparse(Span<const SparseVector* const>(heap.data(), heap.size()), &want).ok());
      ASSERT_EQ(got.dense_size, n);
      ASSERT_EQ(got.indices, want.indices) << n << " " << w;
      ASSERT_EQ(got.values.size(), want.values.size());
      EXPECT_EQ(std::memcmp(got.values.data(), want.values.data(), 4 * n), 0) << n << " " << w;
      for (size_t i = 0; i < n; ++i) {  // and the sums are taken in input order
        float s = vs[0].values[i];
        for (size_t k = 1; k < w; ++k) s += vs[k].values[i];
        ASSERT_EQ(std::memcmp(&s, &got.values[i], 4), 0) << n << " " << w << " " << i;
      }
    }
  }
}

// An input holding n indices below n that are not 0 .. n-1 (a repeat) is
// still rejected, with the message naming the position.
TEST(Merge, RejectsFullLengthInputWithARepeatedIndex) {
  SparseVector v;
  v.dense_size = 4;
  v.indices = {0, 1, 1, 3};
  v.values = {1, 2, 3, 4};
  const SparseVector* in[] = {&v, &v};
  SparseVector out;
  Status s = MergeSparse(Span<const SparseVector* const>(in, 2), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("not strictly increasing at position 2"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace frugal::compress
