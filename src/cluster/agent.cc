#include "frugal/cluster/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/cluster/job_controller.h"
#include "frugal/cluster/job_file.h"
#include "frugal/comm/transport/security.h"
#include "process.h"
#include "task_runner.h"

namespace frugal::cluster {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Task {
  TaskSpec spec;
  int64_t handle = 0;  // The runner's.
  bool stopping = false;
  Clock::time_point kill_at;
  std::string endpoint;  // What a reports_endpoint task printed, once seen.
  bool adopted = false;  // Found running at start: spec holds only what its id says until the server lists it.
  std::vector<std::string> devices;  // Its GPUs (Note [Device slots]); held until it exits.
};

// The newest step directory of <runs>/<run>/checkpoints with a COMPLETE
// marker ("step-<n>"), or "" if none.
std::string NewestCompleteCheckpoint(const fs::path& run_dir) {
  std::error_code ec;
  fs::path dir = run_dir / "checkpoints";
  if (!fs::is_directory(dir, ec)) return "";
  long best = -1;
  std::string out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    long step = -1;
    if (std::sscanf(name.c_str(), "step-%ld", &step) != 1 || !fs::exists(entry.path() / "COMPLETE", ec)) continue;
    if (step > best) {
      best = step;
      out = entry.path().string();
    }
  }
  return out;
}

// The endpoint an elastic coordinator printed to its log ("... listening on
// tcp://HOST:PORT ..."), or "".
std::string EndpointInLog(const fs::path& log) {
  std::ifstream in(log);
  std::string line;
  const std::string mark = "listening on ";
  while (std::getline(in, line)) {
    const size_t at = line.find(mark);
    if (at == std::string::npos) continue;
    const size_t from = at + mark.size();
    const size_t to = line.find(' ', from);
    return line.substr(from, to == std::string::npos ? std::string::npos : to - from);
  }
  return "";
}

// One metrics.jsonl record as a sample; false for records without a step.
bool ToSample(const nlohmann::json& r, const TaskSpec& task, MetricSample* m) {
  if (!r.is_object() || !r.contains("step") || !r["step"].is_number()) return false;
  m->job_id = task.job_id;
  m->step = r["step"].get<int>();
  m->workers = r.value("workers", task.workers);
  if (r.contains("batch_sizes") && r["batch_sizes"].is_array()) {
    for (const auto& b : r["batch_sizes"]) m->global_batch += b.is_number() ? b.get<int>() : 0;
  }
  if (r.contains("loss") && r["loss"].is_number()) m->loss = r["loss"].get<double>();
  if (r.contains("test_accuracy") && r["test_accuracy"].is_number()) m->accuracy = r["test_accuracy"].get<double>();
  if (r.contains("samples_per_s") && r["samples_per_s"].is_number()) {
    m->samples_per_s = r["samples_per_s"].get<double>();
  }
  // A DistributedModel's records (a command job's script) carry no
  // batch_sizes, the script choosing its batches; a record's samples per
  // step are then samples_per_s x iter_s (the window's samples over its
  // span, times its span over its steps).
  if (m->global_batch == 0 && m->samples_per_s > 0 && r.contains("iter_s") && r["iter_s"].is_number()) {
    const double per_step = m->samples_per_s * r["iter_s"].get<double>();
    if (per_step >= 0.5 && per_step < 1e9) m->global_batch = static_cast<int>(std::lround(per_step));
  }
  return true;
}

class LocalTaskRunner final : public TaskRunner {
 public:
  explicit LocalTaskRunner(std::string host) : host_(std::move(host)) {}
  Result<int64_t> Start(const TaskSpec& spec, const std::vector<std::string>& argv, const std::string& cwd,
                        const std::string& log_path) override {
    std::vector<std::string> env;
    for (const auto& [name, value] : spec.env) env.push_back(name + "=" + value);
    Result<pid_t> pid = SpawnProcessGroup(argv, cwd, log_path, env);
    if (!pid.ok()) return pid.status();
    return static_cast<int64_t>(*pid);
  }
  std::optional<int> PollExit(int64_t handle) override { return cluster::PollExit(static_cast<pid_t>(handle)); }
  void Stop(int64_t handle, bool kill) override { SignalGroup(static_cast<pid_t>(handle), kill ? SIGKILL : SIGTERM); }
  // Stragglers of its group (the workers of a dead `frugal train`).
  void Cleanup(int64_t handle) override { SignalGroup(static_cast<pid_t>(handle), SIGKILL); }
  std::string Host(const TaskSpec&) const override { return host_; }

