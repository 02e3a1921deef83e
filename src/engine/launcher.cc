#include "frugal/engine/launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "frugal/comm/rendezvous.h"

extern char** environ;

namespace frugal::engine {

Status RunCoordinator(const CoordinatorOptions& options, const std::function<void(const std::string&)>& on_bound,
                      bool print_table) {
  if (options.world_size < 1) return Status::InvalidArgument("--world must be >= 1");
  FRUGAL_ASSIGN_OR_RETURN(auto server, comm::RendezvousServer::Bind(options.listen, options.world_size));
  if (on_bound) on_bound(server->endpoint());
  FRUGAL_ASSIGN_OR_RETURN(std::vector<comm::PeerInfo> table, server->Serve(options.timeout));
  if (print_table) {
    for (const auto& p : table) std::printf("rank %d  cluster %s  %s\n", p.rank, p.cluster.c_str(), p.endpoint.c_str());
    std::fflush(stdout);
  }
  return Status::Ok();
}

namespace {

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The path of this executable, so workers show up as "frugal worker ..." in ps.
std::string ResolveExecutable(const std::string& exe) {
  char buf[4096];
  ssize_t n = readlink(exe.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return exe;
  buf[n] = '\0';
  return buf;
}

Result<pid_t> Spawn(const std::string& exe_in, const std::vector<std::string>& args) {
  std::string exe = ResolveExecutable(exe_in);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return Status::IOError("cannot start worker " + exe + ": " + std::strerror(rc));
  return pid;
}

}  // namespace

Status RunLocalWorkers(const LocalLaunchOptions& options) {
  if (options.workers < 1) return Status::InvalidArgument("--workers must be >= 1");
  if (!options.clusters.empty() && static_cast<int>(options.clusters.size()) != options.workers) {
    return Status::InvalidArgument("--local-clusters names " + std::to_string(options.clusters.size()) +
                                   " clusters for " + std::to_string(options.workers) + " workers");
  }
  if (!options.slowdowns.empty() && static_cast<int>(options.slowdowns.size()) != options.workers) {
    return Status::InvalidArgument("--local-slowdowns gives " + std::to_string(options.slowdowns.size()) +
                                   " factors for " + std::to_string(options.workers) + " workers");
  }
  CoordinatorOptions co;
  co.world_size = options.workers;
  co.timeout = options.timeout;

  std::vector<pid_t> pids;
  Status spawn_error;
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
  while (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (endpoint.empty()) {
    coordinator.join();
    return coordinator_status.WithContext("starting the coordinator");
  }
  for (int r = 0; r < options.workers; ++r) {
    std::vector<std::string> args = {"worker"};
    args.insert(args.end(), options.worker_args.begin(), options.worker_args.end());
    args.insert(args.end(), {"--coordinator", endpoint, "--rank", std::to_string(r), "--threads",
                             std::to_string(options.threads_per_worker)});
    if (!options.clusters.empty()) args.insert(args.end(), {"--cluster", options.clusters[r]});
    if (!options.slowdowns.empty()) args.insert(args.end(), {"--compute-slowdown", options.slowdowns[r]});
    if (r > 0) args.push_back("--quiet");
    auto pid = Spawn(options.executable, args);
    if (!pid.ok()) {
      spawn_error = pid.status();
      break;
    }
    pids.push_back(*pid);
  }

  // Supervise: collect exits; after the first failure give the rest the
  // network timeout plus a grace period to fail by themselves, then kill.
  Status first_failure = spawn_error;
  size_t remaining = pids.size();
  std::vector<bool> done(pids.size(), false);
  auto deadline = std::chrono::steady_clock::time_point::max();
  if (!spawn_error.ok()) deadline = std::chrono::steady_clock::now();
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] != pid || done[r]) continue;
        done[r] = true;
        --remaining;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && first_failure.ok()) {
          first_failure = Status::Unavailable("worker " + std::to_string(r) + " failed (" + DescribeExit(status) + ")");
          deadline = std::chrono::steady_clock::now() + options.timeout + std::chrono::seconds(10);
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (!done[r]) kill(pids[r], SIGKILL);
      }
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  coordinator.join();
  if (!first_failure.ok()) return first_failure;
  return coordinator_status.WithContext("coordinator");
}

}  // namespace frugal::engine
