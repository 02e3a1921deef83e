// `frugal plan`: training-time prediction and strategy search.
// A thin layer over frugal::sim; see docs/design/planner.md. This file: run,
// validate, calibrate, ops, hardware; search and Frugal's pipeline are in
// plan_search_command.cc.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "frugal/sim/cost_model.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/validation.h"
#include "input_checks.h"
#include "plan_common.h"

namespace frugal::cli {
namespace {

// Bounds of the parallel degrees: far beyond any published run (Megatron's
// largest: tp 8, pp 64, dp 3072 GPUs in all), so a typo is named instead of
// simulated.
constexpr double kMaxTp = 1024, kMaxPp = 1024, kMaxDp = 1 << 20, kMaxMicroBatch = 1 << 20;
constexpr double kMaxChunks = 64, kMaxGpusPerNode = 1024;

void AddHardwareOverrides(CLI::App* cmd, int* gpus_per_node, double* inter_gbps) {
  cmd->add_option("--gpus-per-node", *gpus_per_node, "Override GPUs per node (0: the hardware's)")
      ->capture_default_str()
      ->check(Bounded(0, kMaxGpusPerNode));
  cmd->add_option("--inter-node-gbps", *inter_gbps, "Override inter-node bandwidth per node (Gbit/s; 0: the hardware's)")
      ->capture_default_str()
      ->check(Bounded(0, 1e7));
}

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

struct RunOpts {
  ModelFlags model;
  std::string hardware = "a100-80g";
  int gpus_per_node = 0;
  double inter_gbps = 0;
  int tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 1, global_batch = 0;
  std::string schedule = "1f1b", recompute = "full", dp_algorithm = "auto";
  int chunks = 1;
  bool sequence_parallel = false, no_overlap = false, zero1 = false;
  std::string softmax_fusion = "batched";
  bool show_resources = false;
  bool json = false;
  std::string profile_db;
};

// Note [Unfused softmax] in src/sim/workload.cc.
void AddSoftmaxFusion(CLI::App* cmd, std::string* value) {
  cmd->add_option("--softmax-fusion", *value,
                  "batched: Megatron's fused softmax only when micro-batch x heads/tp is a multiple of 4 "
                  "(current Megatron); always: for any batch (Megatron-LM 2021)")
      ->capture_default_str()
      ->check(CLI::IsMember({"batched", "always"}));
}

void AddRunFlags(CLI::App* cmd, RunOpts* o) {
  o->model.Add(cmd);
  cmd->add_option("--hardware", o->hardware, "Built-in hardware or TOML file")->capture_default_str();
  AddHardwareOverrides(cmd, &o->gpus_per_node, &o->inter_gbps);
  cmd->add_option("--tp", o->tp, "Tensor parallelism")->capture_default_str()->check(Bounded(1, kMaxTp));
  cmd->add_option("--pp", o->pp, "Pipeline parallelism")->capture_default_str()->check(Bounded(1, kMaxPp));
  cmd->add_option("--dp", o->dp, "Data parallelism")->capture_default_str()->check(Bounded(1, kMaxDp));
  cmd->add_option("--micro-batch", o->micro_batch, "Micro-batch size")
      ->capture_default_str()
      ->check(Bounded(1, kMaxMicroBatch));
  cmd->add_option("--global-batch", o->global_batch, "Global batch (default: dp x micro-batch x pp)")
      ->capture_default_str()
      ->check(Bounded(0, 1e9));
  cmd->add_option("--schedule", o->schedule, "gpipe, 1f1b or interleaved")->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "Model chunks per stage (interleaved)")
      ->capture_default_str()
      ->check(Bounded(1, kMaxChunks));
  cmd->add_option("--recompute", o->recompute, "none, selective or full")->capture_default_str();
  cmd->add_option("--dp-algorithm", o->dp_algorithm, "auto, ring, tree or hierarchical")->capture_default_str();
  cmd->add_flag("--sequence-parallel", o->sequence_parallel, "Megatron sequence parallelism");
  AddSoftmaxFusion(cmd, &o->softmax_fusion);
  cmd->add_flag("--no-overlap", o->no_overlap, "All-reduce gradients after the backward pass");
  cmd->add_flag("--zero1", o->zero1, "Shard Adam state over data-parallel ranks");
  cmd->add_flag("--resources", o->show_resources, "Print busy time per stream and link");
  cmd->add_flag("--json", o->json, "Print the prediction as one JSON object");
  cmd->add_option("--profile-db", o->profile_db, "CSV of measured operator times (key,forward_us,backward_us)");
  AddConfigOption(cmd);
}

sim::CollectiveAlgorithm ParseDpAlgorithm(const std::string& name) {
  if (name == "auto") return sim::CollectiveAlgorithm::kAuto;
  if (name == "ring") return sim::CollectiveAlgorithm::kRing;
  if (name == "tree") return sim::CollectiveAlgorithm::kTree;
  if (name == "hierarchical") return sim::CollectiveAlgorithm::kHierarchical;
  throw UsageError("--dp-algorithm must be auto, ring, tree or hierarchical, got '" + name + "'");
}

sim::ParallelStrategy Strategy(const RunOpts& o) {
  sim::ParallelStrategy s;
  s.tensor_parallel = o.tp;
  s.pipeline_parallel = o.pp;
  s.data_parallel = o.dp;
  s.micro_batch = o.micro_batch;
  s.global_batch = o.global_batch > 0 ? o.global_batch : int64_t{o.dp} * o.micro_batch * o.pp;
  s.schedule = OrThrow(sim::ParseSchedule(o.schedule));
  s.chunks = o.chunks;
  s.recompute = OrThrow(sim::ParseRecompute(o.recompute));
  s.dp_algorithm = ParseDpAlgorithm(o.dp_algorithm);
  s.sequence_parallel = o.sequence_parallel;
  s.fused_softmax_any_batch = o.softmax_fusion == "always";
  s.overlap_dp = !o.no_overlap;
  s.distributed_optimizer = o.zero1;
  return s;
}

void RunPrediction(const RunOpts& o) {
  const sim::ModelSpec model = o.model.Resolve();
  const sim::HardwareSpec hw = LoadHardwareOrThrow(o.hardware, o.gpus_per_node, o.inter_gbps);
  std::unique_ptr<sim::OperatorCostModel> cost;
  if (!o.profile_db.empty()) {
    cost = sim::CreateProfiledCostModel(OrThrow(sim::ProfileDatabase::LoadCsv(o.profile_db)),
                                        sim::CreateRooflineCostModel(hw, model.bytes_per_value <= 2));
  }
  sim::Simulator simulator(hw, std::move(cost));
  const sim::ParallelStrategy s = Strategy(o);
  const sim::IterationPrediction p = OrThrow(simulator.Predict(model, s));
  if (o.json) {
    nlohmann::json j = ToJson(s, p);
    j["model"] = model.name;
    j["hardware"] = simulator.hardware().name;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  PrintPrediction(model, s, p);
  if (o.show_resources) {
    for (const auto& [name, busy] : p.resource_busy) std::printf("  %-28s %.4f s busy\n", name.c_str(), busy);
  }
}

void AddRun(CLI::App* plan) {
  auto o = std::make_shared<RunOpts>();
  auto* cmd = plan->add_subcommand("run", "Predict one iteration of one parallel strategy");
  AddRunFlags(cmd, o.get());
  cmd->callback([o, cmd] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    RunPrediction(*o);
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
  std::string softmax_fusion = "batched";
  std::string profile_db;

  void Add(CLI::App* cmd) {
    cmd->add_option("file", file, "Measurements CSV (see docs/design/planner.md)")->required()->check(CLI::ExistingFile);
    cmd->add_option("--hardware", hardware, "Built-in hardware or TOML file")->capture_default_str();
    AddHardwareOverrides(cmd, &gpus_per_node, &inter_gbps);
    cmd->add_option("--vocab", vocab, "Vocabulary size")->capture_default_str()->check(Bounded(1, 1 << 24));
    cmd->add_option("--recompute", recompute, "none, selective or full")->capture_default_str();
    cmd->add_option("--schedule", schedule, "Default schedule: gpipe, 1f1b or interleaved")->capture_default_str();
    cmd->add_option("--chunks", chunks, "Chunks per stage for --schedule interleaved")
        ->capture_default_str()
        ->check(Bounded(1, kMaxChunks));
    cmd->add_flag("--sequence-parallel", sequence_parallel, "Megatron sequence parallelism");
    AddSoftmaxFusion(cmd, &softmax_fusion);
    cmd->add_flag("--no-overlap", no_overlap, "All-reduce gradients after the backward pass");
    cmd->add_option("--profile-db", profile_db, "CSV of measured operator times (key,forward_us,backward_us)")
        ->check(CLI::ExistingFile);
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
    v.fused_softmax_any_batch = softmax_fusion == "always";
    v.overlap_dp = !no_overlap;
    if (!profile_db.empty()) {
      v.profile_db = std::make_shared<const sim::ProfileDatabase>(OrThrow(sim::ProfileDatabase::LoadCsv(profile_db)));
    }
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
    std::printf("\n%-12s %-12s %6s %8s %12s\n", "by", "value", "rows", "MAPE%", "mean error%");
    for (const sim::MapeGroup& g : sim::MapeBreakdown(report)) {
      std::printf("%-12s %-12s %6d %8.2f %+12.2f\n", g.dimension.c_str(), g.value.c_str(), g.rows, g.mape_pct,
                  g.mean_error_pct);
    }
    std::printf("MAPE: %.2f%%\n", report.mape_pct);
  });
}

struct CalibrateOpts {
  ValidateFlags f;
  std::string out;
  int evals = 300;
  std::vector<std::string> params;
  bool write_back = false;
  double prior = sim::CalibrationOptions{}.prior_weight;
};

void RunCalibrate(CalibrateOpts* o) {
  const ValidateFlags& f = o->f;
  if (o->write_back) {
    if (!o->out.empty()) throw UsageError("give either --out or --write-back");
    if (f.hardware.find('/') == std::string::npos && f.hardware.find(".toml") == std::string::npos) {
      throw UsageError("--write-back needs --hardware to be a TOML file, not the built-in '" + f.hardware + "'");
    }
    o->out = f.hardware;
  }
  if (!o->out.empty()) CheckWritable(o->out, o->write_back ? "--hardware" : "--out");
  const auto rows = OrThrow(sim::LoadMeasurementsCsv(f.file));
  sim::HardwareSpec hw = OrThrow(sim::LoadHardware(f.hardware));
  if (f.gpus_per_node > 0) hw.gpus_per_node = f.gpus_per_node;
  if (f.inter_gbps > 0) hw.inter_node_gbps = f.inter_gbps;
  sim::ValidationOptions v = f.Options();
  v.gpus_per_node = 0;
  v.inter_node_gbps = 0;
  sim::CalibrationOptions c;
  c.max_evaluations = o->evals;
  c.prior_weight = o->prior;
  if (!o->params.empty()) c.parameters = o->params;
  const sim::CalibrationResult r = OrThrow(sim::Calibrate(rows, hw, v, c));
  std::fprintf(stderr, "calibrated %s on %zu rows in %d evaluations: MAPE %.2f%% -> %.2f%%\n", hw.name.c_str(),
               rows.size(), r.evaluations, r.mape_before_pct, r.mape_after_pct);
  const std::string toml = sim::HardwareToToml(r.hardware);
  if (o->out.empty()) {
    std::printf("%s", toml.c_str());
  } else {
    std::ofstream file(o->out);
    file << toml;
    if (!file) throw RunError("cannot write '" + o->out + "'");
    std::fprintf(stderr, "wrote %s\n", o->out.c_str());
  }
  std::printf("MAPE: %.2f%%\n", r.mape_after_pct);
}

void AddCalibrate(CLI::App* plan) {
  auto o = std::make_shared<CalibrateOpts>();
  auto* cmd = plan->add_subcommand("calibrate", "Fit a hardware description's global efficiency parameters");
  o->f.Add(cmd);
  cmd->add_option("--out", o->out, "Write the calibrated hardware TOML here (default: print it)")->capture_default_str();
  cmd->add_option("--prior-weight", o->prior, "Ridge penalty towards the starting parameters (0: MAPE only)")
      ->capture_default_str()
      ->check(Bounded(0, 1e6));
  cmd->add_flag("--write-back", o->write_back, "Overwrite the --hardware TOML file with the calibrated parameters");
  cmd->add_option("--max-evals", o->evals, "Validation runs allowed")
      ->capture_default_str()
      ->check(Bounded(1, 100000, "each is a full validation pass"));
  cmd->add_option("--params", o->params,
                  "Parameters to fit (default matmul_max matmul_half_dim memory intra_link inter_link)")
      ->capture_default_str();
  cmd->callback([o] { RunCalibrate(o.get()); });
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
  cmd->add_option("--tp", o->tp, "Tensor parallelism")->capture_default_str()->check(Bounded(1, kMaxTp));
  cmd->add_option("--micro-batch", o->micro_batch, "Micro-batch size")
      ->capture_default_str()
      ->check(Bounded(1, kMaxMicroBatch));
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
  AddHybrid(plan);
  AddOps(plan);
  AddHardware(plan);
}

}  // namespace frugal::cli
