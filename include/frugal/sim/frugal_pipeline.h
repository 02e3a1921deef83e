// Prediction of Frugal's own data-parallel pipeline (StellaTrain-style): GPU
// forward/backward, gradient copy to the host, CPU sparsification at density
// d, sparse exchange over a topology of clusters, CPU sparse optimizer, copy
// of the update back, with staleness s (default 1: iteration t+1 computes
// while iteration t's update is still in flight).
//
// This is the small API the trainer's bandwidth controller and the cluster
// scheduler call to ask "how fast would this job run on that?". It is costed
// with the same operator cost model as the Megatron simulator and played
// through the same event engine (several iterations, steady state measured).
//
// Thread safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::sim {

// Workers (one GPU each) that share a fast local network.
struct ClusterSpec {
  int workers = 1;
  double intra_gbps = 10;  // Per worker, Gbit/s; default 10.
};

// Bound on FrugalJob::local_steps (and its fragments), shared by the plan
// commands and the measurement CSV.
constexpr int kMaxLocalSteps = 1000000;

struct FrugalJob {
  ModelSpec model;
  int64_t batch_per_worker = 32;
  std::vector<ClusterSpec> clusters = {ClusterSpec{}};
  double inter_cluster_gbps = 1;           // Per cluster uplink, Gbit/s; default 1.
  double inter_cluster_latency_ms = 1;     // Default 1 ms.
  double density = 0.01;                   // Fraction of gradient values exchanged; default 1%.
  // Wire bytes per selected value: 16-value blocks of fp32 plus a 4-byte
  // block index = 4.25; default 4.25 (block sparsification). Frugal's own
  // default wire (int4 codes, varint block ids) is about 0.57, and the CLI's
  // plan commands default to it (FrugalWireBytes in src/cli).
  double bytes_per_selected = 4.25;
  // The same for a merged update (a cluster's union sent to the other
  // clusters, the global result broadcast inside a cluster, the update copied
  // to the device): Frugal sends these as int8 where its chunks are int4
  // (compress::MergedWireFormat), about 1.07. 0 (default): bytes_per_selected.
  double merged_bytes_per_selected = 0;
  int staleness = 1;                       // Default 1; 0 = fully synchronous.
  // Telemetry from a running job (the controller's case): when > 0, the
  // forward + backward time is compute_fixed_s + batch x compute_s_per_sample
  // instead of the cost model's estimate. Default 0.
  double compute_s_per_sample = 0;
  double compute_fixed_s = 0;
  // True when the "device" compute, the sparsifier and the optimizer share
  // the same CPU cores (CPU-only workers, e.g. on hardware "cpu-local", where
  // it is implied). They then run one after another on one stream: compute
  // of iteration t, sparsify t, optimizer t-staleness. Default false.
  bool shared_cpu = false;
  // Workers running on one host and sharing its hw.host.cores cores (the
  // testbed runs every worker on one machine). Beyond one worker per core,
  // every CPU stage of a worker (sparsify, combine, optimizer, and compute
  // on a CPU device) runs workers_per_host / cores times slower. Telemetry
  // (compute_s_per_sample) already contains the slowdown and is not scaled.
  // Default 1.
  int workers_per_host = 1;
  // CPU pipeline threads per worker (frugal's --cpu-threads). With 1 a
  // bucket's sparsify, exchange, combine and optimizer run one after another
  // on one thread, which waits during the exchange
  // (Note [One pipeline thread] in frugal_pipeline.cc); with more, the stages
  // are pipelined. Default 1, as in frugal.
  int pipeline_threads = 1;
  // How much the workers' selections coincide, in [0, 1]
  // (Note [Selections overlap] in frugal_pipeline.cc): the merged update of n
  // workers at density d has density 1 - (1 - d)^(1 + (n - 1)(1 - overlap)). 0, the
  // default, is independent selections (an upper bound on the volume); 1 is
  // every worker choosing the same coordinates.
  double selection_overlap = 0;
  // Telemetry: the measured density of the whole job's merged update (frugal
  // worker's metrics "merged_density"). When > 0 it sets selection_overlap
  // (as compute_s_per_sample sets the compute). Default 0.
  double measured_merged_density = 0;
  // Frugal's local-update mode (frugal train's default with two or more
  // workers, --sync local) when local_steps > 0: each worker takes
  // local_steps inner optimizer steps, then exchanges its parameter change
  // (a round, at `density` and bytes_per_selected per value; Frugal's whole
  // int4 rounds: 0.504 before deflate) in local_fragments fragments; with
  // local_overlap a fragment's exchange runs while the next
  // local_steps / local_fragments steps compute (Note [Local rounds] in
  // frugal_pipeline.cc). Staleness, pipeline threads and the merged wire do
  // not apply. With telemetry, compute_s_per_sample is the worker's whole
  // step (forward, backward and the inner step, as frugal train reports
  // "compute"). 0 (default): the step mode above, an exchange every step.
  int local_steps = 0;        // At most kMaxLocalSteps.
  int local_fragments = 4;   // Default 4, as frugal train for local_steps 16.
  bool local_overlap = true;  // Default true, as frugal train.
  // --sync site (with local_steps > 0): one replica per cluster, whose
  // members average their fp32 gradients every step before the inner step
  // (Note [Site replicas] in the engine's sync_strategy.cc). Default false.
  bool site_replicas = false;
  double site_bytes_per_value = 2;  // what a member sends per gradient value: 2 (bf16, the default) or 4 (fp32)
  // For the memory check (PredictFrugalMemory): the optimizer's state per
  // parameter (8: Adam/AdamW, the default; 4: SGD with momentum; 0: plain
  // SGD), and whether the local modes' outer step keeps a momentum buffer
  // (DiLoCo's Nesterov step; frugal train's for runs of more than a few rounds).
  double optimizer_state_bytes = 8;
  bool outer_momentum = true;
};

