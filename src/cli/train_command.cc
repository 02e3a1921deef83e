// `frugal train`: binds every TrainOptions field to a flag (and TOML key) and
// runs frugal::train::Trainer.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "commands.h"
#include "field_binding.h"
#include "input_checks.h"
#include "frugal/comm/membership/rendezvous.h"
#include "frugal/control/bandwidth_controller.h"
#include "frugal/sim/workload.h"
#include "frugal/data/dataset.h"
#include "frugal/data/text_corpus.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/checkpoint_manifest.h"
#include "frugal/engine/launcher.h"
#include "frugal/engine/run_config.h"
#include "frugal/comm/membership/membership.h"
#include "frugal/engine/worker.h"
#include "frugal/train/trainer.h"

namespace frugal::cli {

namespace {

struct TrainFlags {
  engine::RunConfig config;
  std::string local_clusters;
  std::string local_slowdowns;
  std::string resume;  // a run directory to continue
  bool print_plan = false;
};

// --resume runs/<run>: the run's own config.toml (flags still override), and
// its newest checkpoint whose every rank file reads back intact; a corrupt
// one is reported and the previous one used.
void PrepareResume(CLI::App* cmd, const std::string& run_dir) {
  const std::string config_path = (std::filesystem::path(run_dir) / "config.toml").string();
  if (!std::filesystem::exists(config_path)) {
    throw UsageError("--resume " + run_dir + ": not a run directory (no config.toml)");
  }
  CLI::Option* config = cmd->get_option("--config");
  if (config->count() == 0) config->add_result(config_path);
}

// With {cluster} in --checkpoint-dir, the directories of this launch's
// clusters (--local-clusters) are searched (Note [Per-site checkpoints]).
std::string NewestIntactCheckpoint(const engine::RunConfig& config, const std::string& local_clusters) {
  const std::string& pattern = config.checkpoint.checkpoint_dir;
  const bool per_site = engine::IsPerSiteCheckpointDir(pattern);
  const std::string dir = per_site ? pattern : engine::CheckpointDirOf(config);
  std::vector<std::string> skipped;
  Result<std::string> step = Status::NotFound("");
  if (per_site) {
    std::vector<std::string> clusters;
    std::stringstream ss(local_clusters.empty() ? config.worker.cluster : local_clusters);
    for (std::string c; std::getline(ss, c, ',');) {
      if (std::find(clusters.begin(), clusters.end(), c) == clusters.end()) clusters.push_back(c);
    }
    step = engine::NewestIntactSiteCheckpoint(pattern, clusters, &skipped);
  } else {
    step = engine::NewestIntactCheckpoint(dir, &skipped);
  }
  for (const std::string& why : skipped) std::fprintf(stderr, "frugal: skipping checkpoint %s\n", why.c_str());
  if (step.ok()) return *step;
  throw UsageError("no intact checkpoint in " + dir + " (write them with --checkpoint-every N)");
}

void BindTrainOptions(CLI::App* cmd, engine::RunConfig& config) {
  cmd->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  engine::VisitFields(config, FlagBinder{cmd});
}

void PrintResult(const train::TrainResult& r) {
  std::printf("done: %lld steps, %lld epochs, test accuracy %.2f%%, %.1f s, %.0f samples/s\n",
              static_cast<long long>(r.steps), static_cast<long long>(r.epochs_completed),
              100.0 * r.final_test_accuracy, r.wall_time_s, r.samples_per_s);
  if (r.final_val_loss >= 0) {
    std::printf("validation loss %.4f nats/byte, %.4f bits per character\n", r.final_val_loss,
                r.final_val_loss / std::log(2.0));
  }
  if (!r.metrics_path.empty()) std::printf("metrics: %s\n", r.metrics_path.c_str());
}

std::string DefaultRunName(const std::string& model) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return model + "-" + buf;
}

// SIGINT or SIGTERM to `frugal train` stops its workers too (without this a
// `kill` of the launcher left four workers training on); the handler only
// stores to a lock-free flag that the supervisor polls.
std::atomic<bool> g_stop_launch{false};
extern "C" void OnStopLaunch(int) { g_stop_launch.store(true); }

// frugal train --workers N: write the resolved options to the run directory
// and start N `frugal worker` processes that read them.
void LaunchLocal(engine::RunConfig& config, const std::string& local_clusters, const std::string& local_slowdowns) {
  train::TrainOptions& o = config.train;
  if (o.run_name.empty()) o.run_name = DefaultRunName(o.model);
  std::filesystem::path dir = std::filesystem::path(o.runs_dir) / o.run_name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError("cannot create run directory " + dir.string() + ": " + ec.message());
  std::string config_path = (dir / "config.toml").string();
  {
    std::ofstream out(config_path);
    out << engine::ToToml(config);
    if (!out) throw RunError("cannot write " + config_path);
  }
  engine::LocalLaunchOptions lo;
  lo.workers = config.distributed.workers;
  lo.worker_args = {"--config", config_path};
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  lo.threads_per_worker = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, cores / static_cast<unsigned>(config.distributed.workers)));
  lo.timeout = engine::TimeoutOf(config.distributed);
  lo.elastic = config.elastic.elastic;
  lo.min_workers = config.elastic.min_workers;
  lo.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.elastic.heartbeat_timeout_s * 1000));
  lo.link_grace = engine::LinkGraceOf(config.distributed);
  std::stringstream ss(local_clusters);
  for (std::string c; std::getline(ss, c, ',');) lo.clusters.push_back(c);
  if (!lo.clusters.empty() && static_cast<int>(lo.clusters.size()) != lo.workers) {
    throw UsageError("--local-clusters names " + std::to_string(lo.clusters.size()) + " clusters for " +
                     std::to_string(lo.workers) + " workers");
  }
  std::stringstream sl(local_slowdowns);
  for (std::string v; std::getline(sl, v, ',');) {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(x >= 1.0)) {
      throw UsageError("--local-slowdowns: '" + v + "' is not a factor >= 1");
    }
    lo.slowdowns.push_back(v);
  }
  lo.stop = &g_stop_launch;
  struct sigaction stop = {}, old_int = {}, old_term = {};
  stop.sa_handler = OnStopLaunch;
  sigemptyset(&stop.sa_mask);
  sigaction(SIGINT, &stop, &old_int);
  sigaction(SIGTERM, &stop, &old_term);
  Status status = engine::RunLocalWorkers(lo, Env::Default());
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  ThrowIfError(status);
}