 private:
  std::string host_;
};

class AgentImpl final : public Agent {
 public:
  AgentImpl(std::unique_ptr<ClusterClient> client, AgentOptions options, std::unique_ptr<TaskRunner> runner)
      : client_(std::move(client)), options_(std::move(options)), runner_(std::move(runner)),
        runs_(fs::path(options_.work_dir) / "runs") {
    Adopt();
  }

  Status RunOnce() override;
  void Run(const std::atomic<bool>& stop) override;
  void StopAll() override;

 private:
  void Adopt();
  void Reap();
  void ReadMetrics(const TaskSpec& task);
  void Reconcile(const AgentReply& reply);
  bool TakeDevices(const TaskSpec& spec, std::vector<std::string>* devices);
  void Start(const TaskSpec& spec, std::vector<std::string> devices);
  std::vector<std::string> CommandLine(const TaskSpec& spec, const fs::path& config) const;
  Status AddSecurityArgs(const TaskSpec& spec, std::vector<std::string>* argv) const;

  std::unique_ptr<ClusterClient> client_;
  AgentOptions options_;
  std::unique_ptr<TaskRunner> runner_;
  fs::path runs_;
  std::map<std::string, Task> tasks_;           // Running (or stopping), by task id.
  std::set<std::string> started_;               // Every task id ever started: none runs twice.
  std::vector<TaskExit> pending_exits_;         // Not yet acknowledged by the server.
  std::vector<MetricSample> pending_samples_;
  std::map<int64_t, std::streamoff> metrics_offset_;  // By job: its run's metrics.jsonl, read so far.
  std::set<std::pair<int64_t, int64_t>> adopted_runs_;  // (job, generation) of the tasks adopted at start.
  std::set<std::string> waiting_for_devices_;   // Tasks told so once.
};

// Note [Device slots]: an agent started with --gpus offers its GPUs as its
// slots, and each task it starts gets workers x gpus_per_worker of them,
// the lowest ids free, as CUDA_VISIBLE_DEVICES (replacing the job's own
// value): a worker's `cuda:0` is its own GPU, and two jobs on one host never
// share one. `frugal run --gpus-per-worker G` then gives each of its local
// workers G of the task's devices. A task holds its devices until its
// process exits, stopping included, so that a resize's new task never
// lands on a GPU the old one still uses: the server already counts the
// slots as free, and the agent starts the new task only once enough
// devices are (it waits, heartbeat by heartbeat, and says so once). Without
// --gpus the slots are CPU slots and no device is assigned.
bool AgentImpl::TakeDevices(const TaskSpec& spec, std::vector<std::string>* devices) {
  devices->clear();
  if (options_.gpus.empty()) return true;
  const size_t need = static_cast<size_t>(std::max(0, spec.workers)) * std::max(1, spec.gpus_per_worker);
  std::set<std::string> held;
  for (const auto& [id, t] : tasks_) held.insert(t.devices.begin(), t.devices.end());
  for (const std::string& gpu : options_.gpus) {
    if (devices->size() < need && !held.count(gpu)) devices->push_back(gpu);
  }
  if (devices->size() == need) return true;
  if (waiting_for_devices_.insert(spec.task_id).second) {
    std::fprintf(stderr, "agent: %s waits for %zu free GPUs (%zu free now; running and stopping tasks hold the others)\n",
                 spec.task_id.c_str(), need, devices->size());
  }
  devices->clear();
  return false;
}

void AgentImpl::ReadMetrics(const TaskSpec& task) {
  if (!task.reads_metrics) return;
  std::ifstream in(runs_ / task.resume_run / "metrics.jsonl");
  if (!in) return;
  std::streamoff& offset = metrics_offset_[task.job_id];
  in.seekg(offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // A partial last line: read it whole next time.
    offset = in.tellg();
    nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    MetricSample m;
    if (!r.is_discarded() && ToSample(r, task, &m)) pending_samples_.push_back(m);
  }
}

