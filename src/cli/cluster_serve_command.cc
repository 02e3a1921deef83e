// `frugal cluster serve|agent|submit|jobs|status|cancel|nodes|events`: the
// live elastic cluster service (docs/guide/cluster.md). Thin: flags ->
// options -> frugal::cluster classes.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <toml.hpp>

#include "frugal/common/env.h"
#include "cluster_prior.h"
#include "commands.h"
#include "input_checks.h"
#include "frugal/cluster/agent.h"
#include "frugal/cluster/client.h"
#include "frugal/cluster/cluster_manager.h"
#include "frugal/cluster/http_server.h"
#include "frugal/cluster/job_file.h"
#include "frugal/cluster/slurm_backend.h"
#include "frugal/common/file.h"
#include "frugal/sched/policy.h"
#ifdef FRUGAL_HAVE_SIM
#include "frugal/sim/hardware.h"
#endif

namespace frugal::cli {
namespace {

using nlohmann::json;

// Set by SIGINT/SIGTERM. A signal handler can only reach a global; nothing
// else in the process reads it.
std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }
void InstallStopHandlers() {
  g_stop = false;
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string ReadToken(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in) throw UsageError("--token-file " + path + ": cannot read it");
  std::string token;
  std::getline(in, token);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.size() < 16) throw UsageError("--token-file " + path + ": the token must be at least 16 characters");
  return token;
}

struct ClientFlags {
  std::string server = "127.0.0.1:8470";
  std::string token_file;
  double timeout_s = 10;
};

void AddClientFlags(CLI::App* cmd, ClientFlags* f) {
  cmd->add_option("--server", f->server, "Cluster server, http://HOST:PORT or HOST:PORT")->capture_default_str();
  cmd->add_option("--token-file", f->token_file, "File holding the server's bearer token (first line)");
  cmd->add_option("--timeout-s", f->timeout_s, "Bound on each request, seconds")
      ->capture_default_str()
      ->check(Bounded(0.1, 3600));
}

std::unique_ptr<cluster::ClusterClient> MakeClient(const ClientFlags& f) {
  auto client = cluster::ClusterClient::Create(f.server, ReadToken(f.token_file), f.timeout_s);
  ThrowIfError(client.status());
  return std::move(*client);
}

// ---- serve ------------------------------------------------------------------

struct ServeFlags {
  std::string listen = "127.0.0.1:8470";
  std::string state;
  std::string policy = "afs-p";
  std::string token_file;
  bool insecure = false;
  double round_s = 5;
  double node_timeout_s = 10;
  int checkpoint_every = 20;
  int max_restarts = 3;
  std::string controller = "elastic";
  int max_nodes_per_job = 1;
  double realloc_cost = -1;  // < 0: the default (Note [Live switch cost])
  double contended_horizon = 60;
  double tiresias_threshold = sched::PolicyOptions{}.tiresias_threshold_gpu_seconds;
  std::string prior_hardware;  // Empty: no planner prior.
  bool calibrate_prior = false;
  bool insecure_jobs = false;
  std::string backend = "agents";
  cluster::SlurmOptions slurm;
};

// Note [Live switch cost]
// The policies weigh a resize against the seconds the job loses to it
// (Note [Switch cost] in src/sched/afs_policy.cc); --realloc-cost sets it.
// The default follows the controller: a restart costs a job the simulator's
// 30 s (process start, checkpoint load, steps redone); an elastic resize
// stalls it only for `switch_s`, 0.1-4.5 s measured (docs/guide/cluster.md),
// so it is priced at 5 s. These are starting values: without --realloc-cost
// the server replaces them by what its own jobs' resizes cost
// (Note [Measured resize cost] in src/cluster/cluster_manager.cc).
double ReallocationCost(const ServeFlags& f) {
  if (f.realloc_cost >= 0) return f.realloc_cost;
  return f.controller == "restart" ? 30.0 : 5.0;
}

// --controller picks how jobs run: elastic, `frugal train` jobs as
// `frugal worker --elastic` members and command jobs as `frugal run
// --elastic` members, both resized in place (Note [Elastic command jobs] in
// src/cluster/elastic_controller.cc); restart, each job one process group
// restarted at every resize (`frugal train`, or `frugal run` for a command
// job: Note [Command jobs] in src/cluster/command_controller.cc).
std::unique_ptr<cluster::JobController> MakeController(const ServeFlags& f) {
  if (f.controller == "restart") {
    cluster::RestartControllerOptions co;
    co.checkpoint_every = f.checkpoint_every;
    return cluster::NewMixedJobController(cluster::NewRestartJobController(co), cluster::NewCommandJobController());
  }
  cluster::ElasticControllerOptions eo;
  eo.checkpoint_every = f.checkpoint_every;
  eo.max_nodes_per_job = f.max_nodes_per_job;
  return cluster::NewElasticJobController(eo);
}

