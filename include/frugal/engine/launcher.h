// Starting a distributed run: the coordinator (rendezvous of the workers)
// and the local launcher behind `frugal train --workers N`, which runs the
// coordinator in this process and N `frugal worker` processes on this
// machine over loopback. Torch-free.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::engine {

struct CoordinatorOptions {
  std::string listen = "tcp://127.0.0.1:*";  // where workers register
  int world_size = 1;
  std::chrono::milliseconds timeout{60000};  // bound on waiting for all workers
};

// Binds, waits until `world_size` workers have registered, sends them the
// world table and returns. `on_bound` is called with the resolved endpoint
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
};

// Runs the coordinator and the worker processes, waits for all of them and
// fails if any worker fails (naming it and its exit status). When one worker
// fails the others are given `timeout` plus a grace period to notice and exit
// by themselves, then they are terminated. Never hangs.
Status RunLocalWorkers(const LocalLaunchOptions& options);

}  // namespace frugal::engine