// Tasks the runner already runs (a restarted server's Slurm jobs) are this
// agent's again: they are not started twice, their exits are reported, and
// their metrics are read from where their files end now (what was written
// while no one read them is not sent again).
void AgentImpl::Adopt() {
  for (const auto& [id, handle] : runner_->Running()) {
    Task t;
    t.handle = handle;
    t.spec.task_id = id;
    if (!ParseTaskId(id, &t.spec.job_id, &t.spec.generation)) continue;
    t.spec.resume_run = RunName(t.spec.job_id);
    std::error_code ec;
    const auto size = fs::file_size(runs_ / t.spec.resume_run / "metrics.jsonl", ec);
    if (!ec) metrics_offset_[t.spec.job_id] = static_cast<std::streamoff>(size);
    std::fprintf(stderr, "agent %s: adopting %s, already running\n", options_.node.c_str(), id.c_str());
    t.adopted = true;
    started_.insert(id);
    tasks_[id] = std::move(t);
  }
}

void AgentImpl::Reap() {
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    Task& t = it->second;
    std::optional<int> code = runner_->PollExit(t.handle);
    if (!code) {
      if (t.stopping && Clock::now() >= t.kill_at) runner_->Stop(t.handle, true);
      ReadMetrics(t.spec);
      ++it;
      continue;
    }
    runner_->Cleanup(t.handle);
    ReadMetrics(t.spec);
    std::fprintf(stderr, "agent: task %s exited with code %d%s\n", it->first.c_str(), *code,
                 t.stopping ? " (stopped)" : "");
    pending_exits_.push_back({it->first, *code});
    it = tasks_.erase(it);
  }
}

std::vector<std::string> AgentImpl::CommandLine(const TaskSpec& spec, const fs::path& config) const {
  std::vector<std::string> argv = {options_.frugal_binary};
  const std::string checkpoint = spec.resume_run.empty() ? "" : NewestCompleteCheckpoint(runs_ / spec.resume_run);
  auto expand = [&](const std::string& a) {
    if (a == "{config}") return config.string();
    if (a == "{runs}") return runs_.string();
    if (a == "{checkpoint}") return checkpoint;
    const size_t at = a.find("{host}");
    return at == std::string::npos ? a : a.substr(0, at) + runner_->Host(spec) + a.substr(at + 6);
  };
  if (!checkpoint.empty() && !spec.resume_appends) {
    argv.insert(argv.end(), {"train", "--resume", (runs_ / spec.resume_run).string()});
    for (const std::string& a : spec.resume_args) argv.push_back(expand(a));
    return argv;
  }
  for (const std::string& a : spec.args) argv.push_back(expand(a));
  if (!checkpoint.empty()) {
    for (const std::string& a : spec.resume_args) argv.push_back(expand(a));
  }
  return argv;
}

// Note [Job keys] (cluster_manager.cc): a task that listens on this host's
// address runs with the job's key pair, written next to its config, unless
// that address is loopback or the server runs jobs on plain TCP.
Status AgentImpl::AddSecurityArgs(const TaskSpec& spec, std::vector<std::string>* argv) const {
  const bool listens = std::any_of(spec.args.begin(), spec.args.end(),
                                   [](const std::string& a) { return a.find("{host}") != std::string::npos; });
  const std::string host = runner_->Host(spec);
  if (!listens || IsLoopbackHost(host)) return Status::Ok();
  if (spec.insecure_transport) {
    argv->insert(std::find(argv->begin(), argv->end(), "--"), "--insecure");
    return Status::Ok();
  }
  if (spec.job_public_key.empty() || spec.job_secret_key.empty()) {
    return Status::InvalidArgument("the server sent no key for job " + std::to_string(spec.job_id) +
                                   ", whose processes listen on " + host +
                                   ": run a server of this version, or serve with --insecure-jobs on a "
                                   "network you trust");
  }
  const fs::path key = fs::path(options_.work_dir) / (spec.task_id + ".key");
  std::error_code ec;
  fs::remove(key, ec);  // A task id is started once per agent; a leftover is from an earlier agent.
  fs::remove(key.string() + ".pub", ec);
  FRUGAL_RETURN_IF_ERROR(comm::WriteKeyPairFiles(key.string(), {spec.job_public_key, spec.job_secret_key},
                                                 "job-" + std::to_string(spec.job_id)));
  // Before a `--` that ends the launcher's flags (`frugal run ... -- <command>`).
  auto end = std::find(argv->begin(), argv->end(), "--");
  argv->insert(end, {"--key", key.string(), "--authorized-keys", key.string() + ".pub"});
  return Status::Ok();
}

