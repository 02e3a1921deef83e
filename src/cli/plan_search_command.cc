// `frugal plan search`, `plan frugal` and `plan frugal-validate`: strategy
// search and Frugal's own pipeline. A thin layer over frugal::sim; see
// docs/design/planner.md.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "frugal/common/env.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/frugal_validation.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/planner.h"
#include "input_checks.h"
#include "plan_common.h"

namespace frugal::cli {
namespace {

void PrintCandidates(const char* title, const std::vector<sim::Candidate>& list) {
  std::printf("%s\n", title);
  std::printf("%3s %-10s %5s %-44s %10s %8s %8s %9s %11s %13s\n", "#", "hardware", "GPUs", "strategy", "iter_s",
              "TFLOP/s", "mem_GiB", "bubble%", "run_days", "run_dollars");
  int i = 0;
  for (const sim::Candidate& c : list) {
    std::printf("%3d %-10s %5d %-44s %10.3f %8.1f %8.1f %9.1f %11.2f %13.0f\n", ++i, c.hardware.c_str(),
                c.strategy.gpus(), c.strategy.ToString().c_str(), c.prediction.iteration_s,
                c.prediction.achieved_tflops_per_gpu, c.prediction.memory.total_bytes / 1073741824.0,
                c.prediction.bubble_fraction * 100, c.run_hours / 24, c.run_dollars);
  }
}

nlohmann::json CandidatesJson(const std::vector<sim::Candidate>& cands) {
  nlohmann::json out = nlohmann::json::array();
  for (const sim::Candidate& c : cands) {
    nlohmann::json j = ToJson(c.strategy, c.prediction);
    j["hardware"] = c.hardware;
    j["gpus"] = c.strategy.gpus();
    j["run_hours"] = c.run_hours;
    j["run_dollars"] = c.run_dollars;
    out.push_back(j);
  }
  return out;
}

struct SearchOpts {
  ModelFlags model;
  std::string hardware = "a100-80g";
  sim::SearchOptions search;
  std::string recomputes = "none,selective,full", schedules = "gpipe,1f1b,interleaved";
  bool json = false;
};

// The planner enumerates every divisor split of the GPUs; 65536 GPUs is far
// beyond any published training run and keeps a search within seconds.
constexpr double kMaxSearchGpus = 65536;

void AddSearchFlags(CLI::App* cmd, SearchOpts* o) {
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Comma-separated built-in names or TOML files")->capture_default_str();
  cmd->add_option("--gpus", o->search.gpus, "Number of GPUs")->required()->check(Bounded(1, kMaxSearchGpus));
  cmd->add_option("--min-gpus", o->search.min_gpus, "Also try every power of two from this up to --gpus")
      ->capture_default_str()
      ->check(Bounded(0, kMaxSearchGpus));
  cmd->add_option("--global-batch", o->search.global_batch, "Global batch (samples)")
      ->capture_default_str()
      ->check(Bounded(1, 1e9));
  cmd->add_option("--tokens", o->search.training_tokens, "Training tokens for the cost estimate")
      ->capture_default_str()
      ->check(Bounded(1, 1e16));
  cmd->add_option("--top", o->search.top, "Candidates shown per ranking")->capture_default_str()->check(Bounded(1, 10000));
  cmd->add_option("--micro-batches", o->search.micro_batches, "Micro-batch sizes to try")
      ->capture_default_str()
      ->check(Bounded(1, 1e6));
  cmd->add_option("--recompute", o->recomputes, "Recomputation modes to try")->capture_default_str();
  cmd->add_option("--schedules", o->schedules, "Pipeline schedules to try")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the rankings as one JSON object");
  AddConfigOption(cmd);
}

void RunSearch(SearchOpts* o) {
  const sim::ModelSpec model = o->model.Resolve();
  std::vector<sim::HardwareSpec> hardware;
  for (const std::string& name : SplitList(o->hardware, "--hardware")) {
    hardware.push_back(OrThrow(sim::LoadHardware(name)));
  }
  o->search.recomputes.clear();
  for (const std::string& r : SplitList(o->recomputes, "--recompute")) {
    o->search.recomputes.push_back(OrThrow(sim::ParseRecompute(r)));
  }
  o->search.schedules.clear();
  for (const std::string& r : SplitList(o->schedules, "--schedules")) {
    o->search.schedules.push_back(OrThrow(sim::ParseSchedule(r)));
  }
  const Clock::time_point start = Env::Default().Now();
  const sim::SearchResult r = OrThrow(sim::SearchStrategies(model, hardware, o->search));
  const double secs = Seconds(Env::Default().Now() - start);
  if (o->json) {
    nlohmann::json j = {{"model", model.name},          {"enumerated", r.enumerated},
                        {"out_of_memory", r.out_of_memory}, {"simulated", r.simulated},
                        {"search_s", secs},              {"by_time", CandidatesJson(r.by_time)},
                        {"by_cost", CandidatesJson(r.by_cost)}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("model %s (%.1fB parameters), up to %d GPUs, global batch %lld, %.3g tokens\n", model.name.c_str(),
              model.ParameterCount() / 1e9, o->search.gpus, static_cast<long long>(o->search.global_batch),
              o->search.training_tokens);
  std::printf("enumerated %d strategies: %d out of memory, %d simulated in %.2f s\n", r.enumerated, r.out_of_memory,
              r.simulated, secs);
  if (r.enumerated == 0) {
    throw UsageError("no strategy divides the model and batch: check --gpus and --global-batch");
  }
  if (r.by_time.empty()) throw RunError("no strategy fits in memory; try more GPUs or a smaller model");
  PrintCandidates("fastest:", r.by_time);
  PrintCandidates("cheapest:", r.by_cost);
}

struct FrugalOpts {
  ModelFlags model;
  std::string hardware = "rtx3090";
  sim::FrugalJob job;
  std::vector<int> clusters = {4};
  double intra_gbps = 10;
  double inter_mbps = 100;
  WireBytesFlags wire;
  SyncFlags sync;
};

void AddFrugalFlags(CLI::App* cmd, FrugalOpts* o) {
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Built-in hardware or TOML file")->capture_default_str();
  cmd->add_option("--clusters", o->clusters, "Workers per cluster, e.g. --clusters 4 4")
      ->capture_default_str()
      ->check(Bounded(1, 4096, "workers in one cluster"));
  cmd->add_option("--intra-gbps", o->intra_gbps, "Bandwidth inside a cluster (Gbit/s)")
      ->capture_default_str()
      ->check(Bounded(1e-6, 1e5));
  cmd->add_option("--inter-mbps", o->inter_mbps, "Bandwidth between clusters (Mbit/s)")
      ->capture_default_str()
      ->check(Bounded(1e-3, 1e8));
  o->sync.Add(cmd);
  cmd->add_option("--batch", o->job.batch_per_worker, "Batch per worker")->capture_default_str()->check(Bounded(1, 1e6));
  cmd->add_option("--staleness", o->job.staleness, "Iterations of staleness")
      ->capture_default_str()
      ->check(Bounded(0, 16, "the pipeline is played for 24 iterations"));
  cmd->add_option("--compute-s-per-sample", o->job.compute_s_per_sample,
                  "Measured forward+backward seconds per sample (0: cost model)")
      ->capture_default_str()
      ->check(Bounded(0, 1e4));
  cmd->add_flag("--shared-cpu", o->job.shared_cpu, "Compute, sparsifier and optimizer share the CPU cores");
  AddSelectionOverlapOption(cmd, &o->job.selection_overlap);
  o->wire.Add(cmd);
  cmd->add_option("--workers-per-host", o->job.workers_per_host, "Workers sharing one host's CPU cores")
      ->capture_default_str()
      ->check(Bounded(1, 1 << 20));
  cmd->add_option("--optimizer-state-bytes", o->job.optimizer_state_bytes,
                  "Memory check: optimizer state per parameter (8: Adam/AdamW, 4: SGD with momentum, 0: SGD)")
      ->capture_default_str()
      ->check(Bounded(0, 64));
  AddConfigOption(cmd);
}

std::string GiB(double bytes) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.2f", bytes / 1073741824.0);
  return s;
}

std::string Parts(const std::vector<std::pair<std::string, double>>& parts) {
  std::string out;
  for (const auto& [name, bytes] : parts) {
    if (bytes <= 0) continue;
    out += (out.empty() ? "" : ", ") + name + " " + GiB(bytes);
  }
  return out;
}

// Note [Frugal memory] in src/sim/frugal_memory.cc.
void PrintMemory(const sim::FrugalJob& job, const sim::HardwareSpec& hw) {
  const sim::FrugalMemory m = OrThrow(sim::PredictFrugalMemory(job, hw));
  std::printf("device memory  %s GiB of %s GiB per worker (%s)%s%s\n", GiB(m.device_bytes).c_str(),
              GiB(m.device_capacity_bytes).c_str(), Parts(m.device).c_str(),
              m.activations_modelled ? "" : "; activations not modelled for this model",
              m.device_oom() ? "  OUT OF MEMORY" : "");
  std::printf("host memory    %s GiB per worker (%s); %d per host: %s GiB of %s%s\n", GiB(m.host_bytes).c_str(),
              Parts(m.host).c_str(), job.workers_per_host, GiB(m.host_node_bytes).c_str(),
              m.host_capacity_bytes > 0 ? (GiB(m.host_capacity_bytes) + " GiB").c_str() : "an unknown size",
              m.host_oom() ? "  OUT OF MEMORY" : "");
}

void RunFrugal(FrugalOpts* o) {
  o->job.model = o->model.Resolve();
  o->job.clusters.clear();
  for (int w : o->clusters) o->job.clusters.push_back(sim::ClusterSpec{w, o->intra_gbps});
  o->job.inter_cluster_gbps = o->inter_mbps / 1000.0;
  o->sync.Apply(&o->job);
  const bool local = o->sync.local();
  o->wire.Apply(&o->job);
  const sim::HardwareSpec hw = OrThrow(sim::LoadHardware(o->hardware));
  const sim::FrugalPrediction p = OrThrow(sim::PredictFrugalIteration(o->job, hw));
  std::printf("iteration      %.4f s (%.1f samples/s), bottleneck: %s\n", p.iteration_s, p.samples_per_s,
              p.bottleneck.c_str());
  if (local) {
    std::printf("mode           local updates: a round every %d steps in %d fragments, %.3g bytes per value\n"
                "compute        %.4f s per step (inner step %.4f s)\nsync points    %.4f s per step\n"
                "per round      exchange %.4f s, encode %.4f s, decode %.4f s\n",
                o->job.local_steps, o->job.local_fragments, o->job.bytes_per_selected, p.gpu_s, p.optimizer_s,
                p.sync_s, p.exchange_s, p.sparsify_s, p.combine_s);
    if (o->job.site_replicas) {
      std::printf("site replicas  each cluster one replica: its gradient average %.4f s per step\n",
                  p.cluster_average_s);
    }
    const int hidden = OrThrow(sim::HiddenLocalSteps(o->job, hw));
    if (hidden > 0) {
      std::printf("link hidden    from --local-steps %d\n", hidden);
    } else {
      std::printf("link hidden    at no --local-steps up to 1024: the link is the bottleneck\n");
    }
    PrintMemory(o->job, hw);
    return;
  }
  std::printf("gpu            %.4f s\ncopy           %.4f s\nsparsify       %.4f s\nexchange       %.4f s\n"
              "combine        %.4f s\noptimizer      %.4f s\nmerged density %.4f\ncpu share      %.2fx\n",
              p.gpu_s, p.copy_s, p.sparsify_s, p.exchange_s, p.combine_s, p.optimizer_s, p.merged_density,
              p.cpu_share);
  PrintMemory(o->job, hw);
}

}  // namespace

void AddSearch(CLI::App* plan) {
  auto o = std::make_shared<SearchOpts>();
  auto* cmd = plan->add_subcommand("search", "Enumerate and rank parallel strategies by time and dollar cost");
  AddSearchFlags(cmd, o.get());
  cmd->callback([o, cmd] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    RunSearch(o.get());
  });
}

void AddFrugal(CLI::App* plan) {
  auto o = std::make_shared<FrugalOpts>();
  o->model.name = "resnet18";
  auto* cmd = plan->add_subcommand("frugal", "Predict Frugal's sparse, pipelined data-parallel iteration");
  AddFrugalFlags(cmd, o.get());
  cmd->callback([o, cmd] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    RunFrugal(o.get());
  });
}

