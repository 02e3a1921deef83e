#include "frugal/sim/frugal_pipeline.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

// Note [Selections overlap]
// The merged update of n workers is the union of their selections. For
// independent selections at density d its density is 1 - (1 - d)^n, an
// upper bound. Workers training the same model choose partly the same
// coordinates. The model counts 1 + (n - 1)(1 - overlap) independent
// selections: overlap 0 is that bound, 1 means identical selections. On mlp
// at 10.4% density (frugal worker's merged_density, docs/design/planner.md)
// the overlap is about 0.1-0.2, so the bound is close there. A job's own telemetry (measured_merged_density)
// fixes the overlap, inverted from the formula.
double UnionDensity(double d, int n, double overlap) {
  const double effective = 1.0 + (n - 1) * (1.0 - overlap);
  return 1.0 - std::pow(1.0 - d, effective);
}

double MergedBytes(const FrugalJob& job) {
  return job.merged_bytes_per_selected > 0 ? job.merged_bytes_per_selected : job.bytes_per_selected;
}

// The overlap at which n selections at density d merge to density `merged`;
// clamped to [0, 1] (a measured union can fall outside the model's range).
double OverlapFromMerged(double d, int n, double merged) {
  if (n <= 1 || d >= 1 || merged <= 0 || merged >= 1) return 0;
  const double effective = std::log(1.0 - merged) / std::log(1.0 - d);
  return std::clamp(1.0 - (effective - 1.0) / (n - 1), 0.0, 1.0);
}

Status CheckJob(const FrugalJob& job) {
  if (job.clusters.empty()) return Status::InvalidArgument("the topology needs at least one cluster");
  if (job.density <= 0 || job.density > 1) return Status::InvalidArgument("density must be in (0, 1]");
  if (job.batch_per_worker <= 0) return Status::InvalidArgument("batch per worker must be positive");
  if (job.staleness < 0) return Status::InvalidArgument("staleness must not be negative");
  if (job.workers_per_host < 1) return Status::InvalidArgument("workers per host must be at least 1");
  if (job.pipeline_threads < 1) return Status::InvalidArgument("pipeline threads must be at least 1");
  if (!(job.bytes_per_selected > 0 && job.bytes_per_selected < 1e3) ||
      !(job.merged_bytes_per_selected >= 0 && job.merged_bytes_per_selected < 1e3)) {
    return Status::InvalidArgument("bytes per selected value must be positive and finite");
  }
  if (!(job.selection_overlap >= 0 && job.selection_overlap <= 1)) {
    return Status::InvalidArgument("selection overlap must be in [0, 1]");
  }
  if (!(job.measured_merged_density >= 0 && job.measured_merged_density <= 1)) {
    return Status::InvalidArgument("measured merged density must be in [0, 1]");
  }
  if (job.local_steps < 0 || job.local_steps > kMaxLocalSteps) {
    return Status::InvalidArgument("local steps must be from 0 (the step mode) to " + std::to_string(kMaxLocalSteps));
  }
  if (job.local_steps > 0 && (job.local_fragments < 1 || job.local_fragments > job.local_steps)) {
    return Status::InvalidArgument("local fragments must be from 1 to the local steps");
  }
  for (const ClusterSpec& c : job.clusters) {
    if (c.workers <= 0 || c.intra_gbps <= 0) {
      return Status::InvalidArgument("every cluster needs a positive worker count and bandwidth");
    }
  }
  if (job.clusters.size() > 1 && job.inter_cluster_gbps <= 0) {
    return Status::InvalidArgument("inter-cluster bandwidth must be positive");
  }
  return Status::Ok();
}

