// `frugal run`: a torchrun-style launcher for the user's own training
// program (a Python script using the frugal package, or anything else that
// joins through the FRUGAL_* environment).
//
//   frugal run --workers 4 -- /usr/bin/python3 train.py --epochs 2
//
// Local form (no --coordinator): runs the coordinator in this process on
// loopback and N child processes, rank r with FRUGAL_RANK=r. Multi-host form:
// `frugal coordinator --listen tcp://IP:PORT --world W` on one host and
// `frugal run --workers N --coordinator tcp://IP:PORT --cluster NAME
// --listen tcp://0.0.0.0:* --advertise-host MYIP --key site.key
// --authorized-keys authorized_keys -- ...` on each; ranks are then assigned
// by the coordinator. --key, --authorized-keys and --insecure are resolved as
// `frugal worker` resolves them (a non-loopback coordinator without keys is
// refused) and reach the program's frugal.init() as FRUGAL_KEY,
// FRUGAL_AUTHORIZED_KEYS and FRUGAL_INSECURE; in the local form, keys also
// secure the in-process coordinator. Either way the children are supervised
// as `frugal train` supervises its workers: the first failure is reported
// ("worker 1 failed (exit code 1)"), the others get --timeout-s plus a grace
// period to notice and exit, then are killed; exit code 1.
//
// Children are started and supervised by engine::ProcessLauncher and
// engine::SuperviseProcesses, the code behind `frugal train --workers N`.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include <climits>
#include <cstdlib>

#include "commands.h"
#include "frugal/comm/security.h"
#include "frugal/engine/run_config.h"
#include "frugal/engine/launcher.h"

