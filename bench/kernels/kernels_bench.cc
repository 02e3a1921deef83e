// frugal_kernels_bench: compress/optim kernels against LibTorch on the same
// data, one thread. See docs/design/kernels.md for what each benchmark measures and
// bench/run_kernels.sh for how kernels.json is derived from it.
//
//   frugal_kernels_bench [--grads=FILE] [Google Benchmark flags]
// --grads: a FRGD file from frugal_dump_grads; without it the Real* and
// Quality/real benchmarks are skipped and only synthetic data is used.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized false positives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <benchmark/benchmark.h>
#include <torch/torch.h>


#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "../round/plain_sum.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/merge.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/optim/sparse_optimizer.h"
#include "grad_file.h"

namespace {

using frugal::Span;
using frugal::compress::SparseVector;

constexpr int64_t kDensityScale = 100000;  // densities are passed as parts per 100000
const std::vector<int64_t> kSizes = {1000000, 10000000, 25000000};
const std::vector<int64_t> kDensities = {100, 1000, 10000};  // 0.1%, 1%, 10%

double Density(int64_t arg) { return static_cast<double>(arg) / kDensityScale; }

// Heavy-tailed synthetic gradient: normal / sqrt(uniform) (a Student-t-like
// tail) times a log-normal per-row scale over rows of 1024, so magnitudes are
// heavy-tailed and mildly clustered, as in real layers. Deterministic by seed.
std::vector<float> HeavyTailed(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uni(0.02f, 1.0f);
  std::vector<float> g(n);
  float row_scale = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 1024 == 0) row_scale = std::exp(normal(rng));
    g[i] = 1e-3f * row_scale * normal(rng) / std::sqrt(uni(rng));
  }
  return g;
}

// Bench-only cache so every benchmark at size n sees the same bytes.
const std::vector<float>& Synthetic(size_t n, uint32_t seed = 1) {
  static std::map<std::pair<size_t, uint32_t>, std::vector<float>> cache;
  auto key = std::make_pair(n, seed);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, HeavyTailed(n, seed)).first;
  return it->second;
}

std::vector<frugal::bench::NamedGradient>& RealGrads() {
  static std::vector<frugal::bench::NamedGradient> grads;
  return grads;
}

// All tensors of the last dumped step, concatenated (the flattened model gradient).
const std::vector<float>& RealFlat() {
  static std::vector<float> flat;
  if (flat.empty() && !RealGrads().empty()) {
    std::string last = RealGrads().back().name.substr(0, RealGrads().back().name.find('/'));
    for (const auto& g : RealGrads()) {
      if (g.name.rfind(last + "/", 0) == 0) flat.insert(flat.end(), g.values.begin(), g.values.end());
    }
  }
  return flat;
}

void Check(const frugal::Status& st, benchmark::State& state) {
  if (!st.ok()) state.SkipWithError(st.ToString().c_str());
}

std::unique_ptr<frugal::compress::Sparsifier> MakeSparsifier(const std::string& kind,
                                                            frugal::compress::SimdLevel simd) {
  frugal::compress::SparsifierOptions o;
  o.simd = simd;
  return std::move(frugal::compress::CreateSparsifier(kind, o).value());
}

// `kind` in steady state (3 calls first calibrate block's threshold).
void RunSparsifier(benchmark::State& state, const char* kind, const std::vector<float>& g, double d,
                   frugal::compress::SimdLevel simd) {
  auto s = MakeSparsifier(kind, simd);
  SparseVector out;
  for (int i = 0; i < 3; ++i) Check(s->Sparsify(g, d, &out), state);
  for (auto _ : state) {
    Check(s->Sparsify(g, d, &out), state);
    benchmark::DoNotOptimize(out.values.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g.size() * sizeof(float)));
  state.counters["nnz"] = static_cast<double>(out.nnz());
}

void RunBlock(benchmark::State& state, const std::vector<float>& g, double d, frugal::compress::SimdLevel simd) {
  RunSparsifier(state, "block", g, d, simd);
}

void BM_Block(benchmark::State& state) {
  RunBlock(state, Synthetic(state.range(0)), Density(state.range(1)), frugal::compress::SimdLevel::kAuto);
}
void BM_BlockScalar(benchmark::State& state) {
  RunBlock(state, Synthetic(state.range(0)), Density(state.range(1)), frugal::compress::SimdLevel::kScalar);
}
void BM_BlockAvx2(benchmark::State& state) {
  RunBlock(state, Synthetic(state.range(0)), Density(state.range(1)), frugal::compress::SimdLevel::kAvx2);
}
void BM_RealBlock(benchmark::State& state) {
  RunBlock(state, RealFlat(), Density(state.range(0)), frugal::compress::SimdLevel::kAuto);
}

