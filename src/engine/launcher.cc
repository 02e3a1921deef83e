#include "frugal/engine/launcher.h"

#include <signal.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "frugal/comm/membership/membership.h"
#include "frugal/comm/membership/rendezvous.h"

namespace frugal::engine {

Status RunCoordinator(const CoordinatorOptions& options, const std::function<void(const std::string&)>& on_bound,
                      bool print_table) {
  if (options.world_size < 1) return Status::InvalidArgument("--world must be >= 1");
  if (options.elastic) {
    comm::MembershipOptions mo;
    mo.world_size = options.world_size;
    mo.min_workers = options.min_workers;
    mo.heartbeat_timeout = options.heartbeat_timeout;
    mo.link_grace = options.link_grace;
    mo.timeout = options.timeout;
    mo.zmq = options.zmq;
    FRUGAL_ASSIGN_OR_RETURN(auto server, comm::MembershipServer::Bind(options.listen, mo));
    if (on_bound) on_bound(server->endpoint());
    return server->Serve();
  }
  FRUGAL_ASSIGN_OR_RETURN(auto server, comm::RendezvousServer::Bind(options.listen, options.world_size, options.zmq));
  if (on_bound) on_bound(server->endpoint());
  FRUGAL_ASSIGN_OR_RETURN(std::vector<comm::PeerInfo> table, server->Serve(options.timeout));
  if (print_table) {
    for (const auto& p : table) std::printf("rank %d  cluster %s  %s\n", p.rank, p.cluster.c_str(), p.endpoint.c_str());
    std::fflush(stdout);
  }
  return Status::Ok();
}

namespace {

// The file behind /proc/self/exe, so workers show up as "frugal worker ..."
// in ps. Any other path is started as given: a virtual environment's python
// is a symlink that finds its environment (pyvenv.cfg) from the path it was
// started by, and loses its packages when started by the target's path.
std::string ResolveExecutable(const std::string& exe) {
  if (exe.rfind("/proc/", 0) != 0) return exe;
  char buf[PATH_MAX];
  if (realpath(exe.c_str(), buf) == nullptr) return exe;
  return buf;
}

// The supervisor's view of the Env's children: the exits of those it
// started, in any order.
class EnvProcessLauncher final : public ProcessLauncher {
 public:
  explicit EnvProcessLauncher(Env& env) : env_(env) {}

  Result<Id> Spawn(const std::string& executable, const std::vector<std::string>& args,
                   const std::vector<std::string>& env) override {
    SpawnOptions o;
    o.argv.push_back(ResolveExecutable(executable));
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.env = env;
    Result<Env::Pid> pid = env_.Spawn(o);
    if (!pid.ok()) return Status::IOError("cannot start " + pid.status().message());
    running_.push_back(*pid);
    return Id{*pid};
  }

  std::optional<Exit> PollExit() override {
    for (size_t i = 0; i < running_.size(); ++i) {
      std::optional<ProcessExit> exit = env_.Poll(running_[i]);
      if (!exit) continue;
      Exit e{running_[i], exit->success(), exit->Describe()};
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      return e;
    }
    return std::nullopt;
  }

  void Kill(Id id) override { env_.Signal(id, SIGKILL); }
  void Terminate(Id id) override { env_.Signal(id, SIGTERM); }

