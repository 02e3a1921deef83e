#include "frugal/sim/frugal_pipeline.h"

#include <algorithm>
#include <cmath>

#include "frugal/sim/cost_model.h"
#include "frugal/sim/event_engine.h"

namespace frugal::sim {
namespace {

double ComputeSeconds(const Workload& w, const OperatorCostModel& cost) {
  double s = 0;
  auto add = [&](const Block& blk) {
    for (const Operator& op : blk.ops) s += cost.Seconds(op, Pass::kForward) + cost.Seconds(op, Pass::kBackward);
  };
  add(w.pre);
  for (const Block& blk : w.blocks) add(blk);
  add(w.post);
  return s;
}

// Union density of n independent selections at density d each.
double UnionDensity(double d, int n) { return 1.0 - std::pow(1.0 - d, n); }

}  // namespace

// Note [Sparse exchange cost]
// Topology-aware exchange as in Frugal's engine: workers of a cluster gather
// their sparse chunks (ring all-gather on the intra-cluster network), one
// leader per cluster exchanges the cluster's merged chunk with the other
// clusters over its uplink (each uplink carries C-1 chunks each way), then
// the global merged update is broadcast inside the cluster. Merged densities
// assume independent selections (an upper bound on the volume: real top-k
// selections overlap). The slowest cluster sets the pace.
Result<FrugalPrediction> PredictFrugalIteration(const FrugalJob& job, const HardwareSpec& hw) {
  if (job.clusters.empty()) return Status::InvalidArgument("the topology needs at least one cluster");
  if (job.density <= 0 || job.density > 1) return Status::InvalidArgument("density must be in (0, 1]");
  if (job.batch_per_worker <= 0) return Status::InvalidArgument("batch per worker must be positive");
  if (job.staleness < 0) return Status::InvalidArgument("staleness must not be negative");
  int total_workers = 0;
  for (const ClusterSpec& c : job.clusters) {
    if (c.workers <= 0 || c.intra_gbps <= 0) {
      return Status::InvalidArgument("every cluster needs a positive worker count and bandwidth");
    }
    total_workers += c.workers;
  }
  if (job.clusters.size() > 1 && job.inter_cluster_gbps <= 0) {
    return Status::InvalidArgument("inter-cluster bandwidth must be positive");
  }
  WorkloadOptions wopt;
  wopt.micro_batch = job.batch_per_worker;
  FRUGAL_ASSIGN_OR_RETURN(Workload w, BuildWorkload(job.model, wopt));
  const auto cost = CreateRooflineCostModel(hw, job.model.bytes_per_value <= 2);
  const double params = w.total_params;
  const double grad_bytes = params * 4.0;  // Gradients are handled in fp32 on the host.

  FrugalPrediction out;
  out.gpu_s = job.compute_s_per_sample > 0
                  ? job.compute_fixed_s + job.compute_s_per_sample * static_cast<double>(job.batch_per_worker)
                  : ComputeSeconds(w, *cost);
  const double pcie = hw.host.pcie_gbs * 1e9;
  const double merged = UnionDensity(job.density, total_workers);
  out.merged_density = merged;
  const double d2h = grad_bytes / pcie;
  const double h2d = merged * params * job.bytes_per_selected / pcie;
  out.copy_s = d2h + h2d;
  out.sparsify_s = grad_bytes / (hw.host.cpu_sparsify_gbs * 1e9);
  out.optimizer_s = merged * params * 4.0 / (hw.host.cpu_optimizer_gbs * 1e9);

  const double chunk = job.density * params * job.bytes_per_selected;
  const int num_clusters = static_cast<int>(job.clusters.size());
  double exchange = 0;
  for (const ClusterSpec& c : job.clusters) {
    const double intra = c.intra_gbps * 1e9 / 8.0 * hw.efficiency.inter_link;
    double t = (c.workers - 1) * chunk / intra;
    if (num_clusters > 1) {
      const double cluster_chunk = UnionDensity(job.density, c.workers) * params * job.bytes_per_selected;
      const double inter = job.inter_cluster_gbps * 1e9 / 8.0 * hw.efficiency.inter_link;
      t += (num_clusters - 1) * cluster_chunk / inter + job.inter_cluster_latency_ms * 1e-3;
      if (c.workers > 1) t += merged * params * job.bytes_per_selected / intra;
    }
    exchange = std::max(exchange, t);
  }
  out.exchange_s = exchange;

  // Play the pipeline for a number of iterations; measure the second half.
  constexpr int kIterations = 24;
  TaskGraph g;
  const bool shared = job.shared_cpu || hw.is_cpu;
  const ResourceId gpu = g.AddResource(shared ? "cpu" : "gpu");
  const ResourceId to_host = g.AddResource("pcie_d2h");
  const ResourceId sparsify = shared ? gpu : g.AddResource("cpu_sparsify");
  const ResourceId net = g.AddResource("network");
  const ResourceId optimizer = shared ? gpu : g.AddResource("cpu_optimizer");
  const ResourceId to_device = g.AddResource("pcie_h2d");
  std::vector<TaskId> exchange_task(kIterations), update(kIterations);
  // Optimizer and update copy of iteration i; on a shared CPU they are added
  // to the stream `staleness` iterations late, after that iteration's sparsify.
  auto add_update = [&](int i) {
    const TaskId o = g.AddTask(optimizer, out.optimizer_s, 4);
    g.AddDependency(exchange_task[i], o);
    update[i] = g.AddTask(to_device, h2d, 5);
    g.AddDependency(o, update[i]);
  };
  for (int i = 0; i < kIterations; ++i) {
    const TaskId c = g.AddTask(gpu, out.gpu_s, 0);
    if (i - 1 - job.staleness >= 0) g.AddDependency(update[i - 1 - job.staleness], c);
    const TaskId d = g.AddTask(to_host, d2h, 1);
    g.AddDependency(c, d);
    const TaskId s = g.AddTask(sparsify, out.sparsify_s, 2);
    g.AddDependency(d, s);
    exchange_task[i] = g.AddTask(net, out.exchange_s, 3);
    g.AddDependency(s, exchange_task[i]);
    if (!shared) {
      add_update(i);
    } else if (i - job.staleness >= 0) {
      add_update(i - job.staleness);
    }
  }
  if (shared) {
    for (int i = std::max(0, kIterations - job.staleness); i < kIterations; ++i) add_update(i);
  }
  FRUGAL_ASSIGN_OR_RETURN(EngineResult run, RunTaskGraph(g));
  const int half = kIterations / 2;
  out.iteration_s = (run.tasks[update[kIterations - 1]].end - run.tasks[update[half - 1]].end) / (kIterations - half);
  out.samples_per_s = out.iteration_s > 0 ? job.batch_per_worker * total_workers / out.iteration_s : 0.0;
  const std::pair<const char*, double> stages[] = {{"gpu", out.gpu_s},
                                                   {"copy", std::max(d2h, h2d)},
                                                   {"sparsify", out.sparsify_s},
                                                   {"exchange", out.exchange_s},
                                                   {"optimizer", out.optimizer_s}};
  double worst = -1;
  for (const auto& [name, secs] : stages) {
    if (secs > worst) {
      worst = secs;
      out.bottleneck = name;
    }
  }
  return out;
}

}  // namespace frugal::sim