// --prior-hardware: the planner's prediction of each job on that hardware
// is the throughput prior (Note [Live throughput prior]).
cluster::SpeedPriorFactory MakeSpeedPrior(const ServeFlags& f) {
  if (f.prior_hardware.empty()) return nullptr;
#if defined(FRUGAL_HAVE_SIM) && defined(FRUGAL_WITH_TORCH)
  Result<sim::HardwareSpec> hw = sim::LoadHardware(f.prior_hardware);
  if (!hw.ok()) throw UsageError("--prior-hardware: " + hw.status().message());
  return PlannerSpeedPrior(*hw, f.controller == "elastic");
#else
  throw UsageError("--prior-hardware needs a frugal built with the planner and LibTorch");
#endif
}

std::string SelfPath() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, n) : "";
}

// --backend slurm: the partition's nodes run the jobs (Note [Slurm backend]).
std::unique_ptr<cluster::SlurmBackend> MakeSlurmBackend(const ServeFlags& f, cluster::ClusterManager& manager) {
  if (f.backend != "slurm") return nullptr;
  cluster::SlurmOptions so = f.slurm;
  if (so.frugal_binary.empty()) so.frugal_binary = SelfPath();
  auto backend = cluster::SlurmBackend::Create(manager, so);
  if (!backend.ok() && backend.status().code() == Status::Code::kInvalidArgument) {
    throw UsageError("--backend slurm: " + backend.status().message());
  }
  if (!backend.ok()) throw RunError("--backend slurm: " + backend.status().message());
  return std::move(*backend);
}

