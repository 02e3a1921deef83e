#include "frugal/cluster/slurm_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "frugal/common/text.h"
#include "process.h"
#include "slurm_parse.h"
#include "task_runner.h"

namespace frugal::cluster {

// Note [Slurm backend]
// Slurm does the launching; Frugal keeps the deciding. Each node of the
// partition gets an Agent inside the server (the same reconciliation as
// `frugal cluster agent`: start what the manager lists, stop the rest, read
// the runs' metrics.jsonl), whose TaskRunner submits a batch job per task:
//   sbatch --job-name=<prefix><task id> --nodelist=<node> --ntasks=1
//          --cpus-per-task=<slots> [--gres=gpu:<slots>] --wrap "exec frugal ..."
//   (slots: the task's workers x gpus_per_worker)
// `exec` makes the frugal process the job's batch process, so the SIGTERM of
// `scancel` reaches it directly and an elastic worker leaves its job in
// place (KillWait later, or the agent's stop grace, escalates to SIGKILL).
// One `squeue --me -t all` per poll serves every node's polls: a job's
// exit code is read from its record (kept MinJobAge, 300 s by default,
// after it ends). A job missing from a queue read it was seen in, or never
// seen after kUnseenPolls reads, is lost (exit 137): its node failed, or the
// records were purged while the server was away.
// Slot-less tasks (elastic coordinators) would take a CPU that the slots
// count does not leave; they run on the server's host, as the local agent
// runs them, and so do not outlive the server: a restarted server finds an
// elastic job's workers still queued in Slurm, but their coordinator gone,
// and the job restarts from its checkpoint. `--controller restart` jobs
// have no coordinator and are adopted as they run.
// If squeue fails, the backend heartbeats nothing that poll: stale
// information would read as exits; a node silent past --node-timeout-s is
// marked down, as an agent that went silent.

namespace slurm {

namespace {

std::vector<std::string> SplitFields(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string f;
  while (std::getline(in, f, '|')) out.push_back(Trim(f));
  return out;
}

bool ToInt(const std::string& s, long long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0';
}

}  // namespace

const char* const kSqueueFormat = "JobID:|,Name:300|,State:|,exit_code:|,ReqNodes:300|";

int GpusOfGres(const std::string& gres) {
  int total = 0;
  std::stringstream in(gres);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = item.substr(0, item.find('('));
    if (item.rfind("gpu", 0) != 0) continue;
    long long n = 0;
    const size_t colon = item.rfind(':');
    if (colon != std::string::npos && ToInt(item.substr(colon + 1), &n) && n > 0) total += static_cast<int>(n);
  }
  return total;
}

std::vector<Node> ParseSinfo(const std::string& out) {
  std::vector<Node> nodes;
  std::set<std::string> seen;
  std::stringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = SplitFields(line);
    long long cpus = 0;
    if (f.size() < 5 || f[0].empty() || !ToInt(f[2], &cpus) || !seen.insert(f[0]).second) continue;
    nodes.push_back({f[0], f[1].empty() ? f[0] : f[1], static_cast<int>(cpus), GpusOfGres(f[3]), f[4]});
  }
  return nodes;
}

bool NodeUsable(const std::string& state) {
  if (state.empty() || state.find('*') != std::string::npos) return false;  // Not responding.
  for (const char* ok : {"idle", "mix", "alloc", "completing"}) {
    if (state.rfind(ok, 0) == 0) return true;
  }
  return false;
}

std::vector<Job> ParseSqueue(const std::string& out) {
  std::vector<Job> jobs;
  std::stringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = SplitFields(line);
    long long id = 0, raw = 0;
    if (f.size() < 4 || !ToInt(f[0], &id) || id <= 0) continue;  // Array or het jobs ("12_3"): not ours.
    if (!ToInt(f[3], &raw)) raw = 0;
    jobs.push_back({id, f[1], f[2], static_cast<int>(raw), f.size() > 4 ? f[4] : ""});
  }
  return jobs;
}

bool JobEnded(const std::string& state) {
  for (const char* live : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                           "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD"}) {
    if (state == live) return false;
  }
  return true;
}

