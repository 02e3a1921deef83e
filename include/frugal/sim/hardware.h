// Hardware and network description for the simulator: a device type, how
// devices are packaged into nodes, how nodes are connected, the host CPU that
// runs Frugal's sparsify/optimizer stages, a price, and the global efficiency
// parameters that turn datasheet peaks into achievable rates.
//
// Descriptions are TOML files (format in docs/design/planner.md); a few are built in.
// Efficiency parameters are global to a description (never per model or per
// configuration); `frugal plan calibrate` fits them to measured times.
//
// Thread safety: value types.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::sim {

struct DeviceSpec {
  std::string name;
  double peak_tflops_fp16 = 0;  // Dense tensor-core fp16/bf16.
  double peak_tflops_fp32 = 0;
  double memory_gb = 0;
  double memory_bandwidth_gbs = 0;
};

// Achievable fraction of the datasheet peaks. A GEMM of dims m, n, k runs at
// peak * matmul_max * m/(m+c) * n/(n+c) * k/(k+c) with c = matmul_half_dim:
// small matrices run far below peak.
struct EfficiencyParams {
  double matmul_max = 0.8;        // Default 0.8.
  double matmul_half_dim = 64;    // Default 64 elements.
  double memory = 0.7;            // Of memory bandwidth for bandwidth-bound kernels.
  double intra_link = 0.75;       // Of intra-node link bandwidth for collectives.
  double inter_link = 0.8;        // Of inter-node bandwidth.
  double kernel_overhead_us = 4;  // Launch/synchronisation cost per kernel.
  double reserved_memory_gb = 2;  // CUDA context, workspace, fragmentation.

  // Overheads that do not scale with FLOPs or bytes (TOML table [overheads];
  // Note [Overheads and latency] in src/sim/simulator.cc). Each
  // defaults to 0 here, i.e. the pure roofline/bandwidth model; the
  // data-centre built-ins carry values fitted on single-node A100
  // measurements (docs/design/planner.md, "Calibration").
  //
  // Host (framework) time to issue one operator of the workload: a forward
  // operator costs one dispatch, a backward one two (data and weight
  // gradient). A layer's kernels and its CPU dispatch overlap (launches are
  // asynchronous), so a layer takes max(GPU time, dispatch time): this floor
  // binds for small micro-batches and wide tensor parallelism and vanishes
  // for large GEMMs.
  double dispatch_us = 0;
  // Fixed cost of one collective (NCCL launch and synchronisation), added
  // once per all-reduce / all-gather on top of the per-hop link latency.
  double collective_latency_us = 0;
  // Fixed cost of one pipeline send/recv pair, on top of the link latency.
  double p2p_latency_us = 0;
  // Per micro-batch and stage: schedule bookkeeping, data loading, loss.
  double microbatch_overhead_us = 0;
  // Per iteration and stage: gradient clipping, loss-scale check, optimizer
  // launch, logging.
  double iteration_overhead_us = 0;
};

struct HostSpec {
  double cpu_sparsify_gbs = 2.0;   // Dense fp32 gradient bytes scanned per second.
  double cpu_optimizer_gbs = 1.0;  // Sparse optimizer: selected-value bytes per second.
  double pcie_gbs = 12.0;          // Device <-> host copy rate, each way.
  // Decode, merge and re-encode of received sparse chunks: bytes of chunks
  // in plus merged bytes out per second, on one core. Default 1.0. TOML key
  // optional.
  double cpu_combine_gbs = 1.0;
  // Cores of one host. The CPU rates above are what one worker gets with a
  // core to itself; workers sharing a host beyond one per core slow down in
  // proportion (PredictFrugalIteration). Default 8. TOML key optional.
  double cores = 8;
  // Memory of one host, shared by the workers on it (a node's GPUs' workers);
  // 0: unknown, so plan frugal checks no host memory. TOML key optional.
  double memory_gb = 0;
};

struct HardwareSpec {
  std::string name;
  DeviceSpec device;
  EfficiencyParams efficiency;
  int gpus_per_node = 8;
  double intra_link_gbs = 300;       // Per GPU, each direction (NVLink / PCIe).
  double intra_latency_us = 5;
  double inter_node_gbps = 1600;     // Per node, all NICs together (Gbit/s).
  double inter_latency_us = 5;
  HostSpec host;
  double price_per_gpu_hour = 0;     // US dollars.
  bool is_cpu = false;               // Device is the host CPU (no GPU).

  // Per-GPU share of the node's inter-node bandwidth, bytes/s.
  double InterNodeBytesPerGpu() const { return inter_node_gbps * 1e9 / 8.0 / gpus_per_node; }
};

// Built-ins: a100-40g, a100-80g, h100, v100, rtx3090, rtx4090, cpu-local.
Result<HardwareSpec> BuiltinHardware(const std::string& name);
std::vector<std::string> BuiltinHardwareNames();

// `name_or_path`: a built-in name, or a path to a TOML file (contains '/' or
// ends in .toml). A file with `base = "<builtin>"` keeps that built-in's value
// for every key it omits; a file without `base` must give every key (a file
// cut short is an error, never silently defaulted). Every number must be
// finite and within its key's range (rates and sizes positive, efficiency
// fractions in (0, 1], gpus_per_node in [1, 1024]). Errors are
// InvalidArgument "file:line: ..." naming the key (NotFound for a missing file).
Result<HardwareSpec> LoadHardware(const std::string& name_or_path);
Result<HardwareSpec> ParseHardwareToml(const std::string& text, const std::string& source_name);
std::string HardwareToToml(const HardwareSpec& hw);

}  // namespace frugal::sim