// Applies --config, prints the configuration with --print-config (returns
// true), and validates it once, here at the edge.
bool ResolveConfig(CLI::App* cmd, const engine::RunConfig& config) {
  if (ApplyConfigAndMaybePrint(cmd, [&config] { return engine::ToToml(config); })) return true;
  ThrowIfError(engine::Validate(config));
  return false;
}

// The facts of this host that --adapt auto and --cpu-threads auto follow
// (Note [One resolver] in run_config.h).
engine::HostFacts FactsOf(const engine::RunConfig& config, int workers_on_host) {
  engine::HostFacts facts;
  facts.workers_on_host = workers_on_host;
  facts.controller_available = sim::BuiltinModel(config.train.model).ok();
  return facts;
}

// frugal train: the plan resolved once here (ResolvePlan), so the workers'
// config.toml names what they run; --sync auto's choice is said, with the
// flag that picks the other one.
void ResolveLaunchPlan(engine::RunConfig& config) {
  const bool chosen = config.distributed.sync == engine::SyncMode::kAuto;
  config = engine::ResolvePlan(config, FactsOf(config, config.distributed.workers));
  if (!chosen || config.train.quiet) return;
  if (engine::IsLocalUpdates(config.distributed.sync)) {
    std::printf("sync: local updates, exchanged every %lld steps (--sync auto; --sync step exchanges gradients "
                "every step)\n",
                static_cast<long long>(config.distributed.local_steps));
  } else {
    std::printf("sync: gradients every step (--sync auto, for the options given; --sync local exchanges every "
                "--local-steps steps)\n");
  }
  std::fflush(stdout);  // before the workers' output
}

std::unique_ptr<engine::AdaptationPolicy> MakeController(const engine::RunConfig& config, const comm::Topology& topo) {
  control::ControllerOptions co;
  co.adapt_density = config.distributed.adapt == engine::AdaptMode::kOn;
  co.model = config.train.model;
  const int64_t world = topo.world_size();
  co.batch_per_worker = config.train.global_batch > 0 ? std::max<int64_t>(1, config.train.global_batch / world)
                                                      : config.train.batch_size;
  co.staleness = config.distributed.staleness;
  co.pipeline_threads = engine::ResolveCpuThreads(config, 1);  // as the Replica resolves it (replica.cc)
  co.density_exponent = config.distributed.adapt_density_exponent;
  for (int c = 0; c < topo.num_clusters(); ++c) co.cluster_sizes.push_back(static_cast<int>(topo.members(c).size()));
  co.bytes_per_value = engine::WireBytesPerValue(config.distributed);
  co.merged_bytes_per_value = engine::MergedWireBytesPerValue(config.distributed);
  auto controller = control::BandwidthController::Create(co);
  ThrowIfError(controller.status());
  return std::move(*controller);
}