void AgentImpl::Start(const TaskSpec& spec, std::vector<std::string> devices) {
  started_.insert(spec.task_id);
  waiting_for_devices_.erase(spec.task_id);
  std::error_code ec;
  fs::create_directories(runs_, ec);
  const fs::path config = fs::path(options_.work_dir) / (spec.task_id + ".toml");
  std::ofstream(config) << spec.config_toml;
  std::vector<std::string> argv = CommandLine(spec, config);
  if (Status secured = AddSecurityArgs(spec, &argv); !secured.ok()) {
    std::fprintf(stderr, "agent: cannot start %s: %s\n", spec.task_id.c_str(), secured.message().c_str());
    pending_exits_.push_back({spec.task_id, 127});
    return;
  }
  // A command job's task (Note [Command jobs]): its directory, and its
  // environment with "{runs}" expanded.
  const std::string cwd = spec.workdir.empty() ? options_.work_dir : spec.workdir;
  if (!fs::is_directory(cwd, ec)) {
    std::fprintf(stderr, "agent: cannot start %s: its workdir %s is not a directory on this host\n",
                 spec.task_id.c_str(), cwd.c_str());
    pending_exits_.push_back({spec.task_id, 126});
    return;
  }
  if (spec.env.count(kRunDirEnv)) fs::create_directories(runs_ / spec.resume_run, ec);  // The program's run_dir.
  TaskSpec launched = spec;
  if (!devices.empty()) {
    std::string list;
    for (const std::string& d : devices) list += (list.empty() ? "" : ",") + d;
    launched.env["CUDA_VISIBLE_DEVICES"] = list;
  }
  for (auto& [name, value] : launched.env) {
    for (size_t at = value.find("{runs}"); at != std::string::npos; at = value.find("{runs}", at)) {
      value.replace(at, 6, runs_.string());
      at += runs_.string().size();
    }
  }
  std::string line;
  for (const std::string& a : argv) line += a + " ";
  std::fprintf(stderr, "agent: starting %s: %s\n", spec.task_id.c_str(), line.c_str());
  Result<int64_t> handle =
      runner_->Start(launched, argv, cwd, (fs::path(options_.work_dir) / (spec.task_id + ".log")).string());
  if (!handle.ok()) {
    std::fprintf(stderr, "agent: cannot start %s: %s\n", spec.task_id.c_str(), handle.status().message().c_str());
    pending_exits_.push_back({spec.task_id, 127});
    return;
  }
  tasks_[spec.task_id] = Task{spec, *handle, false, {}, "", false, std::move(devices)};
}

void AgentImpl::Reconcile(const AgentReply& reply) {
  std::set<std::string> wanted;
  for (const TaskSpec& t : reply.tasks) {
    wanted.insert(t.task_id);
    auto it = tasks_.find(t.task_id);
    if (it != tasks_.end() && it->second.adopted) {
      it->second.spec = t;
      it->second.adopted = false;
      adopted_runs_.insert({t.job_id, t.generation});
    }
  }
  // Tasks of an incarnation that ended (AgentReply::superseded, on any
  // host): SIGTERM asks an elastic worker to leave through its coordinator,
  // which is gone or going too, so the worker would only wait out the stop
  // grace. They get SIGKILL; the next incarnation resumes from the newest
  // complete checkpoint.
  const std::set<std::string> superseded(reply.superseded.begin(), reply.superseded.end());
  for (auto& [id, t] : tasks_) {
    if (wanted.count(id) || t.stopping) continue;
    const bool orphaned = superseded.count(id) > 0;
    std::fprintf(stderr, "agent: stopping %s%s\n", id.c_str(), orphaned ? " (its run has ended: SIGKILL)" : "");
    t.stopping = true;
    t.kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options_.stop_grace_s));
    runner_->Stop(t.handle, orphaned);
  }
  for (const TaskSpec& t : reply.tasks) {
    if (started_.count(t.task_id)) continue;
    if (t.reports_endpoint && adopted_runs_.count({t.job_id, t.generation})) {
      // Its workers were adopted but it was not: it ran here and is gone
      // (the slot-less tasks of a Slurm backend die with the server). A new
      // one would not know the running workers: report it lost, and the
      // job restarts from its checkpoint.
      std::fprintf(stderr, "agent: %s is gone while its workers run; reporting it lost\n", t.task_id.c_str());
      started_.insert(t.task_id);
      pending_exits_.push_back({t.task_id, 128 + SIGKILL});
      continue;
    }
    bool job_busy = false;  // An old generation of the job still shutting down shares its run directory.
    for (const auto& [id, running] : tasks_) {
      job_busy = job_busy || (running.spec.job_id == t.job_id && running.spec.generation != t.generation);
    }
    std::vector<std::string> devices;
    if (!job_busy && TakeDevices(t, &devices)) Start(t, std::move(devices));
  }
}

