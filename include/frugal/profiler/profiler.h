// The planner's profiler: times the operators of a simulated workload on the
// local LibTorch device, and measures this machine's peaks, so `frugal plan`
// can predict from measurements instead of datasheets (vTrain's approach).
// The only part of the planner that uses LibTorch; the simulator reads its
// output through sim::ProfileDatabase and a hardware TOML.
//
// Thread safety: functions without shared state (LibTorch's own thread pool
// is process-wide; call from one thread).
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::profiler {

struct ProfileOptions {
  std::string device = "cpu";  // LibTorch device string
  int warmup = 2;              // untimed runs per operator
  int repeats = 5;             // timed runs; the median is kept
  bool fp16 = false;           // time GEMMs in fp16 (GPU devices only; CPU stays fp32)
  // Each timed sample runs the operator k times between two device syncs and
  // keeps the time divided by k, with k (at most 4096) chosen so that a sample
  // lasts at least this long: a sync costs tens of microseconds on a GPU, as
  // much as a small kernel. 0: one run per sample.
  double min_sample_s = 1e-3;
};

struct OpTiming {
  std::string key;  // sim::OperatorKey
  double forward_s = 0;
  double backward_s = 0;
  int forward_runs = 1;   // runs per timed sample (k above)
  int backward_runs = 1;
};

// Times every operator: GEMMs (and convolutions, as the implicit GEMM the
// simulator costs them as) with torch::matmul forward and the two matmuls of
// backward; memory-bound operators as an element-wise kernel moving the
// operator's bytes. Tensor-parallel all-reduces are communication and are
// skipped (the network model times them).
Result<std::vector<OpTiming>> ProfileOperators(const std::vector<sim::Operator>& ops, const ProfileOptions& options);

// Writes timings as the CSV sim::ProfileDatabase reads.
std::string ProfileCsv(const std::vector<OpTiming>& timings, const std::string& comment);

struct MachineMeasurement {
  double matmul_tflops = 0;        // best large fp32 (or fp16) GEMM rate
  double memory_bandwidth_gbs = 0; // large copy, bytes read + written per second
  double sparsify_gbs = 0;         // block sparsifier at 1%, dense bytes scanned per second
  double sparse_optimizer_gbs = 0; // sparse SGD-momentum, selected-value bytes per second
  // The exchange's combine (Note [Combine cost and shared hosts] in
  // src/sim/frugal_pipeline.cc): decode 4 workers' block chunks at 1% (int4),
  // merge them and encode the merged update; the planner's bytes (3 chunks
  // in, the merged update out) per second.
  double combine_gbs = 0;
};

Result<MachineMeasurement> MeasureMachine(const ProfileOptions& options);

// `base` with its device peaks and host rates replaced by the measurement
// ("this machine").
sim::HardwareSpec ApplyMeasurement(sim::HardwareSpec base, const MachineMeasurement& m, const std::string& name);

}  // namespace frugal::profiler
