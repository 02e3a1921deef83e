#include "frugal/optim/sparse_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

namespace frugal::optim {
namespace {

std::unique_ptr<SparseOptimizer> Make(const OptimizerOptions& o, size_t n) {
  auto r = CreateSparseOptimizer(o, n, "layer.weight");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

TEST(SparseSgd, HandComputedMomentumSteps) {
  OptimizerOptions o;
  o.lr = 0.5;
  o.momentum = 0.5;
  o.dampening = 0.5;
  o.weight_decay = 0.25;
  auto opt = Make(o, 3);
  std::vector<float> p = {1.0f, 2.0f, 4.0f};
  std::vector<uint32_t> idx = {0, 2};
  // Step 1 (first touch, no dampening): d = g + 0.25 p; buf = d; p -= 0.5 d.
  std::vector<float> g = {1.0f, 3.0f};
  ASSERT_TRUE(opt->Step(p, idx, g).ok());
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.5f * 1.25f);  // d = 1.25
  EXPECT_FLOAT_EQ(p[1], 2.0f);                 // untouched
  EXPECT_FLOAT_EQ(p[2], 4.0f - 0.5f * 4.0f);   // d = 4
  // Step 2: d = g + 0.25 p; buf = 0.5 buf + 0.5 d; p -= 0.5 buf.
  // Coordinate 1 is touched for the first time: buf = d, no dampening.
  std::vector<uint32_t> all = {0, 1, 2};
  std::vector<float> g2 = {2.0f, 1.0f, 0.0f};
  ASSERT_TRUE(opt->Step(p, all, g2).ok());
  float p0 = 0.375f, d0 = 2.0f + 0.25f * p0, b0 = 0.5f * 1.25f + 0.5f * d0;
  EXPECT_FLOAT_EQ(p[0], p0 - 0.5f * b0);
  float d1 = 1.0f + 0.25f * 2.0f;
  EXPECT_FLOAT_EQ(p[1], 2.0f - 0.5f * d1);
  float p2 = 2.0f, d2 = 0.25f * p2, b2 = 0.5f * 4.0f + 0.5f * d2;
  EXPECT_FLOAT_EQ(p[2], p2 - 0.5f * b2);
}

TEST(SparseSgd, Nesterov) {
  OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  auto opt = Make(o, 1);
  std::vector<float> p = {1.0f};
  std::vector<uint32_t> idx = {0};
  std::vector<float> g = {1.0f};
  ASSERT_TRUE(opt->Step(p, idx, g).ok());  // buf = 1, d = 1 + 0.9 = 1.9
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.19f);
  ASSERT_TRUE(opt->Step(p, idx, g).ok());  // buf = 1.9, d = 1 + 1.71 = 2.71
  EXPECT_FLOAT_EQ(p[0], 0.81f - 0.271f);
}

TEST(SparseAdam, HandComputedStepsAndFrozenMoments) {
  for (const char* kind : {"adam", "adamw"}) {
    OptimizerOptions o;
    o.kind = kind;
    o.lr = 0.1;
    o.weight_decay = 0.5;
    auto opt = Make(o, 2);
    std::vector<float> p = {1.0f, 1.0f};
    std::vector<uint32_t> first = {0};
    std::vector<float> g = {0.5f};
    ASSERT_TRUE(opt->Step(p, first, g).ok());
    // Step 1: m_hat = g', v_hat = g'^2, so the update is -lr * sign(g') (eps aside).
    if (std::string(kind) == "adam") {
      EXPECT_NEAR(p[0], 1.0f - 0.1f, 1e-6);  // g' = 0.5 + 0.5 * 1 = 1
    } else {
      EXPECT_NEAR(p[0], 1.0f * (1.0f - 0.05f) - 0.1f, 1e-6);
    }
    EXPECT_EQ(p[1], 1.0f);  // untouched: no update, no decay
    // Step 2 touches only coordinate 1: step count is 2 for bias correction,
    // its moments start from 0, and coordinate 0 is frozen.
    float p0 = p[0];
    std::vector<uint32_t> second = {1};
    std::vector<float> g2 = {-2.0f};
    ASSERT_TRUE(opt->Step(p, second, g2).ok());
    EXPECT_EQ(p[0], p0);
    double gp = std::string(kind) == "adam" ? -2.0 + 0.5 : -2.0;
    double m = 0.1 * gp, v = 0.001 * gp * gp;
    double pd = std::string(kind) == "adam" ? 1.0 : 0.95;
    double expect = pd - 0.1 / (1 - 0.81) * m / (std::sqrt(v) / std::sqrt(1 - 0.999 * 0.999) + 1e-8);
    EXPECT_NEAR(p[1], expect, 1e-6) << kind;
  }
}

TEST(SparseOptimizer, AllIndicesEqualsDense) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const size_t n = 1000;
  for (const char* kind : {"sgd", "adam", "adamw"}) {
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    auto sparse = Make(o, n), dense = Make(o, n);
    std::vector<float> ps(n), pd(n);
    for (size_t i = 0; i < n; ++i) ps[i] = pd[i] = normal(rng);
    std::vector<uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0u);
    for (int step = 0; step < 10; ++step) {
      std::vector<float> g(n);
      for (float& x : g) x = normal(rng);
      ASSERT_TRUE(sparse->Step(ps, all, g).ok());
      ASSERT_TRUE(dense->StepDense(pd, g).ok());
    }
    EXPECT_EQ(ps, pd) << kind;
  }
}