// Note [Sparse exchange cost]
// Topology-aware exchange as in Frugal's engine (comm::SparseExchange,
// kHierarchical): workers of a cluster gather their sparse chunks at the
// leader (intra-cluster network); each leader sends one message to every
// other cluster over its uplink and receives one from each (full duplex: the
// uplink takes the larger of the two directions); then the global merged
// update is broadcast inside the cluster. A cluster's message is the merged
// union of its workers' chunks (Note [Selections overlap]), in the merged
// wire format; a one-worker cluster forwards its own chunk unchanged. The
// slowest cluster sets the pace.
double ClusterMessageBytes(const FrugalJob& job, const ClusterSpec& c, double params, double overlap) {
  if (c.workers == 1) return job.density * params * job.bytes_per_selected;
  return UnionDensity(job.density, c.workers, overlap) * params * MergedBytes(job);
}

// Bytes cluster `self` receives from all the other clusters.
double FromOtherClusters(const FrugalJob& job, size_t self, double params, double overlap) {
  double in = 0;
  for (size_t o = 0; o < job.clusters.size(); ++o) {
    if (o != self) in += ClusterMessageBytes(job, job.clusters[o], params, overlap);
  }
  return in;
}

double ExchangeSeconds(const FrugalJob& job, const HardwareSpec& hw, double params, double merged, double overlap) {
  const double chunk = job.density * params * job.bytes_per_selected;
  const size_t num_clusters = job.clusters.size();
  double exchange = 0;
  for (size_t i = 0; i < num_clusters; ++i) {
    const ClusterSpec& c = job.clusters[i];
    const double intra = c.intra_gbps * 1e9 / 8.0 * hw.efficiency.inter_link;
    double t = (c.workers - 1) * chunk / intra;
    if (num_clusters > 1) {
      const double out = static_cast<double>(num_clusters - 1) * ClusterMessageBytes(job, c, params, overlap);
      const double in = FromOtherClusters(job, i, params, overlap);
      const double inter = job.inter_cluster_gbps * 1e9 / 8.0 * hw.efficiency.inter_link;
      t += std::max(out, in) / inter + job.inter_cluster_latency_ms * 1e-3;
      if (c.workers > 1) t += merged * params * MergedBytes(job) / intra;
    }
    exchange = std::max(exchange, t);
  }
  return exchange;
}

// Note [Combine cost and shared hosts]
// Every worker decodes the sparse chunks it receives, merges them with its
// own, and encodes the merged update (Frugal's engine does this on the host
// CPU): bytes in (the other workers' chunks of its cluster, and the other
// clusters' messages) plus merged bytes out, at host.cpu_combine_gbs.
// Workers sharing one host's cores (the testbed: every worker on one 2-core
// machine) divide them: beyond one worker per core each CPU stage runs
// workers_per_host / cores times slower.
double CombineBytes(const FrugalJob& job, double params, double merged, double overlap) {
  double worst = 0;
  for (size_t i = 0; i < job.clusters.size(); ++i) {
    double in = (job.clusters[i].workers - 1) * job.density * params * job.bytes_per_selected;
    if (job.clusters.size() > 1) in += FromOtherClusters(job, i, params, overlap);
    worst = std::max(worst, in + merged * params * MergedBytes(job));
  }
  return worst;
}

