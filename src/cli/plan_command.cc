// `frugal plan`: training-time prediction and strategy search (issue 6).
// A thin layer over frugal::sim; see docs/planner.md.
#include <chrono>
#include <cstdio>
#include <sstream>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "frugal/sim/cost_model.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/frugal_validation.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/planner.h"
#include "frugal/sim/simulator.h"
#include "frugal/sim/validation.h"
#include "frugal/sim/workload.h"

namespace frugal::cli {
namespace {

template <typename T>
T OrThrow(Result<T> r) {
  ThrowIfError(r.status());
  return std::move(r).value();
}

// Model flags shared by run and search: a built-in name, or a custom GPT.
struct ModelFlags {
  std::string name = "gpt-1.3b";
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int64_t seq_len = 0;
  int64_t vocab = 0;

  void Add(CLI::App* cmd) {
    cmd->add_option("--model", name, "Built-in model (gpt-125m ... gpt-1t, mlp, cnn, resnet18)")->capture_default_str();
    cmd->add_option("--layers", layers, "Custom GPT: number of layers (overrides the model's)")->capture_default_str();
    cmd->add_option("--hidden", hidden, "Custom GPT: hidden size")->capture_default_str();
    cmd->add_option("--heads", heads, "Custom GPT: attention heads")->capture_default_str();
    cmd->add_option("--seq-len", seq_len, "Sequence length (default 2048)")->capture_default_str();
    cmd->add_option("--vocab", vocab, "Vocabulary size (default 51200)")->capture_default_str();
  }

