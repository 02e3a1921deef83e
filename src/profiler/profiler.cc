#include "frugal/profiler/profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include <torch/torch.h>

#include "frugal/compress/codec.h"
#include "frugal/compress/merge.h"
#include "frugal/compress/sparse_vector.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/optim/sparse_optimizer.h"
#include "frugal/sim/cost_model.h"

namespace frugal::profiler {

namespace {

using Clock = std::chrono::steady_clock;

void Sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

struct Sampled {
  double seconds = 0;  // median per run
  int runs = 1;        // runs per timed sample
};

// Bound on the runs in one sample: an operator of a few microseconds reaches
// 1 ms well before it.
constexpr int kMaxRunsPerSample = 4096;

// Seconds of `runs` back-to-back runs of fn, synced once at the end.
template <typename Fn>
double TimeRuns(const torch::Device& device, int runs, Fn& fn) {
  auto t0 = Clock::now();
  for (int i = 0; i < runs; ++i) fn();
  Sync(device);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Note [Runs per sample]: the wall clock around one run and a device sync
// counts the sync (tens of microseconds on CUDA) and the launch latency into
// every sample, as much as a small kernel itself. So each sample runs fn k
// times between two syncs, the kernels queue back to back, and the sample's
// time divided by k is the per-run time. k doubles from 1 until a batch
// lasts min_sample_s (that also warms up), then is set from the rate seen.
// Kernels shorter than their launch still measure the launch rate, as they
// do in a real step. Plain syncs keep this device-generic (CPU, CUDA) and free
// of CUDA headers, which a CPU-only LibTorch lacks.
template <typename Fn>
Sampled MedianSeconds(const torch::Device& device, int warmup, int repeats, double min_sample_s, Fn fn) {
  for (int i = 0; i < warmup; ++i) fn();
  Sync(device);
  Sampled out;
  if (min_sample_s > 0) {
    if (warmup == 0) TimeRuns(device, 1, fn);  // a first call's set-up would pass for a slow run
    int k = 1;
    double t = TimeRuns(device, k, fn);
    while (t < min_sample_s && k < kMaxRunsPerSample) {
      k = std::min(2 * k, kMaxRunsPerSample);
      t = TimeRuns(device, k, fn);
    }
    const double per_run = std::max(t / k, 1e-9);
    out.runs = static_cast<int>(std::clamp(std::ceil(min_sample_s / per_run), 1.0, double{kMaxRunsPerSample}));
  }
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) times.push_back(TimeRuns(device, out.runs, fn) / out.runs);
  std::sort(times.begin(), times.end());
  out.seconds = times[times.size() / 2];
  return out;
}

// The device string as LibTorch reads it; a typo or a missing GPU is the
// user's mistake (InvalidArgument), not a LibTorch fault.
Status CheckDevice(const std::string& name) {
  try {
    const torch::Device device(name);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      return Status::InvalidArgument("--device " + name + ": CUDA is not available on this machine");
    }
  } catch (const c10::Error&) {
    return Status::InvalidArgument("--device: '" + name + "' is not a device (try cpu or cuda:0)");
  }
  return Status::Ok();
}

// Bound on timed and untimed runs: each one runs every operator once.
constexpr int kMaxRuns = 10000;

Status CheckOptions(const ProfileOptions& o) {
  if (o.repeats < 1 || o.warmup < 0 || o.repeats > kMaxRuns || o.warmup > kMaxRuns) {
    return Status::InvalidArgument("--repeats must be in [1, 10000] and --warmup in [0, 10000]");
  }
  // Up to 10 s per sample: more is a unit mistake (seconds, not milliseconds).
  if (!(o.min_sample_s >= 0 && o.min_sample_s <= 10)) {
    return Status::InvalidArgument("minimum sample time must be in [0, 10] seconds");
  }
  return CheckDevice(o.device);
}

}  // namespace