// Plays the worker pipeline (compute, copy to host, sparsify, exchange,
// optimizer, copy back) for a number of iterations with the stage times of
// `stages` and the copies' `d2h` and `h2d` seconds; returns the steady-state
// time between iterations, measured over the second half.
Result<double> SteadyStateIterationSeconds(const FrugalJob& job, bool shared, const FrugalPrediction& stages,
                                           double d2h, double h2d) {
  constexpr int kIterations = 24;
  TaskGraph g;
  const ResourceId gpu = g.AddResource(shared ? "cpu" : "gpu");
  const ResourceId to_host = g.AddResource("pcie_d2h");
  const ResourceId sparsify = shared ? gpu : g.AddResource("cpu_sparsify");
  const ResourceId net = g.AddResource("network");
  const ResourceId optimizer = shared ? gpu : g.AddResource("cpu_optimizer");
  // The engine's communication thread decodes and merges what arrives.
  const ResourceId combine = shared ? gpu : g.AddResource("cpu_combine");
  const ResourceId to_device = g.AddResource("pcie_h2d");
  std::vector<TaskId> exchange_task(kIterations), update(kIterations);
  // Optimizer and update copy of iteration i; on a shared CPU they are added
  // to the stream `staleness` iterations late, after that iteration's sparsify.
  auto add_update = [&](int i) {
    const TaskId k = g.AddTask(combine, stages.combine_s, 6);
    g.AddDependency(exchange_task[i], k);
    const TaskId o = g.AddTask(optimizer, stages.optimizer_s, 4);
    g.AddDependency(k, o);
    update[i] = g.AddTask(to_device, h2d, 5);
    g.AddDependency(o, update[i]);
  };
  for (int i = 0; i < kIterations; ++i) {
    const TaskId c = g.AddTask(gpu, stages.gpu_s, 0);
    if (i - 1 - job.staleness >= 0) g.AddDependency(update[i - 1 - job.staleness], c);
    const TaskId d = g.AddTask(to_host, d2h, 1);
    g.AddDependency(c, d);
    const TaskId s = g.AddTask(sparsify, stages.sparsify_s, 2);
    g.AddDependency(d, s);
    exchange_task[i] = g.AddTask(net, stages.exchange_s, 3);
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
  return (run.tasks[update[kIterations - 1]].end - run.tasks[update[half - 1]].end) / (kIterations - half);
}

// Note [One pipeline thread]
// Frugal's engine runs each bucket's chain (sparsify and encode, the exchange
// including the peers' combine, decode, optimizer step) on its CPU pipeline
// threads, one after another, and a thread waits while its exchange is on the
// network (GradientPipeline, --cpu-threads, default 1). With one thread the
// chain of iteration t cannot overlap that of t+1: only the forward/backward
// (the main thread) overlaps it, by the staleness. The resource graph above
// (one stream per stage, or one CPU stream with --shared-cpu) misses this
// and predicted network-bound runs too fast; the period is the larger of the
// two graphs'.
Result<double> ChainIterationSeconds(const FrugalJob& job, const FrugalPrediction& stages, double d2h, double h2d) {
  constexpr int kIterations = 24;
  TaskGraph g;
  const ResourceId main_thread = g.AddResource("compute");
  const ResourceId to_host = g.AddResource("pcie_d2h");
  const ResourceId chain = g.AddResource("pipeline_thread");
  const ResourceId to_device = g.AddResource("pcie_h2d");
  std::vector<TaskId> update(kIterations);
  for (int i = 0; i < kIterations; ++i) {
    const TaskId c = g.AddTask(main_thread, stages.gpu_s, 0);
    if (i - 1 - job.staleness >= 0) g.AddDependency(update[i - 1 - job.staleness], c);
    const TaskId d = g.AddTask(to_host, d2h, 1);
    g.AddDependency(c, d);
    TaskId prev = d;
    for (double secs : {stages.sparsify_s, stages.exchange_s, stages.combine_s, stages.optimizer_s}) {
      const TaskId k = g.AddTask(chain, secs, 2);
      g.AddDependency(prev, k);
      prev = k;
    }
    update[i] = g.AddTask(to_device, h2d, 5);
    g.AddDependency(prev, update[i]);
  }
  FRUGAL_ASSIGN_OR_RETURN(EngineResult run, RunTaskGraph(g));
  const int half = kIterations / 2;
  return (run.tasks[update[kIterations - 1]].end - run.tasks[update[half - 1]].end) / (kIterations - half);
}

// The slowest stage's name.
std::string Bottleneck(const FrugalPrediction& p, double d2h, double h2d) {
  const std::pair<const char*, double> stages[] = {{"gpu", p.gpu_s},
                                                   {"copy", std::max(d2h, h2d)},
                                                   {"sparsify", p.sparsify_s},
                                                   {"exchange", p.exchange_s},
                                                   {"combine", p.combine_s},
                                                   {"optimizer", p.optimizer_s}};
  std::string bottleneck;
  double worst = -1;
  for (const auto& [name, secs] : stages) {
    if (secs > worst) {
      worst = secs;
      bottleneck = name;
    }
  }
  return bottleneck;
}

// Note [Local rounds]
// The local-update mode (engine::LocalSync) exchanges a round every
// local_steps (H) iterations in P = local_fragments fragments of 1/P of the
// model, one fragment every H/P steps. With overlap a fragment's exchange
// runs on a thread and its outer step lands H/P steps later, when the next
// fragment syncs, so at most one fragment is in flight. Per fragment:
//  - the link (LocalFragmentSeconds): with one cluster, the sharded exchange
//    (a reduce-scatter, then an all-gather, of compressed shards), in which
//    each worker sends and receives 2 (N-1)/N of a fragment's message on
//    its own full-duplex link; with clusters, the hierarchical exchange:
//    members send their message to the leader, the leaders exchange one
//    message per cluster (re-compressed to the same size), and each leader
//    sends its members the clusters' messages;
//  - the exchange thread's CPU: encoding the fragment's fp32 values
//    (cpu_sparsify_gbs), and decoding what arrives plus an owner's or a
//    leader's re-encode (cpu_combine_gbs);
//  - the main thread at each sync point: the fragment's outer step, and the
//    parameters put back into the model (on a CPU device a host copy of the
//    model; on a GPU, whose inner steps run there, the model down and up
//    over PCIe).
// With site replicas (--sync site) a step also waits for its cluster's
// gradient average: every member sends its gradients (site_bytes_per_value
// each) to each of the n - 1 others on the cluster's link, and the host
// packs, sums n copies and unpacks: n + 2 streaming passes over the fp32
// gradients, at the sparsifier's rate (a pass over every value); the worst
// cluster sets it.
// A step costs its compute: with telemetry as measured; else forward and
// backward plus the inner step (on the host for a CPU device, on the GPU
// otherwise), plus on shared cores the exchange threads' CPU spread over the
// round. A fragment's chain (its CPU, then the link) must fit its window of
// H/P steps, or the next sync point waits for it:
//   iteration = max(step, chain / (H/P)) + sync / (H/P);
// without overlap the chain adds in full: step + (chain + sync) / (H/P).
double LocalFragmentSeconds(const FrugalJob& job, const HardwareSpec& hw, double message, double* received) {
  const double k = static_cast<double>(job.clusters.size());
  if (job.clusters.size() == 1) {
    const ClusterSpec& c = job.clusters[0];
    const double n = c.workers;
    *received = 2.0 * (n - 1.0) / n * message;
    return *received / (c.intra_gbps * 1e9 / 8.0 * hw.efficiency.inter_link);
  }
  const double inter = job.inter_cluster_gbps * 1e9 / 8.0 * hw.efficiency.inter_link;
  double worst = 0;
  *received = 0;
  for (const ClusterSpec& c : job.clusters) {
    const double intra = c.intra_gbps * 1e9 / 8.0 * hw.efficiency.inter_link;
    const double members = c.workers - 1.0;
    double t = members * message / intra;                              // the members to their leader
    t += (k - 1.0) * message / inter + job.inter_cluster_latency_ms * 1e-3;  // between the leaders
    t += members * k * message / intra;                                // the clusters' messages to the members
    worst = std::max(worst, t);
    *received = std::max(*received, (members + k - 1.0) * message);   // a leader's
  }
  return worst;
}

FrugalPrediction PredictLocalIteration(const FrugalJob& job, const HardwareSpec& hw, double params,
                                       FrugalPrediction out) {
  const bool shared = job.shared_cpu || hw.is_cpu;
  const bool telemetry = job.compute_s_per_sample > 0;
  const double steps = job.local_steps, fragments = job.local_fragments;
  const double per_sync = steps / fragments;  // steps between sync points
  const double model_bytes = params * 4.0;
  const double fragment_bytes = model_bytes / fragments;
  const double message = job.density * params / fragments * job.bytes_per_selected;
  const double pcie = hw.host.pcie_gbs * 1e9;
  const double host_pass = out.cpu_share / (hw.host.cpu_optimizer_gbs * 1e9);  // seconds per byte
  if (!telemetry) {  // SGD with momentum reads the gradient and momentum, writes both and the parameters
    out.optimizer_s = hw.is_cpu ? model_bytes * host_pass
                                : 5.0 * model_bytes / (hw.device.memory_bandwidth_gbs * 1e9 * hw.efficiency.memory);
  }
  if (job.site_replicas) {
    for (const ClusterSpec& c : job.clusters) {
      const double n = c.workers;
      const double sent = params * job.site_bytes_per_value;
      const double link = (n - 1.0) * sent / (c.intra_gbps * 1e9 / 8.0 * hw.efficiency.inter_link);
      const double cpu = n > 1 ? out.cpu_share * (n + 2.0) * model_bytes / (hw.host.cpu_sparsify_gbs * 1e9) : 0.0;
      out.cluster_average_s = std::max(out.cluster_average_s, link + cpu);
    }
  }
  double received = 0;
  out.exchange_s = fragments * LocalFragmentSeconds(job, hw, message, &received);
  out.sparsify_s = fragments * out.cpu_share * fragment_bytes / (hw.host.cpu_sparsify_gbs * 1e9);
  out.combine_s = fragments * out.cpu_share * (received + message) / (hw.host.cpu_combine_gbs * 1e9);
  out.copy_s = hw.is_cpu ? 0.0 : 2.0 * model_bytes / pcie / per_sync;
  const double outer = 4.0 * fragment_bytes * host_pass;  // anchor, momentum, the merged step, master
  out.sync_s = (outer + (hw.is_cpu ? model_bytes * host_pass : 0.0)) / per_sync + out.copy_s;
  const double threads_cpu = out.sparsify_s + out.combine_s;
  const double step = out.cluster_average_s +
      (telemetry ? out.gpu_s : out.gpu_s + out.optimizer_s + (shared ? threads_cpu / steps : 0.0));
  const double chain = (threads_cpu + out.exchange_s) / fragments;
  out.iteration_s = job.local_overlap ? std::max(step, chain / per_sync) + out.sync_s
                                      : step + chain / per_sync + out.sync_s;
  out.merged_density = job.density;
  out.bottleneck = chain / per_sync <= step ? "gpu" : out.exchange_s >= threads_cpu ? "exchange" : "combine";
  return out;
}

}  // namespace