void PrintWorkerSummary(const engine::WorkerResult& r) {
  PrintResult(r.train);
  double steps = std::max<double>(1, r.train.steps);
  std::printf("per step: compute %.3f s, wait %.3f s, sparsify %.3f s, exchange %.3f s, optimizer %.3f s; "
              "sent %.0f KB intra + %.0f KB inter-cluster\n",
              r.compute_s / steps, r.wait_s / steps, r.sparsify_s / steps, r.exchange_s / steps, r.optimizer_s / steps,
              r.traffic.intra_cluster.bytes_sent / steps / 1e3, r.traffic.inter_cluster.bytes_sent / steps / 1e3);
}

// SIGTERM makes an elastic worker leave the job gracefully; the handler
// only stores to the worker's lock-free flag.
std::atomic<bool>* g_leave_signal = nullptr;
extern "C" void OnTerminate(int) {
  if (g_leave_signal != nullptr) g_leave_signal->store(true);
}

void PrintWorkerEnd(const engine::RunConfig& config, const engine::WorkerResult& r) {
  if (r.left) {
    std::printf("left the job in generation %lld (rank %d)\n", static_cast<long long>(r.generation), r.rank);
  } else if (r.rank == 0 && !config.train.quiet) {
    PrintWorkerSummary(r);
  }
  if (config.elastic.elastic && !r.left) {
    std::printf("worker done: generation %lld rank %d checksum %016llx\n", static_cast<long long>(r.generation),
                r.rank, static_cast<unsigned long long>(r.final_checksum));
  }
  std::fflush(stdout);
}

void RunElasticWorker(const engine::RunConfig& config, const comm::SecurityOptions& security) {
  const engine::WorkerIdentity& id = config.worker;
  comm::MembershipClientOptions mo;
  mo.server = id.coordinator;
  mo.cluster = id.cluster;
  mo.listen = id.listen;
  mo.advertise_host = id.advertise_host;
  mo.join = config.elastic.join;
  // A join that would leave a worker without a sample of the global batch
  // is refused by the coordinator, instead of failing the running job.
  mo.max_world = static_cast<int>(std::min<int64_t>(config.train.global_batch, 1 << 30));
  mo.rank = id.rank;
  mo.timeout = engine::TimeoutOf(config.distributed);
  mo.zmq.security = security;
  mo.zmq.link_grace = engine::LinkGraceOf(config.distributed);
  // A worker killed mid-run is noticed by its peers within a second; the
  // coordinator's heartbeats decide what happens next.
  mo.zmq.linger = std::chrono::milliseconds(1000);
  auto client = comm::MembershipClient::Create(mo);
  ThrowIfError(client.status());
  auto worker = engine::Worker::CreateElastic(config, std::move(*client));
  if (!worker.ok()) throw RunError(worker.status().WithContext("worker").ToString());
  g_leave_signal = &(*worker)->leave_signal();
  std::signal(SIGTERM, OnTerminate);
  auto result = (*worker)->Run();
  std::signal(SIGTERM, SIG_DFL);
  g_leave_signal = nullptr;
  if (!result.ok()) throw RunError(result.status().WithContext("elastic worker").ToString());
  PrintWorkerEnd(config, *result);
}