void RunServe(const ServeFlags& f) {
  const size_t colon = f.listen.rfind(':');
  if (colon == std::string::npos) throw UsageError("--listen must be HOST:PORT, got '" + f.listen + "'");
  cluster::ServerOptions so;
  so.host = f.listen.substr(0, colon);
  try {
    so.port = std::stoi(f.listen.substr(colon + 1));
  } catch (const std::exception&) {
    so.port = -1;
  }
  if (so.port < 0 || so.port > 65535) throw UsageError("--listen port must be in [0, 65535], got '" + f.listen + "'");
  so.token = ReadToken(f.token_file);
  if (so.token.empty() && !f.insecure && !cluster::IsLoopbackHost(so.host)) {
    throw UsageError("serving on " + so.host + " needs --token-file FILE (a random line, e.g. from "
                     "'head -c 24 /dev/urandom | base64'; agents and clients pass the same file), or --insecure "
                     "on a trusted network");
  }
  cluster::ManagerOptions mo;
  mo.speed_prior = MakeSpeedPrior(f);  // Before the store: a bad --prior-hardware creates no database.
  auto store = cluster::StateStore::Open(f.state);
  ThrowIfError(store.status());
  mo.policy = f.policy;
  mo.round_interval_s = f.round_s;
  mo.node_timeout_s = f.node_timeout_s;
  mo.max_restarts = f.max_restarts;
  mo.policy_options.reallocation_cost = ReallocationCost(f);
  mo.learn_resize_cost = f.realloc_cost < 0;
  mo.calibrate_prior = f.calibrate_prior;
  mo.insecure_jobs = f.insecure_jobs;
  mo.policy_options.contended_horizon = f.contended_horizon;
  mo.policy_options.tiresias_threshold_gpu_seconds = f.tiresias_threshold;
  auto manager = cluster::ClusterManager::Open(std::move(*store), MakeController(f), Env::Default(), mo);
  if (!manager.ok()) throw UsageError(manager.status().message());
  std::unique_ptr<cluster::SlurmBackend> slurm = MakeSlurmBackend(f, **manager);
  InstallStopHandlers();
  auto server = cluster::ClusterServer::Start(**manager, so);
  if (!server.ok()) throw RunError(server.status().message());
  std::thread slurm_thread;
  if (slurm) slurm_thread = std::thread([&] { slurm->Run(g_stop); });
  std::printf("frugal cluster: serving on http://%s:%d (policy %s, %s jobs, resize cost %g s, state %s%s%s)\n",
              so.host.c_str(), (*server)->port(), f.policy.c_str(), f.controller.c_str(),
              mo.policy_options.reallocation_cost, f.state.c_str(),
              f.prior_hardware.empty() ? "" : (", planner prior on " + f.prior_hardware).c_str(),
              slurm ? (", Slurm runs the jobs" + (f.slurm.partition.empty() ? "" : " in partition " + f.slurm.partition)).c_str() : "");
  std::fflush(stdout);
  while (!g_stop.load() && (*server)->error().ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Status error = (*server)->error();
  g_stop = true;
  if (slurm_thread.joinable()) slurm_thread.join();
  (*server)->Stop();
  if (!error.ok()) throw RunError("cluster server: " + error.message());
}

void AddSlurmFlags(CLI::App* cmd, ServeFlags* f) {
  cmd->add_option("--backend", f->backend,
                  "agents: hosts run `frugal cluster agent`; slurm: Slurm launches the workers on its nodes "
                  "(sbatch/scancel; the server needs Slurm's client commands)")
      ->capture_default_str()->check(CLI::IsMember({"agents", "slurm"}));
  cmd->add_option("--slurm-partition", f->slurm.partition, "Slurm: the partition whose nodes the server schedules "
                  "(default: the cluster's default partition)");
  cmd->add_option("--slurm-slots-per-node", f->slurm.slots_per_node,
                  "Slurm: slots of each node (default: its GPUs, or its CPUs without GPUs)")
      ->check(Bounded(1, 1024));
  cmd->add_option("--work-dir", f->slurm.work_dir,
                  "Slurm: task configs, logs and runs/, on a file system the nodes share")->capture_default_str();
  cmd->add_option("--host", f->slurm.host,
                  "Slurm: the address of this host that the nodes reach (elastic coordinators listen on it)")
      ->capture_default_str();
  cmd->add_option("--frugal", f->slurm.frugal_binary,
                  "Slurm: the frugal executable the nodes run (same path on every node; default: this one)");
  cmd->add_option("--slurm-job-prefix", f->slurm.job_prefix,
                  "Slurm: job names are this plus the task id; a restarted server adopts the jobs it finds by "
                  "them, so two servers under one Slurm user need different prefixes")
      ->capture_default_str();
}

void AddServe(CLI::App* cluster) {
  auto f = std::make_shared<ServeFlags>();
  auto* cmd = cluster->add_subcommand("serve", "Run the live cluster server: HTTP API, dashboard at /, SQLite state");
  cmd->add_option("--listen", f->listen, "HOST:PORT (port 0: any free port)")->capture_default_str();
  cmd->add_option("--state", f->state, "SQLite database of the cluster state (created if missing)")->required();
  cmd->add_option("--policy", f->policy, "Scheduling policy: afs-p, afs-goodput, afs-l, tiresias, optimus or fifo")
      ->capture_default_str();
  cmd->add_option("--token-file", f->token_file, "Bearer token that POST requests (agents, submit) must carry");
  cmd->add_flag("--insecure", f->insecure, "Serve off loopback without a token (trusted network only)");
  cmd->add_option("--round-s", f->round_s, "Seconds between scheduling rounds")
      ->capture_default_str()->check(Bounded(0.1, 86400));
  cmd->add_option("--node-timeout-s", f->node_timeout_s, "A node without a heartbeat this long is marked down")
      ->capture_default_str()->check(Bounded(1, 86400));
  cmd->add_option("--checkpoint-every", f->checkpoint_every, "Steps between the checkpoints jobs resize from")
      ->capture_default_str()->check(Bounded(1, 1e9));
  cmd->add_option("--max-restarts", f->max_restarts, "Failed runs of a job restarted before it fails")
      ->capture_default_str()->check(Bounded(0, 1000));
  cmd->add_option("--controller", f->controller,
                  "elastic: jobs are resized in place through the elastic membership API; restart: every resize "
                  "restarts the job from its checkpoint")
      ->capture_default_str()->check(CLI::IsMember({"elastic", "restart"}));
  cmd->add_option("--max-nodes-per-job", f->max_nodes_per_job,
                  "Elastic: hosts one job may span (more than 1 needs a work dir the agents share)")
      ->capture_default_str()->check(Bounded(1, 1024));
  cmd->add_flag("--insecure-jobs", f->insecure_jobs,
                "Jobs' processes on non-loopback hosts talk plain TCP (trusted network only); default: CURVE with "
                "a key pair per job, handed to the agents");
  cmd->add_option("--realloc-cost", f->realloc_cost,
                  "Seconds a resize costs a job, as the policy weighs it (default: 5 elastic, 30 restart, then "
                  "what the cluster's resizes measure)")
      ->check(Bounded(0, 86400));
  cmd->add_option("--contended-horizon", f->contended_horizon,
                  "Seconds over which a resize must pay for its cost while GPUs are contended (afs-p, "
                  "afs-goodput)")
      ->capture_default_str()->check(Bounded(0, 86400));
  cmd->add_option("--tiresias-threshold", f->tiresias_threshold,
                  "Tiresias: slot-seconds of attained service before a job is demoted to the low-priority queue "
                  "(the Pollux artifact's 16 GPU-hours; scale it to the jobs' lengths)")
      ->capture_default_str()->check(Bounded(0, 1e12));
  cmd->add_option("--prior-hardware", f->prior_hardware,
                  "Built-in hardware or TOML file the slots are: the planner's prediction of each job there is "
                  "its throughput before it is measured (default: none)");
  cmd->add_flag("--calibrate-prior", f->calibrate_prior,
                "Scale the prior's predictions by measured / predicted of the cluster's jobs (one scale for all; "
                "off by default: the planner's error depends on the job more than on the cluster)");
  AddSlurmFlags(cmd, f.get());
  cmd->callback([f] { RunServe(*f); });
}

// ---- agent ------------------------------------------------------------------

void AddAgent(CLI::App* cluster) {
  auto cf = std::make_shared<ClientFlags>();
  auto ao = std::make_shared<cluster::AgentOptions>();
  ao->slots = 0;  // Given by --slots, or by --gpus.
  auto* cmd = cluster->add_subcommand("agent", "Run this host's agent: offer --slots to the server, run its tasks");
  AddClientFlags(cmd, cf.get());
  auto gpus = std::make_shared<std::string>();
  cmd->add_option("--slots", ao->slots, "Worker slots this host offers (CPU slots; with --gpus, the GPUs)")
      ->check(Bounded(1, 1024));
  cmd->add_option("--gpus", *gpus,
                  "This host's GPUs as slots, each task given its own as CUDA_VISIBLE_DEVICES: ids (0,1,2,3) "
                  "or auto (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN)");
  cmd->add_option("--name", ao->node, "Node name (default: the host name)");
  cmd->add_option("--work-dir", ao->work_dir, "Task configs, logs and runs/ go here")->capture_default_str();
  cmd->add_option("--host", ao->host, "Address this host's job processes listen on and advertise")
      ->capture_default_str();
  cmd->add_option("--frugal", ao->frugal_binary, "The frugal executable tasks run (default: this one)");
  cmd->add_option("--heartbeat-s", ao->heartbeat_s, "Seconds between heartbeats")
      ->capture_default_str()->check(Bounded(0.05, 600));
  cmd->add_option("--stop-grace-s", ao->stop_grace_s, "SIGTERM to SIGKILL when stopping a task")
      ->capture_default_str()->check(Bounded(0, 3600));
  cmd->callback([cf, ao, gpus] {
    cluster::AgentOptions options = *ao;
    if (!gpus->empty()) {
      Result<std::vector<std::string>> ids = cluster::ParseGpus(*gpus);
      if (!ids.ok()) throw UsageError(ids.status().message());
      options.gpus = std::move(*ids);
    } else if (options.slots == 0) {
      throw UsageError("give --slots N (CPU slots) or --gpus LIST|auto (the host's GPUs)");
    }
    if (options.frugal_binary.empty()) options.frugal_binary = SelfPath();
    auto agent = cluster::Agent::Create(MakeClient(*cf), options);
    if (!agent.ok()) throw UsageError(agent.status().message());
    InstallStopHandlers();
    std::printf("frugal cluster agent: %d slots, server %s\n", options.slots, cf->server.c_str());
    std::fflush(stdout);
    (*agent)->Run(g_stop);
  });
}

// ---- submit and queries ------------------------------------------------------

// job.toml (cluster::ParseJobFile, frugal/cluster/job_file.h): a `frugal
// train` configuration or a command, plus min_workers/max_workers. A train
// job without `profile` gets ProfileOfConfig of its configuration.
cluster::JobSubmission ReadJobFile(const std::string& path) {
  Result<std::string> text = ReadTextFile(path, "job file");
  ThrowIfError(text.status());
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(std::filesystem::path(path), ec).parent_path().string();
  Result<cluster::JobSubmission> job = cluster::ParseJobFile(*text, path, dir);
  if (!job.ok()) throw UsageError(job.status().message());
  if (!job->IsCommand() && job->profile.empty()) {
    std::istringstream in(job->config_toml);
    const toml::value config = toml::parse(in, path);  // Written by ParseJobFile: parses.
    job->profile = ProfileOfConfig(config.as_table());
  }
  return std::move(*job);
}

std::string Fmt(double v, const char* f = "%.0f") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

void PrintJobs(const json& jobs) {
  std::printf("%-4s %-18s %-10s %-8s %-9s %-7s %-5s %s\n", "id", "name", "state", "workers", "range", "step", "gen",
              "message");
  for (const json& j : jobs) {
    std::printf("%-4ld %-18s %-10s %-8d %d-%-7d %-7d %-5ld %s\n", j["id"].get<long>(),
                j["name"].get<std::string>().substr(0, 18).c_str(), j["state"].get<std::string>().c_str(),
                j["workers"].get<int>(), j["min_workers"].get<int>(), j["max_workers"].get<int>(), j["step"].get<int>(),
                j["generation"].get<long>(), j["message"].get<std::string>().c_str());
  }
}

json GetJson(cluster::ClusterClient& c, const std::string& path) {
  Result<std::string> body = c.Get(path);
  ThrowIfError(body.status());
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded()) throw RunError("server answered malformed JSON for " + path);
  return j;
}