Result<FrugalPrediction> PredictFrugalIteration(const FrugalJob& job, const HardwareSpec& hw) {
  FRUGAL_RETURN_IF_ERROR(CheckJob(job));
  int total_workers = 0;
  for (const ClusterSpec& c : job.clusters) total_workers += c.workers;
  WorkloadOptions wopt;
  wopt.micro_batch = job.batch_per_worker;
  FRUGAL_ASSIGN_OR_RETURN(Workload w, BuildWorkload(job.model, wopt));
  const auto cost = CreateRooflineCostModel(hw, job.model.bytes_per_value <= 2);
  const double params = w.total_params;
  const double grad_bytes = params * 4.0;  // Gradients are handled in fp32 on the host.

  FrugalPrediction out;
  const bool shared = job.shared_cpu || hw.is_cpu;
  out.cpu_share = std::max(1.0, job.workers_per_host / std::max(1.0, hw.host.cores));
  const bool telemetry = job.compute_s_per_sample > 0;
  out.gpu_s = telemetry ? job.compute_fixed_s + job.compute_s_per_sample * static_cast<double>(job.batch_per_worker)
                        : ComputeSeconds(w, *cost) * (hw.is_cpu ? out.cpu_share : 1.0);
  if (job.local_steps > 0) {
    out = PredictLocalIteration(job, hw, params, out);
    out.samples_per_s = out.iteration_s > 0 ? job.batch_per_worker * total_workers / out.iteration_s : 0.0;
    return out;
  }
  const double pcie = hw.host.pcie_gbs * 1e9;
  const double overlap = job.measured_merged_density > 0
                             ? OverlapFromMerged(job.density, total_workers, job.measured_merged_density)
                             : job.selection_overlap;
  const double merged = UnionDensity(job.density, total_workers, overlap);
  out.merged_density = merged;
  const double d2h = grad_bytes / pcie;
  const double h2d = merged * params * MergedBytes(job) / pcie;
  out.copy_s = d2h + h2d;
  out.sparsify_s = out.cpu_share * grad_bytes / (hw.host.cpu_sparsify_gbs * 1e9);
  out.optimizer_s = out.cpu_share * merged * params * 4.0 / (hw.host.cpu_optimizer_gbs * 1e9);
  out.combine_s = out.cpu_share * CombineBytes(job, params, merged, overlap) / (hw.host.cpu_combine_gbs * 1e9);
  out.exchange_s = ExchangeSeconds(job, hw, params, merged, overlap);
  FRUGAL_ASSIGN_OR_RETURN(out.iteration_s, SteadyStateIterationSeconds(job, shared, out, d2h, h2d));
  if (job.pipeline_threads == 1) {
    FRUGAL_ASSIGN_OR_RETURN(const double chain, ChainIterationSeconds(job, out, d2h, h2d));
    out.iteration_s = std::max(out.iteration_s, chain);
  }
  out.samples_per_s = out.iteration_s > 0 ? job.batch_per_worker * total_workers / out.iteration_s : 0.0;
  out.bottleneck = Bottleneck(out, d2h, h2d);
  return out;
}