  sim::ModelSpec Resolve() const {
    sim::ModelSpec m = OrThrow(sim::BuiltinModel(name));
    if (!m.is_transformer) {
      if (layers || hidden || heads || seq_len || vocab) {
        throw UsageError("--layers/--hidden/--heads/--seq-len/--vocab apply to GPT models only");
      }
      return m;
    }
    if (layers > 0) m.transformer.layers = layers;
    if (hidden > 0) m.transformer.hidden = hidden;
    if (heads > 0) m.transformer.heads = heads;
    if (seq_len > 0) m.transformer.seq_len = seq_len;
    if (vocab > 0) m.transformer.vocab = vocab;
    return m;
  }
};

sim::HardwareSpec LoadHardwareOrThrow(const std::string& name, int gpus_per_node, double inter_gbps) {
  sim::HardwareSpec hw = OrThrow(sim::LoadHardware(name));
  if (gpus_per_node > 0) hw.gpus_per_node = gpus_per_node;
  if (inter_gbps > 0) hw.inter_node_gbps = inter_gbps;
  return hw;
}

void PrintPrediction(const sim::ModelSpec& model, const sim::ParallelStrategy& s, const sim::IterationPrediction& p) {
  std::printf("model          %s (%.2fB parameters)\n", model.name.c_str(), model.ParameterCount() / 1e9);
  std::printf("strategy       %s  (%d GPUs, global batch %lld)\n", s.ToString().c_str(), s.gpus(),
              static_cast<long long>(s.global_batch));
  std::printf("iteration      %.3f s\n", p.iteration_s);
  std::printf("compute        %.3f s on the busiest stage (incl. TP all-reduce %.3f s)\n", p.compute_s, p.tp_comm_s);
  std::printf("pipeline p2p   %.3f s busiest link; bubble %.1f%%\n", p.pp_comm_s, p.bubble_fraction * 100);
  std::printf("data parallel  %.3f s all-reduce, %.3f s exposed, %.3f s hidden\n", p.dp_comm_s, p.dp_exposed_s,
              std::max(0.0, p.dp_comm_s - p.dp_exposed_s));
  std::printf("throughput     %.1f TFLOP/s per GPU executed, %.1f model TFLOP/s per GPU\n", p.achieved_tflops_per_gpu,
              p.model_tflops_per_gpu);
  const double gib = 1073741824.0;
  std::printf("memory         %.1f GiB of %.1f GiB on stage %d (weights %.1f, grads %.1f, optimizer %.1f, "
              "activations %.1f for %d micro-batches, reserved %.1f)%s\n",
              p.memory.total_bytes / gib, p.memory.capacity_bytes / gib, p.memory.worst_stage,
              p.memory.weights_bytes / gib, p.memory.gradients_bytes / gib, p.memory.optimizer_bytes / gib,
              p.memory.activation_bytes / gib, p.memory.max_in_flight, p.memory.reserved_bytes / gib,
              p.memory.oom() ? "  OUT OF MEMORY" : "");
}

nlohmann::json ToJson(const sim::ParallelStrategy& s, const sim::IterationPrediction& p) {
  nlohmann::json mem = {{"total_bytes", p.memory.total_bytes},
                        {"capacity_bytes", p.memory.capacity_bytes},
                        {"weights_bytes", p.memory.weights_bytes},
                        {"gradients_bytes", p.memory.gradients_bytes},
                        {"optimizer_bytes", p.memory.optimizer_bytes},
                        {"activation_bytes", p.memory.activation_bytes},
                        {"reserved_bytes", p.memory.reserved_bytes},
                        {"max_in_flight", p.memory.max_in_flight},
                        {"worst_stage", p.memory.worst_stage},
                        {"oom", p.memory.oom()}};
  nlohmann::json resources = nlohmann::json::object();
  for (const auto& [name, busy] : p.resource_busy) resources[name] = busy;
  return {{"strategy", s.ToString()},
          {"tp", s.tensor_parallel},
          {"pp", s.pipeline_parallel},
          {"dp", s.data_parallel},
          {"micro_batch", s.micro_batch},
          {"global_batch", s.global_batch},
          {"schedule", sim::ScheduleName(s.schedule)},
          {"chunks", s.chunks},
          {"recompute", sim::RecomputeName(s.recompute)},
          {"iteration_s", p.iteration_s},
          {"compute_s", p.compute_s},
          {"tp_comm_s", p.tp_comm_s},
          {"pp_comm_s", p.pp_comm_s},
          {"dp_comm_s", p.dp_comm_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"bubble_fraction", p.bubble_fraction},
          {"achieved_tflops_per_gpu", p.achieved_tflops_per_gpu},
          {"model_tflops_per_gpu", p.model_tflops_per_gpu},
          {"memory", mem},
          {"resource_busy_s", resources}};
}

void AddRun(CLI::App* plan) {
  struct Opts {
    ModelFlags model;
    std::string hardware = "a100-80g";
    int gpus_per_node = 0;
    double inter_gbps = 0;
    int tp = 1, pp = 1, dp = 1;
    int64_t micro_batch = 1, global_batch = 0;
    std::string schedule = "1f1b", recompute = "full", dp_algorithm = "auto";
    int chunks = 1;
    bool sequence_parallel = false, no_overlap = false, zero1 = false;
    bool show_resources = false;
    bool json = false;
    std::string profile_db;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = plan->add_subcommand("run", "Predict one iteration of one parallel strategy");
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Built-in hardware or TOML file")->capture_default_str();
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "Override GPUs per node")->capture_default_str();
  cmd->add_option("--inter-node-gbps", o->inter_gbps, "Override inter-node bandwidth per node (Gbit/s)")->capture_default_str();
  cmd->add_option("--tp", o->tp, "Tensor parallelism")->capture_default_str();
  cmd->add_option("--pp", o->pp, "Pipeline parallelism")->capture_default_str();
  cmd->add_option("--dp", o->dp, "Data parallelism")->capture_default_str();
  cmd->add_option("--micro-batch", o->micro_batch, "Micro-batch size")->capture_default_str();
  cmd->add_option("--global-batch", o->global_batch, "Global batch (default: dp x micro-batch x pp)")->capture_default_str();
  cmd->add_option("--schedule", o->schedule, "gpipe, 1f1b or interleaved")->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "Model chunks per stage (interleaved)")->capture_default_str();
  cmd->add_option("--recompute", o->recompute, "none, selective or full")->capture_default_str();
  cmd->add_option("--dp-algorithm", o->dp_algorithm, "auto, ring, tree or hierarchical")->capture_default_str();
  cmd->add_flag("--sequence-parallel", o->sequence_parallel, "Megatron sequence parallelism");
  cmd->add_flag("--no-overlap", o->no_overlap, "All-reduce gradients after the backward pass");
  cmd->add_flag("--zero1", o->zero1, "Shard Adam state over data-parallel ranks");
  cmd->add_flag("--resources", o->show_resources, "Print busy time per stream and link");
  cmd->add_flag("--json", o->json, "Print the prediction as one JSON object");
  cmd->add_option("--profile-db", o->profile_db, "CSV of measured operator times (key,forward_us,backward_us)");
  AddConfigOption(cmd);
  cmd->callback([o, cmd] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    const sim::ModelSpec model = o->model.Resolve();
    const sim::HardwareSpec hw = LoadHardwareOrThrow(o->hardware, o->gpus_per_node, o->inter_gbps);
    std::unique_ptr<sim::OperatorCostModel> cost;
    if (!o->profile_db.empty()) {
      cost = sim::CreateProfiledCostModel(OrThrow(sim::ProfileDatabase::LoadCsv(o->profile_db)),
                                          sim::CreateRooflineCostModel(hw, model.bytes_per_value <= 2));
    }
    sim::Simulator simulator(hw, std::move(cost));
    sim::ParallelStrategy s;
    s.tensor_parallel = o->tp;
    s.pipeline_parallel = o->pp;
    s.data_parallel = o->dp;
    s.micro_batch = o->micro_batch;
    s.global_batch = o->global_batch > 0 ? o->global_batch : o->dp * o->micro_batch * o->pp;
    s.schedule = OrThrow(sim::ParseSchedule(o->schedule));
    s.chunks = o->chunks;
    s.recompute = OrThrow(sim::ParseRecompute(o->recompute));
    if (o->dp_algorithm == "auto") {
      s.dp_algorithm = sim::CollectiveAlgorithm::kAuto;
    } else if (o->dp_algorithm == "ring") {
      s.dp_algorithm = sim::CollectiveAlgorithm::kRing;
    } else if (o->dp_algorithm == "tree") {
      s.dp_algorithm = sim::CollectiveAlgorithm::kTree;
    } else if (o->dp_algorithm != "hierarchical") {
      throw UsageError("--dp-algorithm must be auto, ring, tree or hierarchical");
    }
    s.sequence_parallel = o->sequence_parallel;
    s.overlap_dp = !o->no_overlap;
    s.distributed_optimizer = o->zero1;
    const sim::IterationPrediction p = OrThrow(simulator.Predict(model, s));
    if (o->json) {
      nlohmann::json j = ToJson(s, p);
      j["model"] = model.name;
      j["hardware"] = simulator.hardware().name;
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    PrintPrediction(model, s, p);
    if (o->show_resources) {
      for (const auto& [name, busy] : p.resource_busy) std::printf("  %-28s %.4f s busy\n", name.c_str(), busy);
    }
  });
}

// Flags shared by validate and calibrate.
struct ValidateFlags {
  std::string file;
  std::string hardware = "a100-80g";
  int gpus_per_node = 0;
  double inter_gbps = 0;
  int64_t vocab = 51200;
  std::string recompute = "full", schedule = "1f1b";
  int chunks = 1;
  bool sequence_parallel = false, no_overlap = false;

