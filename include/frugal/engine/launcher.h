// Starting a distributed run: the coordinator (rendezvous of the workers)
// and the local launcher behind `frugal train --workers N`, which runs the
// coordinator in this process and N `frugal worker` processes on this
// machine over loopback. Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/common/env.h"
#include "frugal/comm/transport/zmq_transport.h"
#include "frugal/common/status.h"

namespace frugal::engine {

struct CoordinatorOptions {
  std::string listen = "tcp://127.0.0.1:*";  // where workers register
  int world_size = 1;
  std::chrono::milliseconds timeout{60000};  // bound on waiting for all workers
  // Elastic (comm/membership.h): serve the job's membership until it ends,
  // instead of returning once the table is out.
  bool elastic = false;
  int min_workers = 1;
  std::chrono::milliseconds heartbeat_timeout{2000};
  // A silent member whose host does not answer is lost after this long
  // instead (comm::MembershipOptions::link_grace).
  std::chrono::milliseconds link_grace{30000};
  // The server socket's options; security as the workers' (security.h).
  comm::ZmqOptions zmq;
};

// Binds, waits until `world_size` workers have registered, sends them the
// world table and returns (elastic: serves the membership until the job
// ends). `on_bound` is called with the resolved endpoint
// before waiting (the local launcher starts workers from it).
Status RunCoordinator(const CoordinatorOptions& options, const std::function<void(const std::string&)>& on_bound,
                      bool print_table);

struct LocalLaunchOptions {
  int workers = 1;
  // Arguments of every worker after `frugal worker` (the run's flags); the
  // launcher appends --coordinator, --rank, --threads, --cluster and, for
  // ranks > 0, --quiet.
  std::vector<std::string> worker_args;
  std::string executable = "/proc/self/exe";
  // Cluster of each local worker (empty: all "local"). Lets one machine
  // exercise the topology-aware exchange.
  std::vector<std::string> clusters;
  // --compute-slowdown of each local worker (empty: none). Heterogeneous
  // workers on one machine, for experiments.
  std::vector<std::string> slowdowns;
  int threads_per_worker = 1;
  std::chrono::milliseconds timeout{60000};
  // After the first failure the other workers get `timeout` plus this long
  // to notice and exit by themselves before they are killed.
  std::chrono::milliseconds kill_grace{10000};
  // Elastic run: a failed worker does not stop the others (the coordinator
  // decides whether the job goes on); the run's result is the coordinator's.
  bool elastic = false;
  int min_workers = 1;
  std::chrono::milliseconds heartbeat_timeout{2000};
  std::chrono::milliseconds link_grace{30000};  // as CoordinatorOptions::link_grace
  // Set from a signal handler (SIGINT, SIGTERM) to stop the workers and
  // return; not owned, may be null.
  const std::atomic<bool>* stop = nullptr;
};

// The process seam of the launcher: starts, watches and kills the worker
// processes, so the supervision logic can be tested with a fake
// (src/engine/launcher_test.cc). Not thread-safe: one supervisor owns it.
class ProcessLauncher {
 public:
  using Id = int64_t;  // a pid for the POSIX launcher
  struct Exit {
    Id id = 0;
    bool success = false;     // exited by itself with code 0
    std::string description;  // "exit code 3", "signal Killed"
  };

  virtual ~ProcessLauncher() = default;

  // Starts `executable` with `args` as argv[1..] and this process's
  // environment with `env` ("KEY=VALUE" entries) replacing or adding
  // variables. An executable without a '/' is searched on PATH. Errors:
  // IOError naming the executable and the reason.
  virtual Result<Id> Spawn(const std::string& executable, const std::vector<std::string>& args,
                           const std::vector<std::string>& env) = 0;

  // The exit of one process started here that has not been reported yet, or
  // nullopt if none has exited. Does not block.
  virtual std::optional<Exit> PollExit() = 0;

  // Kills a process started here that has not been reported as exited. Its
  // exit is still reported by PollExit.
  virtual void Kill(Id id) = 0;

  // Asks such a process to stop (SIGTERM: a worker leaves or exits); it may
  // take a while or ignore it. By default the same as Kill.
  virtual void Terminate(Id id) { Kill(id); }
};

// Processes of `env` (Env::Default(): real ones), which must outlive the
// launcher; polls its own children only. The executable is resolved
// through /proc symlinks, so workers show up as "frugal worker".
std::unique_ptr<ProcessLauncher> NewProcessLauncher(Env& env);

// Waits until every process in `ids` has exited, polling `launcher` every
// few milliseconds of `clock`. Returns Ok if all succeed, else the first
// failure: `first_failure` if not Ok (a spawn error: the processes are killed
// at once), or Unavailable "worker N failed (exit code 3)" (N = position in
// ids); after it the others get `grace` to exit by themselves, then are
// killed. With `tolerate_failures` (an elastic job) a failed process is
// reported on stderr and the others go on. Once `*stop` is set (the
// launcher got SIGINT or SIGTERM) every process still running is asked to
// stop, killed kInterruptGrace later if it has not, and the result is
// Unavailable "interrupted". Never hangs.
inline constexpr std::chrono::milliseconds kInterruptGrace{5000};
Status SuperviseProcesses(const std::vector<ProcessLauncher::Id>& ids, Status first_failure,
                          std::chrono::milliseconds grace, bool tolerate_failures, ProcessLauncher& launcher,
                          Clock& clock, const std::atomic<bool>* stop = nullptr);

// Starts the workers of `options` against the coordinator at
// `coordinator_endpoint` and waits until all of them have exited, polling
// `launcher` every few milliseconds of `clock`. Returns Ok if all succeed,
// else the first failure: the spawn error, or Unavailable "worker N failed
// (exit code 3)". When a worker fails the others are given `options.timeout`
// plus `options.kill_grace` to exit by themselves, then are killed; when a
// spawn fails the workers already started are killed at once.
Status StartAndSuperviseWorkers(const LocalLaunchOptions& options, const std::string& coordinator_endpoint,
                                ProcessLauncher& launcher, Clock& clock);

// Runs the coordinator and the worker processes (StartAndSuperviseWorkers
// with the processes and the clock of `env`), waits for all of them and
// fails if any worker fails (naming it and its exit status). Never hangs.
Status RunLocalWorkers(const LocalLaunchOptions& options, Env& env);

}  // namespace frugal::engine