TEST(SparseSgd, ContiguousRunsMatchOneAtATime) {
  // Whole 16-runs take the vectorised path (Note [Contiguous runs]) once their
  // momentum buffers exist; one index per call never does. Same bits either way.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  OptimizerOptions o;
  o.momentum = 0.9;
  o.dampening = 0.2;
  o.weight_decay = 1e-3;
  o.nesterov = false;
  const size_t n = 256;
  auto runs = Make(o, n), single = Make(o, n);
  std::vector<float> pr(n), ps(n);
  for (size_t i = 0; i < n; ++i) pr[i] = ps[i] = normal(rng);
  for (int step = 0; step < 6; ++step) {
    std::vector<uint32_t> idx;
    for (uint32_t b = 0; b < n / 16; ++b) {
      if ((b + step) % 3 == 0) continue;  // blocks come and go
      for (uint32_t t = 0; t < 16; ++t) {
        if (b == 5 && t == 7) continue;  // a broken run takes the scalar path
        idx.push_back(16 * b + t);
      }
    }
    std::vector<float> g(idx.size());
    for (float& x : g) x = normal(rng);
    ASSERT_TRUE(runs->Step(pr, idx, g).ok());
    for (size_t j = 0; j < idx.size(); ++j) {
      ASSERT_TRUE(single->Step(ps, Span<const uint32_t>(&idx[j], 1), Span<const float>(&g[j], 1)).ok());
    }
    ASSERT_EQ(pr, ps) << "step " << step;
  }
}