struct FrugalPrediction {
  double iteration_s = 0;     // Steady-state time between iterations.
  double gpu_s = 0;           // Forward + backward per iteration.
  double copy_s = 0;          // Device->host gradient + host->device update.
  double sparsify_s = 0;
  double exchange_s = 0;      // Intra-cluster gather + inter-cluster exchange + broadcast.
  double optimizer_s = 0;
  double combine_s = 0;       // Decode, merge, encode of the received chunks (host CPU).
  double cpu_share = 1;       // Slowdown of CPU stages from workers sharing a host's cores.
  double samples_per_s = 0;   // Over all workers.
  double merged_density = 0;  // Density of the globally merged update.
  std::string bottleneck;     // "gpu", "copy", "sparsify", "exchange", "combine" or "optimizer".
  // Local mode only (FrugalJob::local_steps > 0), per round: the exchange
  // of its fragments on the link (exchange_s), their encode and decode on
  // the exchange threads (sparsify_s, combine_s), and per iteration the
  // main thread's share of the sync points (outer steps, parameter copies).
  // gpu_s, copy_s and optimizer_s are per iteration, as in the step mode.
  double sync_s = 0;
  // --sync site only: per iteration, the cluster's gradient average (the
  // members' messages on the cluster's links, packing and summing on the
  // host), which blocks the step.
  double cluster_average_s = 0;
};

Result<FrugalPrediction> PredictFrugalIteration(const FrugalJob& job, const HardwareSpec& hw);

// The memory of one worker (Note [Frugal memory] in frugal_memory.cc): on
// its device, and on its host by the engine's buffers, named as
// engine::HostMemory names them; bytes.
struct FrugalMemory {
  std::vector<std::pair<std::string, double>> device;  // parameters, gradients, optimizer, activations, reserved
  std::vector<std::pair<std::string, double>> host;    // per worker
  double device_bytes = 0;            // sum of `device`
  double device_capacity_bytes = 0;   // hw.device.memory_gb
  double host_bytes = 0;              // sum of `host`: one worker
  double host_node_bytes = 0;         // the workers of one host (workers_per_host of them, and the device's
                                      // bytes too where the device is the host's CPU)
  double host_capacity_bytes = 0;     // hw.host.memory_gb; 0: unknown
  bool activations_modelled = true;   // false: the cost model has no activation size for this model
  bool device_oom() const { return device_bytes > device_capacity_bytes; }
  bool host_oom() const { return host_capacity_bytes > 0 && host_node_bytes > host_capacity_bytes; }
};

Result<FrugalMemory> PredictFrugalMemory(const FrugalJob& job, const HardwareSpec& hw);

// The mode's part of a job as frugal train runs it (the plan commands'
// --sync flags and frugal.plan): sync "local", "site" or "step";
// local_steps per round (local modes); local_fragments 0 for
// DefaultLocalFragments; density 0 for the mode's default (1 in the local
// modes, 0.01 in the step mode); site_values "bf16" or "fp32".
// InvalidArgument for another mode or value, or fragments above the steps.
Status SetFrugalMode(FrugalJob* job, const std::string& sync, int local_steps, int local_fragments, double density,
                     const std::string& site_values = "bf16");

// The local modes: the fewest inner steps per round, a power of two up to
// max_steps, at which a round's exchange and its encode and decode are
// hidden behind the steps (the prediction's bottleneck is the compute);
// 0 when none up to max_steps is. The job's fragments follow each count
// (DefaultLocalFragments). InvalidArgument for a job in the step mode.
Result<int> HiddenLocalSteps(FrugalJob job, const HardwareSpec& hw, int max_steps = 1024);

// frugal train's fragments for --local-steps h when --local-fragments is not
// given: the largest divisor of h up to 4 (engine::LocalFragmentsOf, which
// the engine's tests pin; sim does not depend on the engine).
int DefaultLocalFragments(int local_steps);

}  // namespace frugal::sim