void AddFrugalValidate(CLI::App* plan) {
  struct Opts {
    std::string file;
    std::string hardware = "cpu-local";
    bool shared_cpu = false;
    WireBytesFlags wire;
    int workers_per_host = 1;
    double selection_overlap = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = plan->add_subcommand("frugal-validate",
                                   "Compare Frugal-pipeline predictions with measured iteration times; prints MAPE");
  cmd->add_option("file", o->file, "Measurements CSV (see docs/design/planner.md)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--hardware", o->hardware, "Built-in hardware or TOML file")->capture_default_str();
  cmd->add_flag("--shared-cpu", o->shared_cpu, "Compute, sparsifier and optimizer share the CPU cores");
  o->wire.Add(cmd);
  cmd->add_option("--workers-per-host", o->workers_per_host,
                  "Workers sharing one host's cores (0: all of a row's workers, as on the one-machine testbed)")
      ->capture_default_str()
      ->check(Bounded(0, 1 << 20));
  AddSelectionOverlapOption(cmd, &o->selection_overlap);
  cmd->callback([o] {
    auto rows = OrThrow(sim::LoadFrugalMeasurementsCsv(o->file));
    for (auto& r : rows) {
      if (!r.measured_bytes) o->wire.Apply(&r.job);
      r.job.selection_overlap = o->selection_overlap;
      int workers = 0;
      for (const sim::ClusterSpec& c : r.job.clusters) workers += c.workers;
      r.job.workers_per_host = o->workers_per_host > 0 ? o->workers_per_host : workers;
    }
    const sim::HardwareSpec hw = OrThrow(sim::LoadHardware(o->hardware));
    const sim::FrugalValidationReport report = OrThrow(sim::ValidateFrugal(rows, hw, o->shared_cpu));
    std::printf("%5s %-9s %8s %7s %7s %12s %12s %8s  %s\n", "line", "model", "clusters", "density", "batch",
                "measured_ms", "predicted_ms", "error%", "bottleneck");
    for (const sim::FrugalRowResult& r : report.rows) {
      std::string clusters;
      for (const sim::ClusterSpec& c : r.row.job.clusters) {
        clusters += (clusters.empty() ? "" : "+") + std::to_string(c.workers);
      }
      std::printf("%5d %-9s %8s %7.3f %7lld %12.1f %12.1f %+8.2f  %s\n", r.row.line, r.row.job.model.name.c_str(),
                  clusters.c_str(), r.row.job.density, static_cast<long long>(r.row.job.batch_per_worker),
                  r.row.iteration_ms, r.predicted_ms, r.error_pct, r.prediction.bottleneck.c_str());
    }
    std::printf("MAPE: %.2f%%\n", report.mape_pct);
  });
}

}  // namespace frugal::cli