  void Add(CLI::App* cmd) {
    cmd->add_option("file", file, "Measurements CSV (see docs/planner.md)")->required()->check(CLI::ExistingFile);
    cmd->add_option("--hardware", hardware, "Built-in hardware or TOML file")->capture_default_str();
    cmd->add_option("--gpus-per-node", gpus_per_node, "Override GPUs per node")->capture_default_str();
    cmd->add_option("--inter-node-gbps", inter_gbps, "Override inter-node bandwidth per node (Gbit/s)")->capture_default_str();
    cmd->add_option("--vocab", vocab, "Vocabulary size")->capture_default_str();
    cmd->add_option("--recompute", recompute, "none, selective or full")->capture_default_str();
    cmd->add_option("--schedule", schedule, "Default schedule: gpipe, 1f1b or interleaved")->capture_default_str();
    cmd->add_option("--chunks", chunks, "Chunks per stage for --schedule interleaved")->capture_default_str();
    cmd->add_flag("--sequence-parallel", sequence_parallel, "Megatron sequence parallelism");
    cmd->add_flag("--no-overlap", no_overlap, "All-reduce gradients after the backward pass");
  }

  sim::ValidationOptions Options() const {
    sim::ValidationOptions v;
    v.gpus_per_node = gpus_per_node;
    v.inter_node_gbps = inter_gbps;
    v.vocab = vocab;
    v.recompute = OrThrow(sim::ParseRecompute(recompute));
    v.schedule = OrThrow(sim::ParseSchedule(schedule));
    v.chunks = chunks;
    v.sequence_parallel = sequence_parallel;
    v.overlap_dp = !no_overlap;
    return v;
  }
};

void AddValidate(CLI::App* plan) {
  auto f = std::make_shared<ValidateFlags>();
  auto* cmd = plan->add_subcommand("validate", "Compare predictions with measured iteration times; prints MAPE");
  f->Add(cmd);
  cmd->callback([f] {
    const auto rows = OrThrow(sim::LoadMeasurementsCsv(f->file));
    const sim::HardwareSpec hw = OrThrow(sim::LoadHardware(f->hardware));
    const sim::ValidationReport report = OrThrow(sim::Validate(rows, hw, f->Options()));
    std::printf("%5s %6s %6s %-36s %12s %12s %8s %8s\n", "line", "GPUs", "batch", "strategy", "measured_ms",
                "predicted_ms", "error%", "TFLOP/s");
    for (const sim::RowResult& r : report.rows) {
      std::printf("%5d %6d %6lld %-36s %12.1f %12.1f %+8.2f %8.1f%s\n", r.row.line, r.row.gpus,
                  static_cast<long long>(r.row.global_batch), r.strategy.ToString().c_str(), r.row.iteration_ms,
                  r.predicted_ms, r.error_pct, r.achieved_tflops, r.oom ? "  (predicted OOM)" : "");
    }
    std::printf("MAPE: %.2f%%\n", report.mape_pct);
  });
}

void AddCalibrate(CLI::App* plan) {
  auto f = std::make_shared<ValidateFlags>();
  auto out = std::make_shared<std::string>();
  auto evals = std::make_shared<int>(300);
  auto params = std::make_shared<std::vector<std::string>>();
  auto write_back = std::make_shared<bool>(false);
  auto prior = std::make_shared<double>(sim::CalibrationOptions{}.prior_weight);
  auto* cmd = plan->add_subcommand("calibrate", "Fit a hardware description's global efficiency parameters");
  f->Add(cmd);
  cmd->add_option("--out", *out, "Write the calibrated hardware TOML here (default: print it)")->capture_default_str();
  cmd->add_option("--prior-weight", *prior, "Ridge penalty towards the starting parameters (0: MAPE only)")
      ->capture_default_str();
  cmd->add_flag("--write-back", *write_back, "Overwrite the --hardware TOML file with the calibrated parameters");
  cmd->add_option("--max-evals", *evals, "Validation runs allowed")->capture_default_str();
  cmd->add_option("--params", *params,
                  "Parameters to fit (default matmul_max matmul_half_dim memory intra_link inter_link)")->capture_default_str();
  cmd->callback([f, out, evals, params, write_back, prior] {
    if (*write_back) {
      if (!out->empty()) throw UsageError("give either --out or --write-back");
      if (f->hardware.find('/') == std::string::npos && f->hardware.find(".toml") == std::string::npos) {
        throw UsageError("--write-back needs --hardware to be a TOML file, not the built-in '" + f->hardware + "'");
      }
      *out = f->hardware;
    }
    const auto rows = OrThrow(sim::LoadMeasurementsCsv(f->file));
    sim::HardwareSpec hw = OrThrow(sim::LoadHardware(f->hardware));
    if (f->gpus_per_node > 0) hw.gpus_per_node = f->gpus_per_node;
    if (f->inter_gbps > 0) hw.inter_node_gbps = f->inter_gbps;
    sim::ValidationOptions v = f->Options();
    v.gpus_per_node = 0;
    v.inter_node_gbps = 0;
    sim::CalibrationOptions c;
    c.max_evaluations = *evals;
    c.prior_weight = *prior;
    if (!params->empty()) c.parameters = *params;
    const sim::CalibrationResult r = OrThrow(sim::Calibrate(rows, hw, v, c));
    std::fprintf(stderr, "calibrated %s on %zu rows in %d evaluations: MAPE %.2f%% -> %.2f%%\n", hw.name.c_str(),
                 rows.size(), r.evaluations, r.mape_before_pct, r.mape_after_pct);
    const std::string toml = sim::HardwareToToml(r.hardware);
    if (out->empty()) {
      std::printf("%s", toml.c_str());
    } else {
      std::ofstream file(*out);
      file << toml;
      if (!file) throw RunError("cannot write '" + *out + "'");
      std::fprintf(stderr, "wrote %s\n", out->c_str());
    }
    std::printf("MAPE: %.2f%%\n", r.mape_after_pct);
  });
}

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

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void AddSearch(CLI::App* plan) {
  struct Opts {
    ModelFlags model;
    std::string hardware = "a100-80g";
    sim::SearchOptions search;
    std::string recomputes = "none,selective,full", schedules = "gpipe,1f1b,interleaved";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = plan->add_subcommand("search", "Enumerate and rank parallel strategies by time and dollar cost");
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Comma-separated built-in names or TOML files")->capture_default_str();
  cmd->add_option("--gpus", o->search.gpus, "Number of GPUs")->required();
  cmd->add_option("--min-gpus", o->search.min_gpus, "Also try every power of two from this up to --gpus")->capture_default_str();
  cmd->add_option("--global-batch", o->search.global_batch, "Global batch (samples)")->capture_default_str();
  cmd->add_option("--tokens", o->search.training_tokens, "Training tokens for the cost estimate")->capture_default_str();
  cmd->add_option("--top", o->search.top, "Candidates shown per ranking")->capture_default_str();
  cmd->add_option("--micro-batches", o->search.micro_batches, "Micro-batch sizes to try")->capture_default_str();
  cmd->add_option("--recompute", o->recomputes, "Recomputation modes to try")->capture_default_str();
  cmd->add_option("--schedules", o->schedules, "Pipeline schedules to try")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the rankings as one JSON object");
  AddConfigOption(cmd);
  cmd->callback([o, cmd] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    const sim::ModelSpec model = o->model.Resolve();
    std::vector<sim::HardwareSpec> hardware;
    for (const std::string& name : SplitList(o->hardware)) hardware.push_back(OrThrow(sim::LoadHardware(name)));
    o->search.recomputes.clear();
    for (const std::string& r : SplitList(o->recomputes)) o->search.recomputes.push_back(OrThrow(sim::ParseRecompute(r)));
    o->search.schedules.clear();
    for (const std::string& r : SplitList(o->schedules)) o->search.schedules.push_back(OrThrow(sim::ParseSchedule(r)));
    const auto start = std::chrono::steady_clock::now();
    const sim::SearchResult r = OrThrow(sim::SearchStrategies(model, hardware, o->search));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o->json) {
      auto list = [](const std::vector<sim::Candidate>& cands) {
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
      };
      nlohmann::json j = {{"model", model.name},          {"enumerated", r.enumerated},
                          {"out_of_memory", r.out_of_memory}, {"simulated", r.simulated},
                          {"search_s", secs},              {"by_time", list(r.by_time)},
                          {"by_cost", list(r.by_cost)}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("model %s (%.1fB parameters), up to %d GPUs, global batch %lld, %.3g tokens\n", model.name.c_str(),
                model.ParameterCount() / 1e9, o->search.gpus, static_cast<long long>(o->search.global_batch),
                o->search.training_tokens);
    std::printf("enumerated %d strategies: %d out of memory, %d simulated in %.2f s\n", r.enumerated,
                r.out_of_memory, r.simulated, secs);
    if (r.enumerated == 0) {
      throw UsageError("no strategy divides the model and batch: check --gpus and --global-batch");
    }
    if (r.by_time.empty()) throw RunError("no strategy fits in memory; try more GPUs or a smaller model");
    PrintCandidates("fastest:", r.by_time);
    PrintCandidates("cheapest:", r.by_cost);
  });
}

void AddFrugal(CLI::App* plan) {
  struct Opts {
    ModelFlags model;
    std::string hardware = "rtx3090";
    sim::FrugalJob job;
    std::vector<int> clusters = {4};
    double intra_gbps = 10;
    double inter_mbps = 100;
  };
  auto o = std::make_shared<Opts>();
  o->model.name = "resnet18";
  auto* cmd = plan->add_subcommand("frugal", "Predict Frugal's sparse, pipelined data-parallel iteration");
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Built-in hardware or TOML file")->capture_default_str();
  cmd->add_option("--clusters", o->clusters, "Workers per cluster, e.g. --clusters 4 4")->capture_default_str();
  cmd->add_option("--intra-gbps", o->intra_gbps, "Bandwidth inside a cluster (Gbit/s)")->capture_default_str();
  cmd->add_option("--inter-mbps", o->inter_mbps, "Bandwidth between clusters (Mbit/s)")->capture_default_str();
  cmd->add_option("--density", o->job.density, "Fraction of gradient values exchanged")->capture_default_str();
  cmd->add_option("--batch", o->job.batch_per_worker, "Batch per worker")->capture_default_str();
  cmd->add_option("--staleness", o->job.staleness, "Iterations of staleness")->capture_default_str();
  cmd->add_option("--compute-s-per-sample", o->job.compute_s_per_sample,
                  "Measured forward+backward seconds per sample (0: cost model)")
      ->capture_default_str();
  cmd->add_flag("--shared-cpu", o->job.shared_cpu, "Compute, sparsifier and optimizer share the CPU cores");
  AddConfigOption(cmd);
  cmd->callback([o, cmd] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    o->job.model = o->model.Resolve();
    o->job.clusters.clear();
    for (int w : o->clusters) o->job.clusters.push_back(sim::ClusterSpec{w, o->intra_gbps});
    o->job.inter_cluster_gbps = o->inter_mbps / 1000.0;
    const sim::HardwareSpec hw = OrThrow(sim::LoadHardware(o->hardware));
    const sim::FrugalPrediction p = OrThrow(sim::PredictFrugalIteration(o->job, hw));
    std::printf("iteration      %.4f s (%.1f samples/s), bottleneck: %s\n", p.iteration_s, p.samples_per_s,
                p.bottleneck.c_str());
    std::printf("gpu            %.4f s\ncopy           %.4f s\nsparsify       %.4f s\nexchange       %.4f s\n"
                "optimizer      %.4f s\nmerged density %.4f\n",
                p.gpu_s, p.copy_s, p.sparsify_s, p.exchange_s, p.optimizer_s, p.merged_density);
  });
}

void AddFrugalValidate(CLI::App* plan) {
  struct Opts {
    std::string file;
    std::string hardware = "cpu-local";
    bool shared_cpu = false;
    double bytes_per_value = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = plan->add_subcommand("frugal-validate",
                                   "Compare Frugal-pipeline predictions with measured iteration times; prints MAPE");
  cmd->add_option("file", o->file, "Measurements CSV (see docs/planner.md)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--hardware", o->hardware, "Built-in hardware or TOML file")->capture_default_str();
  cmd->add_flag("--shared-cpu", o->shared_cpu, "Compute, sparsifier and optimizer share the CPU cores");
  cmd->add_option("--bytes-per-value", o->bytes_per_value,
                  "Wire bytes per selected value of the measured runs (Frugal's default fp16 + block ids: 2.25; "
                  "0 = the model's default 4.25)");
  cmd->callback([o] {
    auto rows = OrThrow(sim::LoadFrugalMeasurementsCsv(o->file));
    if (o->bytes_per_value < 0) throw UsageError("--bytes-per-value must be >= 0");
    if (o->bytes_per_value > 0) {
      for (auto& r : rows) r.job.bytes_per_selected = o->bytes_per_value;
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

void AddOps(CLI::App* plan) {
  struct Opts {
    ModelFlags model;
    std::string hardware = "a100-80g";
    int tp = 1;
    int64_t micro_batch = 1;
    bool sequence_parallel = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = plan->add_subcommand(
      "ops", "List the distinct operator shapes of a model as a profile-database template with roofline times");
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Hardware for the roofline estimates")->capture_default_str();
  cmd->add_option("--tp", o->tp, "Tensor parallelism")->capture_default_str();
  cmd->add_option("--micro-batch", o->micro_batch, "Micro-batch size")->capture_default_str();
  cmd->add_flag("--sequence-parallel", o->sequence_parallel, "Megatron sequence parallelism");
  cmd->callback([o] {
    const sim::ModelSpec model = o->model.Resolve();
    const sim::HardwareSpec hw = OrThrow(sim::LoadHardware(o->hardware));
    sim::WorkloadOptions w;
    w.tensor_parallel = o->tp;
    w.micro_batch = o->micro_batch;
    w.sequence_parallel = o->sequence_parallel;
    const sim::Workload workload = OrThrow(sim::BuildWorkload(model, w));
    const auto cost = sim::CreateRooflineCostModel(hw, model.bytes_per_value <= 2);
    std::printf("# %s on %s, roofline estimates; replace with measured times\nkey,forward_us,backward_us\n",
                model.name.c_str(), hw.name.c_str());
    for (const sim::Operator& op : sim::DistinctOperators(workload)) {
      std::printf("%s,%.3f,%.3f\n", sim::OperatorKey(op).c_str(), cost->Seconds(op, sim::Pass::kForward) * 1e6,
                  cost->Seconds(op, sim::Pass::kBackward) * 1e6);
    }
  });
}

void AddHardware(CLI::App* plan) {
  auto name = std::make_shared<std::string>();
  auto* cmd = plan->add_subcommand("hardware", "Print a hardware description as TOML (list them without a name)");
  cmd->add_option("name", *name, "Built-in name or TOML file");
  cmd->callback([name] {
    if (name->empty()) {
      for (const std::string& n : sim::BuiltinHardwareNames()) std::printf("%s\n", n.c_str());
      return;
    }
    std::printf("%s", sim::HardwareToToml(OrThrow(sim::LoadHardware(*name))).c_str());
  });
}

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto* plan = app.add_subcommand("plan", "Predict training time and search parallel strategies");
  plan->require_subcommand(1);
  AddRun(plan);
  AddValidate(plan);
  AddCalibrate(plan);
  AddSearch(plan);
  AddFrugal(plan);
  AddFrugalValidate(plan);
  AddOps(plan);
  AddHardware(plan);
}

}  // namespace frugal::cli
