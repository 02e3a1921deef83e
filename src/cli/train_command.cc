// `frugal train`: binds every TrainOptions field to a flag (and TOML key) and
// runs frugal::train::Trainer.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "commands.h"
#include "frugal/comm/rendezvous.h"
#include "frugal/control/bandwidth_controller.h"
#include "frugal/data/dataset.h"
#include "frugal/engine/launcher.h"
#include "frugal/engine/worker.h"
#include "frugal/train/trainer.h"

namespace frugal::cli {

namespace {

struct TrainFlags {
  train::TrainOptions options;
  std::string local_clusters;
  std::string local_slowdowns;
};

void BindTrainOptions(CLI::App* cmd, train::TrainOptions& o) {
  cmd->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--model", o.model, "Model: mlp, cnn or resnet18")->group("Model and data");
  cmd->add_option("--dataset", o.dataset, "Dataset: fashion-mnist or synthetic")->group("Model and data");
  cmd->add_option("--data-dir", o.data_dir, "Directory of the Fashion-MNIST idx files")->group("Model and data");
  cmd->add_option("--synthetic-train-size", o.synthetic_train_size, "Training samples of the synthetic dataset")->group("Model and data");
  cmd->add_option("--synthetic-test-size", o.synthetic_test_size, "Test samples of the synthetic dataset")->group("Model and data");

  cmd->add_option("--epochs", o.epochs, "Passes over the training set")->group("Schedule");
  cmd->add_option("--max-steps", o.max_steps, "Stop after this many steps (0 = no limit)")->group("Schedule");
  cmd->add_option("--batch-size", o.batch_size, "Samples per step per worker")->group("Schedule");

  cmd->add_option("--optimizer", o.optimizer, "sgd, adam or adamw")->group("Optimizer");
  cmd->add_option("--lr", o.lr, "Peak learning rate")->group("Optimizer");
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->group("Optimizer");
  cmd->add_option("--dampening", o.dampening, "SGD dampening")->group("Optimizer");
  cmd->add_flag("--nesterov,!--no-nesterov", o.nesterov, "SGD Nesterov momentum")->group("Optimizer");
  cmd->add_option("--weight-decay", o.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")->group("Optimizer");
  cmd->add_option("--beta1", o.beta1, "Adam beta1")->group("Optimizer");
  cmd->add_option("--beta2", o.beta2, "Adam beta2")->group("Optimizer");
  cmd->add_option("--eps", o.eps, "Adam epsilon")->group("Optimizer");
  cmd->add_option("--lr-schedule", o.lr_schedule, "constant, cosine or step (after warm-up)")->group("Optimizer");
  cmd->add_option("--warmup-steps", o.warmup_steps, "Linear learning-rate warm-up steps")->group("Optimizer");
  cmd->add_option("--lr-step-size", o.lr_step_size, "Steps between decays of the step schedule")->group("Optimizer");
  cmd->add_option("--lr-gamma", o.lr_gamma, "Decay factor of the step schedule")->group("Optimizer");

  cmd->add_option("--eval-every", o.eval_every, "Evaluate every N steps (0 = every epoch)")->group("Output");
  cmd->add_option("--log-every", o.log_every, "Progress/metrics cadence in steps")->group("Output");
  cmd->add_option("--runs-dir", o.runs_dir, "Where runs/<run-name>/metrics.jsonl goes")->group("Output");
  cmd->add_option("--run-name", o.run_name, "Run name (default: <model>-<date>-<time>)")->group("Output");
  cmd->add_flag("--quiet", o.quiet, "No progress output")->group("Output");

  cmd->add_option("--seed", o.seed, "Seed for weights and data order")->group("Execution");
  cmd->add_option("--threads", o.threads, "LibTorch threads (0 = all cores)")->group("Execution");
  cmd->add_option("--device", o.device, "LibTorch device: cpu, cuda, cuda:N")->group("Execution");

  const char* d = "Distributed";
  cmd->add_option("--workers", o.workers, "Worker processes (train: started on this machine)")->group(d);
  cmd->add_option("--density", o.density, "Fraction of each gradient bucket sent per step")->group(d);
  cmd->add_option("--sparsifier", o.sparsifier, "block, topk or randomk")->group(d);
  cmd->add_option("--value-encoding", o.value_encoding, "Gradient values on the wire: fp32, fp16, bf16")->group(d);
  cmd->add_option("--staleness", o.staleness, "0 or 1: forward t uses the parameters after t-1-staleness")->group(d);
  cmd->add_option("--bucket-mb", o.bucket_mb, "Gradient bucket size in MB of fp32")->group(d);
  cmd->add_option("--cpu-threads", o.cpu_threads, "CPU pipeline threads per worker")->group(d);
  cmd->add_option("--exchange", o.exchange, "auto, flat or hierarchical")->group(d);
  cmd->add_option("--timeout-s", o.timeout_s, "Bound on every network wait, seconds")->group(d);
  cmd->add_option("--checksum-every", o.checksum_every, "Compare replica checksums every N steps (0 = at the end)")->group(d);
  cmd->add_option("--dgc-momentum", o.dgc_momentum, "Error-feedback momentum correction (0 = off)")->group(d);
  cmd->add_option("--adapt", o.adapt, "on: controller picks density and batch sizes; batch: batch sizes only; off")->group(d);
  cmd->add_option("--decide-every", o.decide_every, "Steps between controller decisions")->group(d);
  cmd->add_option("--compute-slowdown", o.compute_slowdown, "Stretch this worker's compute (experiments)")->group(d);
  cmd->add_option("--cluster", o.cluster, "This worker's cluster name")->group(d);
  cmd->add_option("--coordinator", o.coordinator, "Coordinator address tcp://HOST:PORT (frugal worker)")->group(d);
  cmd->add_option("--rank", o.rank, "This worker's rank (-1: assigned)")->group(d);
  cmd->add_option("--listen", o.listen, "Where this worker receives, e.g. tcp://0.0.0.0:*")->group(d);
  cmd->add_option("--advertise-host", o.advertise_host, "Host peers connect to when --listen is a wildcard")->group(d);
}

void PrintResult(const train::TrainResult& r) {
  std::printf("done: %lld steps, %lld epochs, test accuracy %.2f%%, %.1f s, %.0f samples/s\n",
              static_cast<long long>(r.steps), static_cast<long long>(r.epochs_completed),
              100.0 * r.final_test_accuracy, r.wall_time_s, r.samples_per_s);
  if (!r.metrics_path.empty()) std::printf("metrics: %s\n", r.metrics_path.c_str());
}

std::string DefaultRunName(const std::string& model) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return model + "-" + buf;
}

// frugal train --workers N: write the resolved options to the run directory
// and start N `frugal worker` processes that read them.
void LaunchLocal(CLI::App* cmd, train::TrainOptions& o, const std::string& local_clusters,
                 const std::string& local_slowdowns) {
  if (o.run_name.empty()) {
    o.run_name = DefaultRunName(o.model);
    cmd->get_option("--run-name")->add_result(o.run_name);
  }
  std::filesystem::path dir = std::filesystem::path(o.runs_dir) / o.run_name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError("cannot create run directory " + dir.string() + ": " + ec.message());
  std::string config_path = (dir / "config.toml").string();
  {
    std::ofstream out(config_path);
    out << ResolvedConfig(cmd);
    if (!out) throw RunError("cannot write " + config_path);
  }
  engine::LocalLaunchOptions lo;
  lo.workers = o.workers;
  lo.worker_args = {"--config", config_path};
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  lo.threads_per_worker = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, cores / static_cast<unsigned>(o.workers)));
  lo.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  std::stringstream ss(local_clusters);
  for (std::string c; std::getline(ss, c, ',');) lo.clusters.push_back(c);
  std::stringstream sl(local_slowdowns);
  for (std::string v; std::getline(sl, v, ',');) {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(x >= 1.0)) {
      throw UsageError("--local-slowdowns: '" + v + "' is not a factor >= 1");
    }
    lo.slowdowns.push_back(v);
  }
  ThrowIfError(engine::RunLocalWorkers(lo));
}

}  // namespace