int ExitCode(const std::string& state, int raw_exit) {
  int code = (raw_exit & 0x7f) != 0 ? 128 + (raw_exit & 0x7f) : (raw_exit >> 8) & 0xff;
  if (code == 0 && state != "COMPLETED") code = state == "CANCELLED" ? 128 + 15 : 128 + 9;
  return code;
}

std::string ShellQuote(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

int64_t ParseSbatchId(const std::string& out) {
  long long id = 0;
  const std::string first = Trim(out.substr(0, out.find_first_of(";\n")));
  return ToInt(first, &id) && id > 0 ? id : 0;
}

}  // namespace slurm

namespace {

namespace fs = std::filesystem;

constexpr int kUnseenPolls = 30;

// What a failed Slurm command said: its last line (the fatal one).
std::string Said(const Result<CommandResult>& r) {
  if (!r.ok()) return r.status().message();
  std::string text = r->err.empty() ? r->out : r->err;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  const size_t nl = text.rfind('\n');
  text = nl == std::string::npos ? text : text.substr(nl + 1);
  return text.empty() ? "exit code " + std::to_string(r->exit_code) : text;
}

// Slurm's queue as the last `squeue --me -t all` read it: our jobs, by id.
class Queue {
 public:
  explicit Queue(const SlurmOptions& options) : options_(options) {}

  Status Refresh() {
    std::vector<std::string> argv = {"squeue", "--me", "--noheader", "--states=all", "--Format", slurm::kSqueueFormat};
    if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
    Result<CommandResult> r = RunCommand(argv, options_.command_timeout_s);
    ok_ = r.ok() && r->exit_code == 0;
    if (!ok_) return Status::Unavailable(Said(r));
    jobs_.clear();
    for (slurm::Job& j : slurm::ParseSqueue(r->out)) {
      if (j.name.rfind(options_.job_prefix, 0) == 0) jobs_[j.id] = std::move(j);
    }
    ++reads_;
    return Status::Ok();
  }
  bool ok() const { return ok_; }
  long reads() const { return reads_; }
  const std::map<int64_t, slurm::Job>& jobs() const { return jobs_; }

 private:
  const SlurmOptions& options_;
  std::map<int64_t, slurm::Job> jobs_;
  bool ok_ = false;
  long reads_ = 0;
};

// Tasks with slots: a batch job on `node`; slot-less ones: a local process
// group (handle: minus its pid).
class SlurmTaskRunner final : public TaskRunner {
 public:
  SlurmTaskRunner(const SlurmOptions& options, slurm::Node node, const Queue& queue)
      : options_(options), node_(std::move(node)), queue_(queue), local_(NewLocalTaskRunner(options.host)) {}

  Result<int64_t> Start(const TaskSpec& spec, const std::vector<std::string>& argv, const std::string& cwd,
                        const std::string& log_path) override {
    if (spec.workers == 0) {
      Result<int64_t> pid = local_->Start(spec, argv, cwd, log_path);
      if (!pid.ok()) return pid.status();
      return -*pid;
    }
    const int slots = spec.workers * std::max(1, spec.gpus_per_worker);  // A worker takes gpus_per_worker.
    std::vector<std::string> cmd = {"sbatch", "--parsable", "--job-name=" + options_.job_prefix + spec.task_id,
                                    "--nodelist=" + node_.name, "--nodes=1", "--ntasks=1",
                                    "--cpus-per-task=" + std::to_string(slots), "--output=" + log_path,
                                    "--open-mode=append", "--chdir=" + cwd};
    if (node_.gpus > 0 && options_.slots_per_node == 0) cmd.push_back("--gres=gpu:" + std::to_string(slots));
    if (!options_.partition.empty()) cmd.push_back("--partition=" + options_.partition);
    std::vector<std::string> wrapped;  // A command job's variables (TaskSpec::env), through env(1).
    if (!spec.env.empty()) {
      wrapped.push_back("/usr/bin/env");
      for (const auto& [name, value] : spec.env) wrapped.push_back(name + "=" + value);
    }
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    cmd.push_back("--wrap=exec " + slurm::ShellQuote(wrapped));
    Result<CommandResult> r = RunCommand(cmd, options_.command_timeout_s);
    if (!r.ok()) return r.status();
    const int64_t id = slurm::ParseSbatchId(r->out);
    if (r->exit_code != 0 || id == 0) return Status::Unavailable(Said(r));
    submitted_at_[id] = queue_.reads();
    return id;
  }