Status SetFrugalMode(FrugalJob* job, const std::string& sync, int local_steps, int local_fragments, double density,
                     const std::string& site_values) {
  if (sync != "local" && sync != "site" && sync != "step") {
    return Status::InvalidArgument("sync must be local, site or step, got '" + sync + "'");
  }
  if (site_values != "bf16" && site_values != "fp32") {
    return Status::InvalidArgument("site values must be bf16 or fp32, got '" + site_values + "'");
  }
  const bool local = sync != "step";
  if (local && (local_steps < 1 || local_steps > kMaxLocalSteps)) {
    return Status::InvalidArgument("local steps must be in [1, " + std::to_string(kMaxLocalSteps) + "], got " +
                                   std::to_string(local_steps));
  }
  if (local && (local_fragments < 0 || local_fragments > local_steps)) {
    return Status::InvalidArgument("--local-fragments exceeds --local-steps");
  }
  if (!(density >= 0 && density <= 1)) return Status::InvalidArgument("density must be in [0, 1]");
  job->local_steps = local ? local_steps : 0;
  job->site_replicas = sync == "site";
  job->site_bytes_per_value = site_values == "fp32" ? 4.0 : 2.0;
  job->local_fragments = local_fragments > 0 ? local_fragments : DefaultLocalFragments(job->local_steps);
  job->density = density > 0 ? density : (local ? 1.0 : 0.01);
  return Status::Ok();
}

Result<int> HiddenLocalSteps(FrugalJob job, const HardwareSpec& hw, int max_steps) {
  if (job.local_steps < 1) return Status::InvalidArgument("the step mode has no rounds to hide");
  for (int h = 1; h <= std::min(max_steps, kMaxLocalSteps); h *= 2) {
    job.local_steps = h;
    job.local_fragments = DefaultLocalFragments(h);
    FRUGAL_ASSIGN_OR_RETURN(FrugalPrediction p, PredictFrugalIteration(job, hw));
    if (p.bottleneck == "gpu") return h;
  }
  return 0;
}

int DefaultLocalFragments(int local_steps) {
  for (int p = 4; p > 1; --p) {
    if (local_steps % p == 0) return p;
  }
  return 1;
}

}  // namespace frugal::sim