void AddTrainCommand(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model (default: mlp on Fashion-MNIST)");
  AddConfigOption(cmd);
  BindTrainOptions(cmd, flags->options);
  cmd->add_option("--local-clusters", flags->local_clusters,
                  "Comma-separated cluster of each local worker, e.g. a,a,b,b (default: one cluster)")
      ->group("Distributed");
  cmd->add_option("--local-slowdowns", flags->local_slowdowns,
                  "Comma-separated --compute-slowdown of each local worker, e.g. 1,2,1,1")
      ->group("Distributed");
  cmd->callback([cmd, flags] {
    if (ApplyConfigAndMaybePrint(cmd)) return;
    ThrowIfError(flags->options.Validate());
    if (flags->options.workers > 1) {
      if (flags->options.dataset == "fashion-mnist") ThrowIfError(data::CheckFashionMnistFiles(flags->options.data_dir));
      LaunchLocal(cmd, flags->options, flags->local_clusters, flags->local_slowdowns);
      return;
    }
    auto trainer = train::Trainer::Create(flags->options);
    ThrowIfError(trainer.status());
    auto result = (*trainer)->Run();
    ThrowIfError(result.status());
    PrintResult(*result);
  });

  // frugal worker: one rank of a distributed run, joining a coordinator.
  auto wflags = std::make_shared<TrainFlags>();
  CLI::App* wcmd = app.add_subcommand("worker", "Run one worker of a distributed run (joins --coordinator)");
  AddConfigOption(wcmd);
  BindTrainOptions(wcmd, wflags->options);
  wcmd->callback([wcmd, wflags] {
    if (ApplyConfigAndMaybePrint(wcmd)) return;
    train::TrainOptions& o = wflags->options;
    ThrowIfError(o.Validate());
    if (o.coordinator.empty()) throw UsageError("frugal worker needs --coordinator tcp://HOST:PORT");
    comm::JoinOptions jo;
    jo.rendezvous = o.coordinator;
    jo.rank = o.rank;
    jo.cluster = o.cluster;
    jo.listen = o.listen;
    jo.advertise_host = o.advertise_host;
    jo.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    auto transport = comm::JoinZmqWorld(jo);
    if (!transport.ok()) throw RunError(transport.status().WithContext("joining " + o.coordinator).ToString());
    int rank = (*transport)->rank();
    std::unique_ptr<engine::AdaptationPolicy> policy;
    if (o.adapt != "off" && rank == 0) {
      control::ControllerOptions co;
      co.adapt_density = o.adapt == "on";
      co.model = o.model;
      co.batch_per_worker = o.batch_size;
      co.staleness = o.staleness;
      const comm::Topology& topo = (*transport)->topology();
      for (int c = 0; c < topo.num_clusters(); ++c) co.cluster_sizes.push_back(static_cast<int>(topo.members(c).size()));
      // Wire bytes per selected value: the value plus its share of the index
      // (one u32 per 16-value block, or ~2 bytes of varint otherwise).
      double value_bytes = o.value_encoding == "fp32" ? 4.0 : 2.0;
      co.bytes_per_value = value_bytes + (o.sparsifier == "block" ? 0.25 : 2.0);
      auto controller = control::BandwidthController::Create(co);
      ThrowIfError(controller.status());
      policy = std::move(*controller);
    }
    auto worker = engine::Worker::Create(o, std::move(*transport), std::move(policy));
    if (!worker.ok()) {
      throw RunError(worker.status().WithContext("worker " + std::to_string(rank)).ToString());
    }
    auto result = (*worker)->Run();
    if (!result.ok()) throw RunError(result.status().WithContext("worker " + std::to_string(rank)).ToString());
    if (rank == 0 && !o.quiet) {
      PrintResult(result->train);
      const auto& r = *result;
      double steps = std::max<double>(1, r.train.steps);
      std::printf("per step: compute %.3f s, wait %.3f s, sparsify %.3f s, exchange %.3f s, optimizer %.3f s; "
                  "sent %.0f KB intra + %.0f KB inter-cluster\n",
                  r.compute_s / steps, r.wait_s / steps, r.sparsify_s / steps, r.exchange_s / steps,
                  r.optimizer_s / steps, r.traffic.intra_cluster.bytes_sent / steps / 1e3,
                  r.traffic.inter_cluster.bytes_sent / steps / 1e3);
    }
  });
}

}  // namespace frugal::cli