  std::optional<int> PollExit(int64_t handle) override {
    if (handle < 0) return local_->PollExit(-handle);
    if (!queue_.ok()) return std::nullopt;
    auto it = queue_.jobs().find(handle);
    if (it != queue_.jobs().end()) {
      seen_.insert(handle);
      if (!slurm::JobEnded(it->second.state)) return std::nullopt;
      return slurm::ExitCode(it->second.state, it->second.raw_exit);
    }
    auto sub = submitted_at_.find(handle);
    const bool overdue = sub == submitted_at_.end() || queue_.reads() - sub->second > kUnseenPolls;
    if (!seen_.count(handle) && !overdue) return std::nullopt;  // Submitted after the last read.
    std::fprintf(stderr, "slurm: job %ld is no longer in Slurm's queue; counted as lost\n", static_cast<long>(handle));
    return 128 + 9;
  }

  void Stop(int64_t handle, bool kill) override {
    if (handle < 0) return local_->Stop(-handle, kill);
    std::vector<std::string> cmd = {"scancel"};
    if (kill) cmd.insert(cmd.end(), {"--full", "--signal=KILL"});
    cmd.push_back(std::to_string(handle));
    Result<CommandResult> r = RunCommand(cmd, options_.command_timeout_s);
    if (!r.ok() || r->exit_code != 0) {
      std::fprintf(stderr, "slurm: scancel %ld failed: %s\n", static_cast<long>(handle), Said(r).c_str());
    }
  }

  void Cleanup(int64_t handle) override {
    if (handle < 0) local_->Cleanup(-handle);
    submitted_at_.erase(handle);
    seen_.erase(handle);
  }

  std::string Host(const TaskSpec& spec) const override { return spec.workers == 0 ? options_.host : node_.addr; }

  std::map<std::string, int64_t> Running() override {
    std::map<std::string, int64_t> out;
    for (const auto& [id, job] : queue_.jobs()) {
      if (job.node != node_.name || slurm::JobEnded(job.state)) continue;
      out[job.name.substr(options_.job_prefix.size())] = id;
      seen_.insert(id);
    }
    return out;
  }

 private:
  const SlurmOptions& options_;
  slurm::Node node_;
  const Queue& queue_;
  std::unique_ptr<TaskRunner> local_;
  std::map<int64_t, long> submitted_at_;  // Queue reads done when it was submitted.
  std::set<int64_t> seen_;
};

// The agents' "server": the manager, called directly.
class ManagerClient final : public ClusterClient {
 public:
  explicit ManagerClient(ClusterManager& manager) : manager_(manager) {}
  Result<std::string> Get(const std::string&) override { return Status::Unavailable("not over HTTP"); }
  Result<std::string> Post(const std::string&, const std::string&) override {
    return Status::Unavailable("not over HTTP");
  }
  Result<AgentReply> Heartbeat(const AgentReport& report) override { return manager_.Heartbeat(report); }
  Result<int64_t> Submit(const JobSubmission&) override { return Status::Unavailable("not over HTTP"); }

 private:
  ClusterManager& manager_;
};

Result<std::vector<slurm::Node>> ReadNodes(const SlurmOptions& options) {
  std::vector<std::string> argv = {"sinfo", "--noheader", "--Node", "--format=%N|%o|%c|%G|%T"};
  if (!options.partition.empty()) argv.push_back("--partition=" + options.partition);
  Result<CommandResult> r = RunCommand(argv, options.command_timeout_s);
  if (!r.ok() || r->exit_code != 0) return Status::Unavailable(Said(r));
  return slurm::ParseSinfo(r->out);
}

class SlurmBackendImpl final : public SlurmBackend {
 public:
  SlurmBackendImpl(ClusterManager& manager, SlurmOptions options, Clock& clock)
      : manager_(manager), options_(std::move(options)), queue_(options_), clock_(clock) {}