Result<std::vector<OpTiming>> ProfileOperators(const std::vector<sim::Operator>& ops, const ProfileOptions& o) {
  FRUGAL_RETURN_IF_ERROR(CheckOptions(o));
  std::vector<OpTiming> out;
  try {
    torch::Device device(o.device);
    torch::NoGradGuard no_grad;
    const auto dtype = (o.fp16 && device.is_cuda()) ? torch::kFloat16 : torch::kFloat32;
    auto opts = torch::TensorOptions().device(device).dtype(dtype);
    for (const sim::Operator& op : ops) {
      OpTiming t;
      t.key = sim::OperatorKey(op);
      if (op.kind == sim::OpKind::kTensorParallelAllReduce) continue;
      if (op.kind == sim::OpKind::kMatmul || op.kind == sim::OpKind::kConv) {
        // [batch, m, k] x [batch, k, n]; backward: dA = dC W^T, dW = A^T dC.
        torch::Tensor a = torch::randn({op.batch, op.m, op.k}, opts);
        torch::Tensor w = torch::randn({op.batch, op.k, op.n}, opts);
        torch::Tensor dc = torch::randn({op.batch, op.m, op.n}, opts);
        const Sampled fwd =
            MedianSeconds(device, o.warmup, o.repeats, o.min_sample_s, [&] { (void)torch::matmul(a, w); });
        const Sampled bwd = MedianSeconds(device, o.warmup, o.repeats, o.min_sample_s, [&] {
          (void)torch::matmul(dc, w.transpose(1, 2));
          (void)torch::matmul(a.transpose(1, 2), dc);
        });
        t.forward_s = fwd.seconds;
        t.forward_runs = fwd.runs;
        t.backward_s = bwd.seconds;
        t.backward_runs = bwd.runs;
      } else {
        // An element-wise kernel that reads and writes as many bytes as the
        // operator moves: out = relu(in) reads n and writes n elements.
        const int64_t elem = dtype == torch::kFloat16 ? 2 : 4;
        auto time_bytes = [&](double bytes) {
          int64_t n = std::max<int64_t>(1, static_cast<int64_t>(bytes / (2.0 * static_cast<double>(elem))));
          torch::Tensor in = torch::randn({n}, opts);
          torch::Tensor res = torch::empty({n}, opts);
          return MedianSeconds(device, o.warmup, o.repeats, o.min_sample_s, [&] { torch::relu_out(res, in); });
        };
        const Sampled fwd = time_bytes(op.fwd_bytes);
        const Sampled bwd = time_bytes(op.bwd_bytes > 0 ? op.bwd_bytes : op.fwd_bytes);
        t.forward_s = fwd.seconds;
        t.forward_runs = fwd.runs;
        t.backward_s = bwd.seconds;
        t.backward_runs = bwd.runs;
      }
      out.push_back(t);
    }
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  return out;
}

std::string ProfileCsv(const std::vector<OpTiming>& timings, const std::string& comment) {
  std::string out = "# " + comment + "\nkey,forward_us,backward_us\n";
  char line[512];
  for (const auto& t : timings) {
    std::snprintf(line, sizeof(line), "%s,%.3f,%.3f\n", t.key.c_str(), t.forward_s * 1e6, t.backward_s * 1e6);
    out += line;
  }
  return out;
}

namespace {

// MachineMeasurement::combine_gbs: the engine's combine (decode, merge,
// encode the merged update) over 4 chunks of `grad` sparsified at 1%, each
// from the gradient rotated by a different offset so their blocks differ.
Result<double> MeasureCombine(const ProfileOptions& o, const std::vector<float>& grad) {
  constexpr int kWorkers = 4;
  const compress::WireFormat wire{compress::ValueEncoding::kInt4, compress::IndexEncoding::kBlockVarint};
  const size_t n = grad.size();
  std::vector<std::vector<uint8_t>> chunks(kWorkers);
  std::vector<float> rotated(n);
  for (int w = 0; w < kWorkers; ++w) {
    FRUGAL_ASSIGN_OR_RETURN(auto sparsifier, compress::CreateSparsifier("block"));
    const size_t shift = static_cast<size_t>(w) * (n / kWorkers) + 16 * static_cast<size_t>(w);
    for (size_t i = 0; i < n; ++i) rotated[i] = grad[(i + shift) % n];
    compress::SparseVector sv;
    FRUGAL_RETURN_IF_ERROR(sparsifier->Sparsify(Span<const float>(rotated.data(), n), 0.01, &sv));
    compress::RoundToWire(wire.values, Span<float>(sv.values.data(), sv.values.size()));
    FRUGAL_RETURN_IF_ERROR(compress::Encode(sv, wire, &chunks[w]));
  }
  size_t out_bytes = 0;
  Status failed;
  const double s = MedianSeconds(torch::Device(torch::kCPU), o.warmup, o.repeats, o.min_sample_s, [&] {
                     auto out = compress::CombineEncoded(chunks, wire);
                     if (out.ok()) {
                       out_bytes = out->size();
                     } else {
                       failed = out.status();
                     }
                   }).seconds;
  FRUGAL_RETURN_IF_ERROR(failed.WithContext("measuring the combine"));
  double bytes = static_cast<double>(out_bytes);
  for (int w = 1; w < kWorkers; ++w) bytes += static_cast<double>(chunks[w].size());
  return bytes / s / 1e9;
}

}  // namespace

Result<MachineMeasurement> MeasureMachine(const ProfileOptions& o) {
  FRUGAL_RETURN_IF_ERROR(CheckOptions(o));
  MachineMeasurement m;
  try {
    torch::Device device(o.device);
    torch::NoGradGuard no_grad;
    const auto dtype = (o.fp16 && device.is_cuda()) ? torch::kFloat16 : torch::kFloat32;
    auto opts = torch::TensorOptions().device(device).dtype(dtype);
    for (int64_t n : {512, 1024, 2048}) {
      torch::Tensor a = torch::randn({n, n}, opts);
      torch::Tensor b = torch::randn({n, n}, opts);
      double s = MedianSeconds(device, o.warmup, o.repeats, o.min_sample_s, [&] { (void)torch::matmul(a, b); }).seconds;
      m.matmul_tflops = std::max(m.matmul_tflops, 2.0 * n * n * n / s / 1e12);
    }
    const int64_t elems = 64 << 20;  // 256 MB of fp32
    torch::Tensor src = torch::randn({elems}, torch::TensorOptions().device(device));
    torch::Tensor dst = torch::empty_like(src);
    double s = MedianSeconds(device, o.warmup, o.repeats, o.min_sample_s, [&] { dst.copy_(src); }).seconds;
    m.memory_bandwidth_gbs = 2.0 * static_cast<double>(elems) * 4 / s / 1e9;
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  // Frugal's CPU stages on this host: the block sparsifier and sparse SGD.
  const size_t n = size_t{10} << 20;
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  FRUGAL_ASSIGN_OR_RETURN(auto sparsifier, compress::CreateSparsifier("block"));
  compress::SparseVector sv;
  torch::Device cpu(torch::kCPU);
  double ss = MedianSeconds(cpu, o.warmup, o.repeats, o.min_sample_s, [&] {
                (void)sparsifier->Sparsify(Span<const float>(grad.data(), n), 0.01, &sv);
              }).seconds;
  m.sparsify_gbs = static_cast<double>(n) * 4 / ss / 1e9;
  optim::OptimizerOptions oo;
  oo.momentum = 0.9;
  FRUGAL_ASSIGN_OR_RETURN(auto opt, optim::CreateSparseOptimizer(oo, n, "probe"));
  std::vector<float> params(n, 0.0f);
  double os = MedianSeconds(cpu, o.warmup, o.repeats, o.min_sample_s, [&] {
                (void)opt->Step(Span<float>(params.data(), n), Span<const uint32_t>(sv.indices.data(), sv.indices.size()),
                                Span<const float>(sv.values.data(), sv.values.size()));
              }).seconds;
  m.sparse_optimizer_gbs = static_cast<double>(sv.nnz()) * 4 / os / 1e9;
  FRUGAL_ASSIGN_OR_RETURN(m.combine_gbs, MeasureCombine(o, grad));
  return m;
}

sim::HardwareSpec ApplyMeasurement(sim::HardwareSpec hw, const MachineMeasurement& m, const std::string& name) {
  hw.name = name;
  hw.device.name = name;
  hw.device.peak_tflops_fp32 = m.matmul_tflops;
  hw.device.peak_tflops_fp16 = std::max(hw.device.peak_tflops_fp16, m.matmul_tflops);
  hw.device.memory_bandwidth_gbs = m.memory_bandwidth_gbs;
  // The measured rates are achieved rates: the roofline should not discount
  // them again for large kernels.
  hw.efficiency.matmul_max = 1.0;
  hw.efficiency.memory = 1.0;
  hw.host.cpu_sparsify_gbs = m.sparsify_gbs;
  hw.host.cpu_optimizer_gbs = m.sparse_optimizer_gbs;
  hw.host.cpu_combine_gbs = m.combine_gbs;
  return hw;
}

}  // namespace frugal::profiler