Status AgentImpl::RunOnce() {
  runner_->Refresh();
  Reap();
  AgentReport report;
  report.node = options_.node;
  report.slots = options_.slots;
  for (auto& [id, t] : tasks_) {
    report.running.push_back(id);
    if (!t.spec.reports_endpoint || t.stopping) continue;
    if (t.endpoint.empty()) t.endpoint = EndpointInLog(fs::path(options_.work_dir) / (id + ".log"));
    if (!t.endpoint.empty()) report.endpoints.push_back({id, t.endpoint});
  }
  report.exited = pending_exits_;
  report.samples = pending_samples_;
  Result<AgentReply> reply = client_->Heartbeat(report);
  if (!reply.ok()) return reply.status();
  pending_exits_.erase(pending_exits_.begin(), pending_exits_.begin() + report.exited.size());
  pending_samples_.erase(pending_samples_.begin(), pending_samples_.begin() + report.samples.size());
  Reconcile(*reply);
  return Status::Ok();
}

void AgentImpl::Run(const std::atomic<bool>& stop) {
  const auto period = std::chrono::duration<double>(options_.heartbeat_s);
  Status last;
  while (!stop.load()) {
    auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(period);
    Status st = RunOnce();
    if (!st.ok() && st.message() != last.message()) {
      std::fprintf(stderr, "agent: %s (tasks keep running; retrying)\n", st.message().c_str());
    }
    last = st;
    while (!stop.load() && Clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  StopAll();
}

void AgentImpl::StopAll() {
  for (auto& [id, t] : tasks_) runner_->Stop(t.handle, false);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.stop_grace_s));
  while (!tasks_.empty() && Clock::now() < deadline) {
    runner_->Refresh();
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      it = runner_->PollExit(it->second.handle) ? tasks_.erase(it) : std::next(it);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& [id, t] : tasks_) runner_->Stop(t.handle, true);
  for (auto& [id, t] : tasks_) {
    while (!runner_->PollExit(t.handle)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  tasks_.clear();
}

}  // namespace

std::unique_ptr<TaskRunner> NewLocalTaskRunner(std::string host) {
  return std::make_unique<LocalTaskRunner>(std::move(host));
}

bool IsLoopbackHost(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "::1";
}

Result<std::unique_ptr<Agent>> Agent::Create(std::unique_ptr<ClusterClient> client, AgentOptions options) {
  std::string host = options.host;
  return CreateAgentWithRunner(std::move(client), std::move(options), NewLocalTaskRunner(std::move(host)));
}

Result<std::unique_ptr<Agent>> CreateAgentWithRunner(std::unique_ptr<ClusterClient> client, AgentOptions options,
                                                     std::unique_ptr<TaskRunner> runner) {
  if (!options.gpus.empty()) {
    const int gpus = static_cast<int>(options.gpus.size());
    if (options.slots != 0 && options.slots != gpus) {
      return Status::InvalidArgument("--slots " + std::to_string(options.slots) + " but --gpus lists " +
                                     std::to_string(gpus) + " GPUs: with --gpus the slots are the GPUs; drop --slots");
    }
    options.slots = gpus;
  }
  if (options.slots < 1 || options.slots > 1024) return Status::InvalidArgument("--slots must be in [1, 1024]");
  if (options.node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    options.node = host;
  }
  if (access(options.frugal_binary.c_str(), X_OK) != 0) {
    return Status::InvalidArgument("--frugal: '" + options.frugal_binary + "' is not an executable");
  }
  if (!(options.heartbeat_s > 0) || options.heartbeat_s > 600) {
    return Status::InvalidArgument("--heartbeat-s must be in (0, 600]");
  }
  std::error_code ec;
  options.work_dir = fs::absolute(options.work_dir, ec).string();
  fs::create_directories(options.work_dir, ec);
  if (ec) return Status::IOError("--work-dir " + options.work_dir + ": " + ec.message());
  return std::unique_ptr<Agent>(new AgentImpl(std::move(client), std::move(options), std::move(runner)));
}

}  // namespace frugal::cluster
