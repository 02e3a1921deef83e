// PredictFrugalMemory: what one Frugal worker holds on its device and host.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/simulator.h"

namespace frugal::sim {

namespace {

constexpr double kGiB = 1073741824.0;

// Activations of one batch, from the simulator's layer plan at data
// parallelism only (no recomputation; the plan's element size, bf16 by
// default, as the language-model recipe's autocast); -1 where the plan cannot
// be built for the model.
double ActivationBytes(const FrugalJob& job, const HardwareSpec& hw) {
  ParallelStrategy s;
  s.micro_batch = job.batch_per_worker;
  s.global_batch = job.batch_per_worker;
  s.recompute = Recompute::kNone;
  Simulator sim(hw);
  Result<MemoryEstimate> m = sim.EstimateMemory(job.model, s);
  if (!m.ok()) return -1;
  return m->activation_bytes;
}

}  // namespace

// Note [Frugal memory]
// Frugal trains fp32 parameters. A worker's device holds the model's
// parameters and gradients (4 bytes each per parameter), one batch's
// activations and the framework's reserve; in the local modes also the
// inner optimizer's state, since the inner steps run on the device. The
// host holds the engine's buffers, as engine::HostMemory reports them
// (Note [Host memory] in the engine's local_sync.cc), per parameter:
//   step mode   masters 4, gradient slots 4 (staleness + 2), residuals 4,
//               the optimizer's state (the sparse optimizer is the host's);
//   local modes anchor 4, master 4, the open round's base and
//               pseudo-gradient 8 / fragments, residuals 4 (plus a 1/N
//               shard's on one cluster, where the exchange is sharded, or a
//               second 4 on a cluster's leader, Note [Leader residual]),
//               the outer momentum 4;
//   site        adds the cluster average's sum 4 and its sent and received
//               messages at the site value width.
// On a CPU "device" the device is the host: its inner steps take host
// gradients (4) and the optimizer's state, and the model's own bytes count
// against the host's memory. Transient buffers (a round's messages, a
// checkpoint's bytes) are not modelled; the measured peaks in the results
// page show what they add.
Result<FrugalMemory> PredictFrugalMemory(const FrugalJob& job, const HardwareSpec& hw) {
  if (job.batch_per_worker < 1) return Status::InvalidArgument("batch per worker must be >= 1");
  if (job.clusters.empty()) return Status::InvalidArgument("no clusters");
  if (!(job.optimizer_state_bytes >= 0) || job.optimizer_state_bytes > 64) {
    return Status::InvalidArgument("optimizer state bytes per parameter must be in [0, 64]");
  }
  int workers = 0;
  for (const ClusterSpec& c : job.clusters) workers += c.workers;
  if (workers < 1) return Status::InvalidArgument("no workers");
  const double p = job.model.ParameterCount();
  const bool local = job.local_steps > 0;
  const bool cpu = hw.is_cpu || job.shared_cpu;

  FrugalMemory m;
  const double activations = ActivationBytes(job, hw);
  m.activations_modelled = activations >= 0;
  m.device = {{"parameters", 4 * p},
              {"gradients", 4 * p},
              {"optimizer", local && !cpu ? job.optimizer_state_bytes * p : 0.0},
              {"activations", std::max(0.0, activations)},
              {"reserved", hw.efficiency.reserved_memory_gb * kGiB}};
  if (local) {
    const int fragments = std::max(1, job.local_fragments);
    double residuals = 4 * p;
    if (job.clusters.size() == 1) {
      if (workers > 1) residuals += 4 * p / workers;  // the owned shard's
    } else {
      residuals += 4 * p;  // a cluster leader's
    }
    m.host = {{"anchor", 4 * p},
              {"master", 4 * p},
              {"base", 4 * p / fragments},
              {"sending", 4 * p / fragments},
              {"gradients", cpu ? 4 * p : 0.0},
              {"inner_optimizer", cpu ? job.optimizer_state_bytes * p : 0.0},
              {"outer_optimizer", job.outer_momentum ? 4 * p : 0.0},
              {"residuals", residuals}};
    if (job.site_replicas) m.host.push_back({"cluster_average", (4 + 2 * job.site_bytes_per_value) * p});
  } else {
    m.host = {{"masters", 4 * p},
              {"gradient_slots", 4 * p * (job.staleness + 2)},
              {"residuals", 4 * p},
              {"optimizer", job.optimizer_state_bytes * p}};
  }
  for (const auto& [name, bytes] : m.device) m.device_bytes += bytes;
  for (const auto& [name, bytes] : m.host) m.host_bytes += bytes;
  m.device_capacity_bytes = hw.device.memory_gb * kGiB;
  const int per_host = std::max(1, job.workers_per_host);
  m.host_node_bytes = per_host * (m.host_bytes + (cpu ? m.device_bytes : 0.0));
  m.host_capacity_bytes = hw.host.memory_gb * kGiB;
  return m;
}

}  // namespace frugal::sim