 private:
  Env& env_;
  std::vector<Env::Pid> running_;  // started and not yet reaped
};

constexpr std::chrono::milliseconds kPollInterval{20};

Status ValidateLocalLaunch(const LocalLaunchOptions& options) {
  if (options.workers < 1) return Status::InvalidArgument("--workers must be >= 1");
  if (!options.clusters.empty() && static_cast<int>(options.clusters.size()) != options.workers) {
    return Status::InvalidArgument("--local-clusters names " + std::to_string(options.clusters.size()) +
                                   " clusters for " + std::to_string(options.workers) + " workers");
  }
  if (!options.slowdowns.empty() && static_cast<int>(options.slowdowns.size()) != options.workers) {
    return Status::InvalidArgument("--local-slowdowns gives " + std::to_string(options.slowdowns.size()) +
                                   " factors for " + std::to_string(options.workers) + " workers");
  }
  return Status::Ok();
}

// argv[1..] of worker `rank`: `worker`, the run's flags, then where and who it is.
std::vector<std::string> WorkerArgs(const LocalLaunchOptions& options, const std::string& endpoint, int rank) {
  std::vector<std::string> args = {"worker"};
  args.insert(args.end(), options.worker_args.begin(), options.worker_args.end());
  args.insert(args.end(), {"--coordinator", endpoint, "--rank", std::to_string(rank), "--threads",
                           std::to_string(options.threads_per_worker)});
  if (!options.clusters.empty()) args.insert(args.end(), {"--cluster", options.clusters[rank]});
  if (!options.slowdowns.empty()) args.insert(args.end(), {"--compute-slowdown", options.slowdowns[rank]});
  if (rank > 0) args.push_back("--quiet");
  return args;
}

}  // namespace

Status SuperviseProcesses(const std::vector<ProcessLauncher::Id>& ids, Status first_failure,
                          std::chrono::milliseconds grace, bool tolerate_failures, ProcessLauncher& launcher,
                          Clock& clock, const std::atomic<bool>* stop) {
  std::vector<bool> done(ids.size(), false);
  size_t remaining = ids.size();
  auto deadline = Clock::time_point::max();
  if (!first_failure.ok()) deadline = clock.Now();
  bool stopping = false;
  while (remaining > 0) {
    if (!stopping && stop != nullptr && stop->load()) {
      stopping = true;
      tolerate_failures = false;
      first_failure = Status::Unavailable("interrupted: the workers were asked to stop");
      for (size_t r = 0; r < ids.size(); ++r) {
        if (!done[r]) launcher.Terminate(ids[r]);
      }
      deadline = std::min(deadline, clock.Now() + kInterruptGrace);
    }
    if (std::optional<ProcessLauncher::Exit> exit = launcher.PollExit()) {
      for (size_t r = 0; r < ids.size(); ++r) {
        if (ids[r] != exit->id || done[r]) continue;
        done[r] = true;
        --remaining;
        if (!exit->success && tolerate_failures) {
          std::fprintf(stderr, "frugal: worker %zu exited (%s); the elastic job goes on without it\n", r,
                       exit->description.c_str());
        } else if (!exit->success && first_failure.ok()) {
          first_failure = Status::Unavailable("worker " + std::to_string(r) + " failed (" + exit->description + ")");
          deadline = clock.Now() + grace;
        }
      }
      continue;
    }
    if (clock.Now() > deadline) {
      for (size_t r = 0; r < ids.size(); ++r) {
        if (!done[r]) launcher.Kill(ids[r]);
      }
      deadline = Clock::time_point::max();
    }
    clock.SleepFor(kPollInterval);
  }
  return first_failure;
}

std::unique_ptr<ProcessLauncher> NewProcessLauncher(Env& env) { return std::make_unique<EnvProcessLauncher>(env); }

Status StartAndSuperviseWorkers(const LocalLaunchOptions& options, const std::string& coordinator_endpoint,
                                ProcessLauncher& launcher, Clock& clock) {
  FRUGAL_RETURN_IF_ERROR(ValidateLocalLaunch(options));
  std::vector<ProcessLauncher::Id> ids;
  Status spawn_error;
  for (int r = 0; r < options.workers; ++r) {
    Result<ProcessLauncher::Id> id =
        launcher.Spawn(options.executable, WorkerArgs(options, coordinator_endpoint, r), {});
    if (!id.ok()) {
      spawn_error = id.status();
      break;
    }
    ids.push_back(*id);
  }
  return SuperviseProcesses(ids, spawn_error, options.timeout + options.kill_grace, options.elastic, launcher, clock,
                            options.stop);
}

Status RunLocalWorkers(const LocalLaunchOptions& options, Env& env) {
  FRUGAL_RETURN_IF_ERROR(ValidateLocalLaunch(options));
  CoordinatorOptions co;
  co.world_size = options.workers;
  co.timeout = options.timeout;
  co.elastic = options.elastic;
  co.min_workers = options.min_workers;
  co.heartbeat_timeout = options.heartbeat_timeout;
  co.link_grace = options.link_grace;

  Status coordinator_status;
  // The coordinator serves in a thread while this thread supervises.
  std::atomic<bool> bound{false};
  std::string endpoint;
  std::thread coordinator([&] {
    coordinator_status = RunCoordinator(
        co,
        [&](const std::string& ep) {
          endpoint = ep;
          bound = true;
        },
        false);
    bound = true;  // also on a bind failure, so the supervisor stops waiting
  });
  while (!bound) env.SleepFor(std::chrono::milliseconds(5));
  if (endpoint.empty()) {
    coordinator.join();
    return coordinator_status.WithContext("starting the coordinator");
  }
  std::unique_ptr<ProcessLauncher> launcher = NewProcessLauncher(env);
  Status workers_status = StartAndSuperviseWorkers(options, endpoint, *launcher, env);
  coordinator.join();
  if (!workers_status.ok()) return workers_status;
  return coordinator_status.WithContext("coordinator");
}

}  // namespace frugal::engine