void AddQueries(CLI::App* cluster) {
  auto cf = std::make_shared<ClientFlags>();
  auto job_file = std::make_shared<std::string>();
  auto* submit = cluster->add_subcommand("submit", "Submit a job: a frugal train TOML or a command = [...], plus min_workers/max_workers");
  AddClientFlags(submit, cf.get());
  submit->add_option("job", *job_file, "job.toml")->required();
  submit->callback([cf, job_file] {
    cluster::JobSubmission job = ReadJobFile(*job_file);
    Result<int64_t> id = MakeClient(*cf)->Submit(job);
    ThrowIfError(id.status());
    std::printf("submitted job %ld (%s, %d-%d workers)\n", static_cast<long>(*id), job.name.c_str(), job.min_workers,
                job.max_workers);
  });
  auto* jobs = cluster->add_subcommand("jobs", "List the cluster's jobs");
  AddClientFlags(jobs, cf.get());
  jobs->callback([cf] { PrintJobs(GetJson(*MakeClient(*cf), "/api/jobs")); });
  auto id = std::make_shared<long>(0);
  auto* status = cluster->add_subcommand("status", "One job in full (JSON), with its metric samples");
  AddClientFlags(status, cf.get());
  status->add_option("id", *id, "Job id")->required()->check(Bounded(1, 9e15));
  status->callback([cf, id] { std::printf("%s\n", GetJson(*MakeClient(*cf), "/api/jobs/" + std::to_string(*id)).dump(2).c_str()); });
  auto* cancel = cluster->add_subcommand("cancel", "Cancel a job (its workers are stopped)");
  AddClientFlags(cancel, cf.get());
  cancel->add_option("id", *id, "Job id")->required()->check(Bounded(1, 9e15));
  cancel->callback([cf, id] {
    ThrowIfError(MakeClient(*cf)->Post("/api/jobs/" + std::to_string(*id) + "/cancel", "{}").status());
    std::printf("cancelled job %ld\n", *id);
  });
  auto* nodes = cluster->add_subcommand("nodes", "List the nodes and their allocations");
  AddClientFlags(nodes, cf.get());
  nodes->callback([cf] {
    for (const json& n : GetJson(*MakeClient(*cf), "/api/nodes")) {
      std::string allocs;
      for (const json& a : n["allocations"]) allocs += " job" + std::to_string(a["job_id"].get<long>()) + ":" + std::to_string(a["slots"].get<int>());
      std::printf("%-3ld %-20s %-5s %d slots%s\n", n["id"].get<long>(), n["name"].get<std::string>().c_str(),
                  n["up"].get<bool>() ? "up" : "down", n["slots"].get<int>(), allocs.c_str());
    }
  });
  auto after = std::make_shared<long>(0);
  auto* events = cluster->add_subcommand("events", "Print the event log");
  AddClientFlags(events, cf.get());
  events->add_option("--after", *after, "Only events with a larger id")->check(Bounded(0, 9e15));
  events->callback([cf, after] {
    for (const json& e : GetJson(*MakeClient(*cf), "/api/events?after=" + std::to_string(*after))) {
      std::printf("%-5ld %s %-14s job %-3ld %s\n", e["id"].get<long>(), Fmt(e["time"].get<double>(), "%.1f").c_str(),
                  e["kind"].get<std::string>().c_str(), e["job_id"].get<long>(), e["message"].get<std::string>().c_str());
    }
  });
}

}  // namespace

void AddClusterServiceCommands(CLI::App* cluster) {
  AddServe(cluster);
  AddAgent(cluster);
  AddQueries(cluster);
}

}  // namespace frugal::cli