TEST(SparseOptimizer, RejectsBadStepsWithoutChangingAnything) {
  OptimizerOptions o;
  o.kind = "adam";
  auto opt = Make(o, 10);
  std::vector<float> p(10, 1.0f);
  std::vector<float> g = {1.0f, 1.0f};
  std::vector<uint32_t> unsorted = {3, 2}, out_of_range = {3, 10}, ok = {3, 4};
  EXPECT_EQ(opt->Step(p, unsorted, g).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(opt->Step(p, out_of_range, g).code(), Status::Code::kInvalidArgument);
  std::vector<float> nan = {1.0f, std::nanf("")};
  Status st = opt->Step(p, ok, nan);
  ASSERT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("layer.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("index 4"), std::string::npos) << st.message();
  std::vector<float> dense_inf(10, 0.0f);
  dense_inf[7] = INFINITY;
  EXPECT_NE(opt->StepDense(p, dense_inf).message().find("Inf at index 7"), std::string::npos);
  std::vector<float> short_p(9, 1.0f);
  EXPECT_FALSE(opt->Step(short_p, ok, g).ok());
  EXPECT_EQ(p, std::vector<float>(10, 1.0f));
}

TEST(SparseOptimizer, RejectsBadOptions) {
  OptimizerOptions o;
  o.kind = "lamb";
  EXPECT_FALSE(CreateSparseOptimizer(o, 1, "w").ok());
  o = OptimizerOptions();
  o.nesterov = true;  // without momentum
  EXPECT_FALSE(CreateSparseOptimizer(o, 1, "w").ok());
  o = OptimizerOptions();
  o.lr = -1;
  EXPECT_FALSE(CreateSparseOptimizer(o, 1, "w").ok());
  o = OptimizerOptions();
  o.kind = "adam";
  o.beta2 = 1.0;
  EXPECT_FALSE(CreateSparseOptimizer(o, 1, "w").ok());
}

TEST(SparseOptimizer, StateRoundTripContinuesIdentically) {
  for (const char* kind : {"sgd", "adam", "adamw"}) {
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = 0.9;
    o.dampening = 0.1;
    auto a = Make(o, 100);
    std::vector<float> p(100, 0.5f);
    std::vector<uint32_t> idx = {1, 5, 50};
    std::vector<float> g = {0.1f, -0.2f, 0.3f};
    ASSERT_TRUE(a->Step(p, idx, g).ok());
    auto b = Make(o, 100);
    std::vector<uint8_t> bytes = a->SerializeState();
    EXPECT_EQ(bytes.size(), a->StateBytes()) << kind;
    std::vector<uint8_t> appended = {42};  // AppendState adds the same bytes after what is there
    a->AppendState(&appended);
    EXPECT_EQ(std::vector<uint8_t>(appended.begin() + 1, appended.end()), bytes) << kind;
    ASSERT_TRUE(b->DeserializeState(bytes).ok());
    std::vector<float> pa = p, pb = p;
    ASSERT_TRUE(a->Step(pa, idx, g).ok());
    ASSERT_TRUE(b->Step(pb, idx, g).ok());
    EXPECT_EQ(pa, pb) << kind;
    bytes.pop_back();
    EXPECT_FALSE(b->DeserializeState(bytes).ok());
    EXPECT_FALSE(Make(o, 99)->DeserializeState(a->SerializeState()).ok());
  }
}

// Parameter groups (Note [Segmented optimizer]): a composite over two
// segments steps each half exactly as its own optimizer would, from sparse
// steps whose indices straddle the boundary.
TEST(SegmentedOptimizer, EachSegmentStepsAsItsOwnOptimizer) {
  OptimizerOptions decay, plain;
  decay.kind = plain.kind = "adamw";
  decay.weight_decay = 0.1;
  OptimizerSegment a{5, decay, 1.0}, b{3, plain, 0.5};
  auto seg = CreateSegmentedOptimizer({a, b}, "bucket");
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  auto left = Make(decay, 5), right = Make(plain, 3);
  (*seg)->set_lr(0.2);
  left->set_lr(0.2);
  right->set_lr(0.1);
  EXPECT_EQ((*seg)->lr(), 0.2);
  std::vector<float> p = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> l(p.begin(), p.begin() + 5), r(p.begin() + 5, p.end());
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 1);
  for (int step = 0; step < 6; ++step) {
    // Step 2 sends only the first segment's coordinates: the second's Adam
    // step count advances all the same, as in the single optimizer.
    std::vector<uint32_t> idx = step == 2 ? std::vector<uint32_t>{0, 3} : std::vector<uint32_t>{1, 4, 5, 7};
    std::vector<float> v;
    for (size_t j = 0; j < idx.size(); ++j) v.push_back(g(rng));
    ASSERT_TRUE((*seg)->Step(p, idx, v).ok());
    std::vector<uint32_t> li, ri;
    std::vector<float> lv, rv;
    for (size_t j = 0; j < idx.size(); ++j) {
      if (idx[j] < 5) {
        li.push_back(idx[j]);
        lv.push_back(v[j]);
      } else {
        ri.push_back(idx[j] - 5);
        rv.push_back(v[j]);
      }
    }
    ASSERT_TRUE(left->Step(l, li, lv).ok());
    ASSERT_TRUE(right->Step(r, ri, rv).ok());
  }
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(p[i], l[i]) << i;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(p[5 + i], r[i]) << i;
  EXPECT_NE(p[1], 2.0f);
  EXPECT_NE(p[7], 8.0f);
}

TEST(SegmentedOptimizer, OnePlainSegmentIsThePlainOptimizer) {
  OptimizerOptions o;
  o.kind = "adam";
  auto seg = CreateSegmentedOptimizer({OptimizerSegment{4, o, 1.0}}, "w");
  ASSERT_TRUE(seg.ok());
  auto plain = Make(o, 4);
  std::vector<float> p = {1, 2, 3, 4}, q = p, g = {0.5f, -1, 2, 0.25f};
  ASSERT_TRUE((*seg)->StepDense(p, g).ok());
  ASSERT_TRUE(plain->StepDense(q, g).ok());
  EXPECT_EQ(p, q);
  EXPECT_EQ((*seg)->SerializeState(), plain->SerializeState());
  EXPECT_EQ((*seg)->tensor_name(), "w");
}

TEST(SegmentedOptimizer, StateRoundTripsAndBadInputChangesNothing) {
  OptimizerOptions sgd;
  sgd.momentum = 0.9;
  OptimizerOptions adam;
  adam.kind = "adam";
  std::vector<OptimizerSegment> segments = {{3, sgd, 1.0}, {2, adam, 2.0}};
  auto a = CreateSegmentedOptimizer(segments, "b");
  auto b = CreateSegmentedOptimizer(segments, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> p = {1, 2, 3, 4, 5};
  std::vector<uint32_t> idx = {0, 2, 4};
  std::vector<float> v = {1, -1, 0.5f};
  ASSERT_TRUE((*a)->Step(p, idx, v).ok());
  const std::vector<uint8_t> state = (*a)->SerializeState();
  EXPECT_EQ(state.size(), (*a)->StateBytes());
  ASSERT_TRUE((*b)->DeserializeState(state).ok());
  EXPECT_EQ((*b)->SerializeState(), state);
  std::vector<float> q = p;
  ASSERT_TRUE((*a)->Step(p, idx, v).ok());
  ASSERT_TRUE((*b)->Step(q, idx, v).ok());
  EXPECT_EQ(p, q);

  // Truncated or padded bytes: an error, and the state stays.
  const std::vector<uint8_t> before = (*b)->SerializeState();
  std::vector<uint8_t> cut(state.begin(), state.end() - 3), padded = state;
  padded.push_back(0);
  EXPECT_FALSE((*b)->DeserializeState(cut).ok());
  EXPECT_FALSE((*b)->DeserializeState(padded).ok());
  EXPECT_EQ((*b)->SerializeState(), before);

  // A NaN in the second segment: refused before the first one steps.
  std::vector<float> nan = {1, 1, std::nanf("")};
  std::vector<float> r = q;
  Status st = (*b)->Step(q, idx, nan);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("NaN"), std::string::npos) << st.message();
  EXPECT_EQ(q, r);
  EXPECT_EQ((*b)->SerializeState(), before);
}

TEST(SegmentedOptimizer, RejectsBadSegments) {
  OptimizerOptions o;
  EXPECT_FALSE(CreateSegmentedOptimizer({}, "b").ok());
  EXPECT_FALSE(CreateSegmentedOptimizer({{0, o, 1.0}}, "b").ok());
  EXPECT_FALSE(CreateSegmentedOptimizer({{2, o, std::nan("")}}, "b").ok());
  OptimizerOptions bad;
  bad.kind = "lion";
  Status st = CreateSegmentedOptimizer({{2, o, 1.0}, {2, bad, 1.0}}, "b").status();
  EXPECT_NE(st.message().find("segment 1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace frugal::optim