void RunWorker(engine::RunConfig config) {
  // Every rank resolves the plan from the shared configuration and its own
  // host, so all agree (the digest check compares the resolved plan).
  config = engine::ResolvePlan(config, FactsOf(config, 1));
  const engine::WorkerIdentity& id = config.worker;
  if (id.coordinator.empty()) throw UsageError("frugal worker needs --coordinator tcp://HOST:PORT");
  const comm::SecurityOptions security = ResolveSecurity(id.key, id.authorized_keys, id.insecure, id.coordinator);
  if (config.elastic.elastic) return RunElasticWorker(config, security);
  if (config.elastic.join) throw UsageError("--join joins an elastic job: add --elastic");
  comm::JoinOptions jo;
  jo.rendezvous = id.coordinator;
  jo.rank = id.rank;
  jo.cluster = id.cluster;
  jo.listen = id.listen;
  jo.advertise_host = id.advertise_host;
  jo.timeout = engine::TimeoutOf(config.distributed);
  jo.zmq.security = security;
  jo.zmq.link_grace = engine::LinkGraceOf(config.distributed);
  auto transport = comm::JoinZmqWorld(jo);
  if (!transport.ok()) throw RunError(transport.status().WithContext("joining " + id.coordinator).ToString());
  const int rank = (*transport)->rank();
  std::unique_ptr<engine::AdaptationPolicy> policy;
  if (config.distributed.adapt != engine::AdaptMode::kOff && rank == 0) {  // resolved: on or batch
    policy = MakeController(config, (*transport)->topology());
  }
  auto worker = engine::Worker::Create(config, std::move(*transport), std::move(policy));
  if (!worker.ok()) throw RunError(worker.status().WithContext("worker " + std::to_string(rank)).ToString());
  auto result = (*worker)->Run();
  if (!result.ok()) throw RunError(result.status().WithContext("worker " + std::to_string(rank)).ToString());
  result->rank = rank;
  PrintWorkerEnd(config, *result);
}

}  // namespace

void AddTrainCommand(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model (default: mlp on Fashion-MNIST)");
  AddConfigOption(cmd);
  BindTrainOptions(cmd, flags->config);
  cmd->add_option("--local-clusters", flags->local_clusters,
                  "Comma-separated cluster of each local worker, e.g. a,a,b,b (default: one cluster)")
      ->group("Distributed");
  cmd->add_option("--local-slowdowns", flags->local_slowdowns,
                  "Comma-separated --compute-slowdown of each local worker, e.g. 1,2,1,1")
      ->group("Distributed");
  cmd->add_option("--resume", flags->resume,
                  "Continue the run in this directory (runs/<run>) from its newest intact checkpoint; "
                  "flags override its config, e.g. --workers for an elastic restart")
      ->group("Checkpoints");
  cmd->add_flag("--print-plan", flags->print_plan,
                 "Print the configuration with every auto resolved as this run would take it, and exit");
  cmd->callback([cmd, flags] {
    engine::RunConfig& config = flags->config;
    if (!flags->resume.empty()) PrepareResume(cmd, flags->resume);
    if (ResolveConfig(cmd, config)) return;
    if (flags->print_plan) {
      std::printf("%s", engine::ToToml(engine::ResolvePlan(config, FactsOf(config, config.distributed.workers))).c_str());
      return;
    }
    if (!flags->resume.empty()) {
      config.checkpoint.resume_from = NewestIntactCheckpoint(config, flags->local_clusters);
      std::printf("resuming from %s\n", config.checkpoint.resume_from.c_str());
    }
    if (config.distributed.workers == 1 && !(flags->local_clusters.empty() && flags->local_slowdowns.empty())) {
      throw UsageError("--local-clusters and --local-slowdowns describe several local workers: use --workers 2 or more");
    }
    const bool checkpoints = config.checkpoint.checkpoint_every > 0 || !config.checkpoint.resume_from.empty();
    if (checkpoints && config.distributed.workers == 1) {
      throw UsageError("checkpoints are written by the distributed engine: use --workers 2 or more");
    }
    if (config.distributed.workers > 1) {
      ResolveLaunchPlan(config);
      if (config.train.dataset == train::DatasetKind::kFashionMnist) {
        ThrowIfError(data::CheckFashionMnistFiles(config.train.data_dir));
      }
      if (config.train.dataset == train::DatasetKind::kText) {
        ThrowIfError(data::ReadTextCorpus(config.train.text_file).status());
      }
      LaunchLocal(config, flags->local_clusters, flags->local_slowdowns);
      return;
    }
    auto trainer = train::Trainer::Create(config.train);
    ThrowIfError(trainer.status());
    auto result = (*trainer)->Run();
    ThrowIfError(result.status());
    PrintResult(*result);
  });

  // frugal worker: one rank of a distributed run, joining a coordinator.
  auto wflags = std::make_shared<TrainFlags>();
  CLI::App* wcmd = app.add_subcommand("worker", "Run one worker of a distributed run (joins --coordinator)");
  AddConfigOption(wcmd);
  BindTrainOptions(wcmd, wflags->config);
  wcmd->callback([wcmd, wflags] {
    if (ResolveConfig(wcmd, wflags->config)) return;
    const engine::RunConfig& c = wflags->config;
    CheckWorkerFlags(wcmd, c.worker.coordinator, c.worker.listen, c.worker.rank, c.distributed.workers);
    RunWorker(wflags->config);
  });
}

}  // namespace frugal::cli