void BM_SampledTopk(benchmark::State& state) {
  RunSparsifier(state, "sampled_topk", Synthetic(state.range(0)), Density(state.range(1)),
                frugal::compress::SimdLevel::kAuto);
}
void BM_SampledTopkScalar(benchmark::State& state) {
  RunSparsifier(state, "sampled_topk", Synthetic(state.range(0)), Density(state.range(1)),
                frugal::compress::SimdLevel::kScalar);
}
void BM_SampledTopkAvx2(benchmark::State& state) {
  RunSparsifier(state, "sampled_topk", Synthetic(state.range(0)), Density(state.range(1)),
                frugal::compress::SimdLevel::kAvx2);
}
void BM_RealSampledTopk(benchmark::State& state) {
  RunSparsifier(state, "sampled_topk", RealFlat(), Density(state.range(0)), frugal::compress::SimdLevel::kAuto);
}

void BM_ExactTopk(benchmark::State& state) {
  const auto& g = Synthetic(state.range(0));
  auto s = MakeSparsifier("topk", frugal::compress::SimdLevel::kAuto);
  SparseVector out;
  for (auto _ : state) {
    Check(s->Sparsify(g, Density(state.range(1)), &out), state);
    benchmark::DoNotOptimize(out.values.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g.size() * sizeof(float)));
}

// torch::topk by magnitude plus the gather of the selected values: the work
// a torch-based compressor does for the same output.
void RunTorchTopk(benchmark::State& state, const std::vector<float>& g, double d) {
  torch::Tensor t = torch::from_blob(const_cast<float*>(g.data()), {static_cast<int64_t>(g.size())}, torch::kFloat32);
  const int64_t k = static_cast<int64_t>(frugal::compress::TargetCount(g.size(), d));
  for (auto _ : state) {
    auto [vals, idx] = torch::topk(t.abs(), k, /*dim=*/0, /*largest=*/true, /*sorted=*/false);
    torch::Tensor selected = t.index_select(0, idx);
    benchmark::DoNotOptimize(selected.data_ptr<float>());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g.size() * sizeof(float)));
}
void BM_TorchTopk(benchmark::State& state) { RunTorchTopk(state, Synthetic(state.range(0)), Density(state.range(1))); }
void BM_RealTorchTopk(benchmark::State& state) { RunTorchTopk(state, RealFlat(), Density(state.range(0))); }

// The one-thread memory-bandwidth ceiling: a plain vectorised sum over the buffer.
void BM_PlainSum(benchmark::State& state) {
  const auto& g = Synthetic(state.range(0));
  for (auto _ : state) {
    float s = frugal::bench::PlainSum(g.data(), g.size());  // the round benchmark's pass too
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g.size() * sizeof(float)));
}

// Sparse SGD with momentum on the coordinates the block sparsifier picks.
void BM_SparseSgd(benchmark::State& state) {
  const size_t n = state.range(0);
  const auto& g = Synthetic(n);
  auto s = MakeSparsifier("block", frugal::compress::SimdLevel::kAuto);
  SparseVector sel;
  Check(s->Sparsify(g, Density(state.range(1)), &sel), state);
  frugal::optim::OptimizerOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  auto opt = std::move(frugal::optim::CreateSparseOptimizer(o, n, "bench").value());
  std::vector<float> params(n, 0.5f);
  Check(opt->Step(params, sel.indices, sel.values), state);  // momentum buffers exist from here on
  for (auto _ : state) {
    Check(opt->Step(params, sel.indices, sel.values), state);
    benchmark::DoNotOptimize(params.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * sel.nnz()));
  state.counters["nnz"] = static_cast<double>(sel.nnz());
}