namespace frugal::cli {

namespace {

struct RunFlags {
  int workers = 1;
  std::string coordinator;  // empty: run one in this process
  std::string cluster = "local";
  std::string local_clusters;
  std::string listen = "tcp://127.0.0.1:*";
  std::string advertise_host;
  double timeout_s = 60;
  double rendezvous_timeout_s = 120;
  double link_grace_s = 30;
  int threads = 0;
  std::string key;
  std::string authorized_keys;
  bool insecure = false;
  std::vector<std::string> command;
};

// The children may run in another directory: key files go to them as
// absolute paths.
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return path;  // ResolveSecurity has already named a missing file
  std::string out(resolved);
  std::free(resolved);
  return out;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
  return out;
}

// A free TCP port on loopback for torch.distributed's store (MASTER_PORT),
// as torchrun picks one; 0 if none could be found.
int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Whether `program` can be started: a path to an executable, or a name
// found on PATH (as posix_spawnp searches it).
bool IsStartable(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (access(((dir.empty() ? "." : dir) + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

void CheckFlags(const RunFlags& f, const std::vector<std::string>& clusters) {
  if (f.command.empty()) throw UsageError("frugal run needs a program: frugal run --workers N -- PROGRAM ARGS...");
  if (!IsStartable(f.command[0])) throw UsageError("cannot start " + f.command[0] + ": not an executable program");
  if (f.workers < 1 || f.workers > engine::kMaxLocalWorkers) {
    throw UsageError("--workers must be in [1, " + std::to_string(engine::kMaxLocalWorkers) + "], got " +
                     std::to_string(f.workers) + " (frugal run starts every worker on this machine)");
  }
  if (f.threads < 0 || f.threads > 1024) throw UsageError("--threads must be in [0, 1024], got " + std::to_string(f.threads));
  if (!(f.timeout_s > 0)) throw UsageError("--timeout-s must be > 0");
  if (!(f.link_grace_s >= 0 && f.link_grace_s <= 86400)) throw UsageError("--link-grace-s must be in [0, 86400]");
  if (!(f.rendezvous_timeout_s > 0)) throw UsageError("--rendezvous-timeout-s must be > 0");
  if (!clusters.empty() && static_cast<int>(clusters.size()) != f.workers) {
    throw UsageError("--local-clusters names " + std::to_string(clusters.size()) + " clusters for " +
                     std::to_string(f.workers) + " workers");
  }
  if (!f.coordinator.empty() && !clusters.empty()) {
    throw UsageError("--local-clusters is for the local form; with --coordinator give --cluster");
  }
}

// As `frugal worker`: the coordinator's address decides whether keys are
// needed. Checked here, before any child starts, so a refused run fails at
// once with the CLI's message rather than in every child.
comm::SecurityOptions CheckSecurity(const RunFlags& f) {
  return ResolveSecurity(f.key, f.authorized_keys, f.insecure,
                         f.coordinator.empty() ? std::string("tcp://127.0.0.1:0") : f.coordinator);
}

// The FRUGAL_* variables of child `r` (and, locally, torch.distributed's
// env:// ones, so an unchanged DDP script starts as under torchrun), as
// "KEY=VALUE" overrides of this process's environment.
std::vector<std::string> ChildEnvironment(const RunFlags& f, int r, const std::string& endpoint,
                                          const std::vector<std::string>& clusters, int threads, int master_port) {
  const bool local = f.coordinator.empty();
  std::map<std::string, std::string> env = {
      {"FRUGAL_COORDINATOR", endpoint},
      {"FRUGAL_RANK", local ? std::to_string(r) : "-1"},
      {"FRUGAL_LOCAL_RANK", std::to_string(r)},
      {"FRUGAL_CLUSTER", clusters.empty() ? f.cluster : clusters[r]},
      {"FRUGAL_LISTEN", f.listen},
      {"FRUGAL_TIMEOUT_S", std::to_string(f.timeout_s)},
      {"FRUGAL_LINK_GRACE_S", std::to_string(f.link_grace_s)},
      {"FRUGAL_RENDEZVOUS_TIMEOUT_S", std::to_string(f.rendezvous_timeout_s)},
      {"FRUGAL_THREADS", std::to_string(threads)},
  };
  // Known on every host; the global rank is assigned by the coordinator
  // only when the child joins, so RANK and WORLD_SIZE are set locally only.
  env["LOCAL_RANK"] = std::to_string(r);
  env["LOCAL_WORLD_SIZE"] = std::to_string(f.workers);
  if (local) {
    env["FRUGAL_WORLD_SIZE"] = std::to_string(f.workers);
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(f.workers);
    env["MASTER_ADDR"] = "127.0.0.1";
    if (master_port > 0) env["MASTER_PORT"] = std::to_string(master_port);
  }
  if (!f.advertise_host.empty()) env["FRUGAL_ADVERTISE_HOST"] = f.advertise_host;
  if (!f.key.empty()) env["FRUGAL_KEY"] = Absolute(f.key);
  if (!f.authorized_keys.empty()) env["FRUGAL_AUTHORIZED_KEYS"] = Absolute(f.authorized_keys);
  if (f.insecure) env["FRUGAL_INSECURE"] = "1";
  // Workers sharing the cores should not each start one thread per core.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) env["OMP_NUM_THREADS"] = std::to_string(threads);
  std::vector<std::string> overrides;
  for (const auto& [k, v] : env) overrides.push_back(k + "=" + v);
  return overrides;
}

void Run(const RunFlags& f) {
  const std::vector<std::string> clusters = SplitCommas(f.local_clusters);
  CheckFlags(f, clusters);
  const comm::SecurityOptions security = CheckSecurity(f);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  const bool local = f.coordinator.empty();

  // The coordinator serves on its own thread. Its state is shared with that
  // thread so that, once every child has exited, the launcher can leave
  // without waiting out the coordinator's timeout (children that never
  // joined, or failed before joining).
  struct CoordinatorState {
    std::atomic<bool> bound{false};
    std::atomic<bool> done{false};
    std::string endpoint;
    Status status;
  };
  auto cs = std::make_shared<CoordinatorState>();
  std::string endpoint = f.coordinator;
  if (local) {
    engine::CoordinatorOptions co;
    co.world_size = f.workers;
    co.zmq.security = security;
    co.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.rendezvous_timeout_s * 1000));
    std::thread([cs, co] {
      Status s = engine::RunCoordinator(co, [&](const std::string& ep) {
        cs->endpoint = ep;
        cs->bound = true;
      }, false);
      cs->status = s;
      cs->done = true;
      cs->bound = true;  // also on a bind failure
    }).detach();
    while (!cs->bound) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (cs->endpoint.empty()) {
      while (!cs->done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ThrowIfError(cs->status.WithContext("starting the coordinator"));
    }
    endpoint = cs->endpoint;
  }

  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, cores / static_cast<unsigned>(f.workers)));
  const int master_port = local ? FreeLoopbackPort() : 0;
  std::unique_ptr<engine::ProcessLauncher> launcher = engine::NewPosixProcessLauncher();
  std::vector<engine::ProcessLauncher::Id> ids;
  Status spawn_error;
  for (int r = 0; r < f.workers; ++r) {
    std::vector<std::string> overrides = ChildEnvironment(f, r, endpoint, clusters, threads, master_port);
    auto id = launcher->Spawn(f.command[0], std::vector<std::string>(f.command.begin() + 1, f.command.end()),
                              overrides);
    if (!id.ok()) {
      spawn_error = id.status();
      break;
    }
    ids.push_back(*id);
  }
  SteadyClock clock;
  ThrowIfError(engine::SuperviseProcesses(ids, spawn_error, timeout + std::chrono::seconds(10),
                                          /*tolerate_failures=*/false, *launcher, clock));
  // Every child succeeded; a coordinator still waiting means some never
  // joined a world, which is their business (a program may not use Frugal).
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run your own training program on N workers (frugal run --workers N -- python3 train.py ...)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--workers", f->workers, "Processes to start on this machine");
  cmd->add_option("--coordinator", f->coordinator,
                  "Coordinator of a multi-host run, tcp://HOST:PORT (default: one in this process, loopback)");
  cmd->add_option("--cluster", f->cluster, "Cluster name of the workers started here");
  cmd->add_option("--local-clusters", f->local_clusters, "Comma-separated cluster of each local worker, e.g. a,a,b,b");
  cmd->add_option("--listen", f->listen, "Where each worker receives, e.g. tcp://0.0.0.0:*");
  cmd->add_option("--advertise-host", f->advertise_host, "Host peers connect to when --listen is a wildcard");
  cmd->add_option("--timeout-s", f->timeout_s, "Bound on every network wait, seconds");
  cmd->add_option("--link-grace-s", f->link_grace_s,
                  "A peer whose link is down is kept this long, seconds (a dead process is noticed within a second or two)");
  cmd->add_option("--rendezvous-timeout-s", f->rendezvous_timeout_s,
                  "How long workers may take to start and join (imports included), seconds");
  cmd->add_option("--threads", f->threads, "Torch threads per worker (0 = cores / workers)");
  cmd->add_option("--key", f->key, "This site's CurveZMQ key pair (frugal keys generate --out FILE), for every worker");
  cmd->add_option("--authorized-keys", f->authorized_keys, "Public keys of every site of the job, one per line");
  cmd->add_flag("--insecure", f->insecure, "Plain TCP to a non-loopback coordinator: anyone who can reach a port can join");
  cmd->add_option("command", f->command, "The program and its arguments, after --")->expected(-1);
  cmd->callback([f] { Run(*f); });
}

}  // namespace frugal::cli