  Status RunOnce() override {
    Result<std::vector<slurm::Node>> nodes = ReadNodes(options_);
    if (!nodes.ok()) return nodes.status();
    FRUGAL_RETURN_IF_ERROR(queue_.Refresh());
    Status first;
    for (const slurm::Node& node : *nodes) {
      if (!slurm::NodeUsable(node.state)) continue;
      Result<Agent*> agent = AgentOf(node);
      Status st = agent.ok() ? (*agent)->RunOnce() : agent.status();
      if (!st.ok() && first.ok()) first = Status::Unavailable(node.name + ": " + st.message());
    }
    return first;
  }

  void Run(const std::atomic<bool>& stop) override {
    const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.poll_s));
    std::string last;
    while (!stop.load()) {
      const Clock::time_point next = clock_.Now() + period;
      Status st = RunOnce();
      if (!st.ok() && st.message() != last) std::fprintf(stderr, "slurm: %s (retrying)\n", st.message().c_str());
      last = st.ok() ? "" : st.message();
      while (!stop.load() && clock_.Now() < next) {
        clock_.SleepFor(std::chrono::milliseconds(50));
      }
    }
  }

 private:
  int SlotsOf(const slurm::Node& node) const {
    if (options_.slots_per_node > 0) return options_.slots_per_node;
    return node.gpus > 0 ? node.gpus : std::max(1, node.cpus);
  }

  Result<Agent*> AgentOf(const slurm::Node& node) {
    auto it = agents_.find(node.name);
    if (it != agents_.end()) return it->second.get();
    AgentOptions ao;
    ao.node = node.name;
    ao.slots = SlotsOf(node);
    ao.frugal_binary = options_.frugal_binary;
    ao.work_dir = options_.work_dir;
    ao.host = options_.host;
    ao.heartbeat_s = options_.poll_s;
    ao.stop_grace_s = options_.stop_grace_s;
    Result<std::unique_ptr<Agent>> agent = CreateAgentWithRunner(
        std::make_unique<ManagerClient>(manager_), ao, std::make_unique<SlurmTaskRunner>(options_, node, queue_));
    if (!agent.ok()) return agent.status();
    std::fprintf(stderr, "slurm: node %s (%s): %d slots\n", node.name.c_str(), node.addr.c_str(), ao.slots);
    return (agents_[node.name] = std::move(*agent)).get();
  }

  ClusterManager& manager_;
  SlurmOptions options_;
  Queue queue_;
  Clock& clock_;
  std::map<std::string, std::unique_ptr<Agent>> agents_;  // By node name.
};

}  // namespace

Result<std::unique_ptr<SlurmBackend>> SlurmBackend::Create(ClusterManager& manager, SlurmOptions options,
                                                           Clock& clock) {
  if (access(options.frugal_binary.c_str(), X_OK) != 0) {
    return Status::InvalidArgument("--frugal: '" + options.frugal_binary + "' is not an executable");
  }
  if (!(options.poll_s > 0) || !(options.command_timeout_s > 0)) {
    return Status::InvalidArgument("Slurm poll and command time-outs must be positive");
  }
  if (options.job_prefix.empty() || options.job_prefix.find_first_of(" |'\"") != std::string::npos) {
    return Status::InvalidArgument("the Slurm job name prefix must be a non-empty word");
  }
  std::error_code ec;
  options.work_dir = fs::absolute(options.work_dir, ec).string();
  fs::create_directories(options.work_dir, ec);
  if (ec) return Status::IOError("--work-dir " + options.work_dir + ": " + ec.message());
  Result<std::vector<slurm::Node>> nodes = ReadNodes(options);
  if (!nodes.ok()) {
    return Status::Unavailable(nodes.status().message() +
                               " (is Slurm installed and its controller up? SLURM_CONF names its slurm.conf)");
  }
  if (nodes->empty()) {
    return Status::Unavailable("Slurm has no node" +
                               (options.partition.empty() ? std::string() : " in partition '" + options.partition + "'"));
  }
  return std::unique_ptr<SlurmBackend>(new SlurmBackendImpl(manager, std::move(options), clock));
}

}  // namespace frugal::cluster