// LibTorch's dense SGD-momentum step on the same parameter count.
void BM_TorchSgd(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto& g = Synthetic(n);
  torch::Tensor p = torch::full({n}, 0.5f, torch::kFloat32).set_requires_grad(true);
  p.mutable_grad() = torch::from_blob(const_cast<float*>(g.data()), {n}, torch::kFloat32).clone();
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.01).momentum(0.9));
  opt.step();
  for (auto _ : state) {
    opt.step();
    benchmark::DoNotOptimize(p.data_ptr<float>());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// W workers' block-sparsified gradients (n = 10M, d = 1%, or the second
// argument in per mille) merged into one.
void BM_Merge(benchmark::State& state) {
  const size_t w = state.range(0);
  const double density = state.range(1) > 0 ? static_cast<double>(state.range(1)) / 1000.0 : 0.01;
  const size_t n = 10000000;
  std::vector<SparseVector> parts(w);
  std::vector<const SparseVector*> ptrs;
  size_t total = 0;
  for (size_t i = 0; i < w; ++i) {
    auto s = MakeSparsifier("block", frugal::compress::SimdLevel::kAuto);
    Check(s->Sparsify(Synthetic(n, static_cast<uint32_t>(100 + i)), density, &parts[i]), state);
    ptrs.push_back(&parts[i]);
    total += parts[i].nnz();
  }
  SparseVector out;
  for (auto _ : state) {
    Check(frugal::compress::MergeSparse(ptrs, &out), state);
    benchmark::DoNotOptimize(out.values.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * total));
  state.counters["out_nnz"] = static_cast<double>(out.nnz());
}

double L1(const SparseVector& v) {
  double s = 0;
  for (float x : v.values) s += std::fabs(x);
  return s;
}

// Selection quality: L1 mass captured by `block` relative to exact top-k with
// the same number of values (block sends whole blocks, so its nnz is k rounded
// up to a multiple of 16, or a whole tiny tensor; top-k gets that same count).
// Not a timing; reported through counters (1 iteration).
void QualityOn(benchmark::State& state, const std::vector<std::pair<std::string, const std::vector<float>*>>& tensors,
               double d) {
  double block_mass = 0, topk_mass = 0, worst = 1.0;
  double eq_block_mass = 0, eq_topk_mass = 0;
  double sampled_mass = 0, topk_d_mass = 0;
  using frugal::compress::IndexEncoding;
  using frugal::compress::ValueEncoding;
  for (auto _ : state) {
    for (const auto& [name, g] : tensors) {
      auto block = MakeSparsifier("block", frugal::compress::SimdLevel::kAuto);
      auto topk = MakeSparsifier("topk", frugal::compress::SimdLevel::kAuto);
      SparseVector b, t;
      Check(block->Sparsify(*g, d, &b), state);
      Check(topk->Sparsify(*g, static_cast<double>(b.nnz()) / static_cast<double>(g->size()), &t), state);
      block_mass += L1(b);
      topk_mass += L1(t);
      const double ratio = L1(t) > 0 ? L1(b) / L1(t) : 1.0;
      worst = std::min(worst, ratio);
      // Same wire bytes instead of same count: top-k at density d as fp32 +
      // delta-varint indices vs block as fp32 + block ids, given as many bytes.
      SparseVector t_d, b_eq;
      Check(topk->Sparsify(*g, d, &t_d), state);
      const double topk_bytes = static_cast<double>(
          frugal::compress::EncodedSize(t_d, {ValueEncoding::kFp32, IndexEncoding::kDeltaVarint}));
      const double block_bytes_per_value = 4.0 + 4.0 / frugal::compress::kBlockSize;
      const double eq_density = std::min(1.0, topk_bytes / block_bytes_per_value / static_cast<double>(g->size()));
      auto block_eq = MakeSparsifier("block", frugal::compress::SimdLevel::kAuto);
      Check(block_eq->Sparsify(*g, eq_density, &b_eq), state);
      eq_block_mass += L1(b_eq);
      eq_topk_mass += L1(t_d);
      SparseVector st;
      Check(MakeSparsifier("sampled_topk", frugal::compress::SimdLevel::kAuto)->Sparsify(*g, d, &st), state);
      sampled_mass += L1(st);
      topk_d_mass += L1(t_d);
      if (tensors.size() > 1) {
        std::cerr << "quality d=" << d << " " << name << " n=" << g->size() << " nnz=" << b.nnz()
                  << " block/topk mass = " << ratio << "\n";
      }
    }
  }
  state.counters["mass_captured"] = topk_mass > 0 ? block_mass / topk_mass : 1.0;
  state.counters["worst_tensor"] = worst;
  state.counters["mass_captured_equal_bytes"] = eq_topk_mass > 0 ? eq_block_mass / eq_topk_mass : 1.0;
  state.counters["sampled_topk_mass_captured"] = topk_d_mass > 0 ? sampled_mass / topk_d_mass : 1.0;
  state.counters["tensors"] = static_cast<double>(tensors.size());
}

void BM_QualitySynthetic(benchmark::State& state) {
  QualityOn(state, {{"synthetic", &Synthetic(state.range(0))}}, Density(state.range(1)));
}

// Per tensor, as the engine sparsifies each parameter separately; mass summed
// over every tensor of every dumped step.
void BM_QualityReal(benchmark::State& state) {
  std::vector<std::pair<std::string, const std::vector<float>*>> tensors;
  for (const auto& g : RealGrads()) tensors.emplace_back(g.name, &g.values);
  QualityOn(state, tensors, Density(state.range(0)));
}

void RegisterAll(bool have_real) {
  auto sizes_densities = [](benchmark::internal::Benchmark* b) {
    for (int64_t n : kSizes) {
      for (int64_t d : kDensities) b->Args({n, d});
    }
  };
  auto densities = [](benchmark::internal::Benchmark* b) {
    for (int64_t d : kDensities) b->Arg(d);
  };
  const auto ms = benchmark::kMillisecond;
  benchmark::RegisterBenchmark("Block", BM_Block)->Apply(sizes_densities)->Unit(ms);
  benchmark::RegisterBenchmark("TorchTopk", BM_TorchTopk)->Apply(sizes_densities)->Unit(ms);
  benchmark::RegisterBenchmark("BlockScalar", BM_BlockScalar)->Args({10000000, 1000})->Unit(ms);
  if (frugal::compress::DetectSimdLevel() != frugal::compress::SimdLevel::kScalar) {
    benchmark::RegisterBenchmark("BlockAvx2", BM_BlockAvx2)->Args({10000000, 1000})->Unit(ms);
  }
  benchmark::RegisterBenchmark("ExactTopk", BM_ExactTopk)->Args({10000000, 1000})->Unit(ms);
  benchmark::RegisterBenchmark("SampledTopk", BM_SampledTopk)->Apply(sizes_densities)->Unit(ms);
  benchmark::RegisterBenchmark("SampledTopkScalar", BM_SampledTopkScalar)->Args({10000000, 1000})->Unit(ms);
  if (frugal::compress::DetectSimdLevel() != frugal::compress::SimdLevel::kScalar) {
    benchmark::RegisterBenchmark("SampledTopkAvx2", BM_SampledTopkAvx2)->Args({10000000, 1000})->Unit(ms);
  }
  auto* sum = benchmark::RegisterBenchmark("PlainSum", BM_PlainSum)->Unit(ms);
  for (int64_t n : kSizes) sum->Arg(n);
  benchmark::RegisterBenchmark("SparseSgd", BM_SparseSgd)->Apply(sizes_densities)->Unit(ms);
  auto* tsgd = benchmark::RegisterBenchmark("TorchSgd", BM_TorchSgd)->Unit(ms);
  for (int64_t n : kSizes) tsgd->Arg(n);
  benchmark::RegisterBenchmark("Merge", BM_Merge)->Args({2, 10})->Args({4, 10})->Args({8, 10})->Args({4, 100})->Unit(ms);
  benchmark::RegisterBenchmark("QualitySynthetic", BM_QualitySynthetic)->Args({10000000, 1000})->Iterations(1);
  if (have_real) {
    benchmark::RegisterBenchmark("RealBlock", BM_RealBlock)->Apply(densities)->Unit(ms);
    benchmark::RegisterBenchmark("RealTorchTopk", BM_RealTorchTopk)->Apply(densities)->Unit(ms);
    benchmark::RegisterBenchmark("RealSampledTopk", BM_RealSampledTopk)->Apply(densities)->Unit(ms);
    benchmark::RegisterBenchmark("QualityReal", BM_QualityReal)->Apply(densities)->Iterations(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string grads_path;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--grads=", 8) == 0) {
      grads_path = argv[i] + 8;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  torch::set_num_threads(1);
  if (!grads_path.empty()) {
    auto grads = frugal::bench::ReadGradFile(grads_path);
    if (!grads.ok()) {
      std::cerr << "frugal_kernels_bench: " << grads.status().ToString() << "\n";
      return 1;
    }
    RealGrads() = std::move(grads).value();
    std::cerr << "real gradients: " << RealGrads().size() << " tensors from " << grads_path << ", flattened step "
              << RealFlat().size() << " elements\n";
  } else {
    std::cerr << "no --grads given: synthetic gradients only\n";
  }
  benchmark::AddCustomContext("simd", frugal::compress::SimdLevelName(frugal::compress::DetectSimdLevel()));
  benchmark::AddCustomContext("torch_threads", std::to_string(torch::get_num_threads()));
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  RegisterAll(!RealGrads().empty());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
