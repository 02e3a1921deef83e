// SlurmBackend: `frugal cluster serve --backend slurm` runs the cluster's
// jobs through the Slurm a lab already has, in place of Frugal's own agents
// (docs/guide/cluster.md, "Slurm backend"). The policy, the controllers and the
// manager are the same; only what turns a task into a process differs:
//  - the nodes are the Slurm partition's (sinfo); each gets an agent inside
//    the server, which heartbeats the manager directly;
//  - a task that holds slots (a worker, or a `frugal train` of N workers) is
//    a Slurm batch job pinned to its node (sbatch --nodelist, one task, its
//    GPUs or CPUs); a resize submits and cancels such jobs (scancel sends
//    SIGTERM, so an elastic worker leaves its job gracefully);
//  - a task that holds none (an elastic job's coordinator) runs on the
//    server's host, which the workers must be able to reach at `host`.
// The work dir (task configs, logs, runs/) must be a directory the server and
// the nodes share, as Slurm clusters' home or scratch directories are.
//
// Thread safety: one thread drives a backend. Ownership: borrows the manager,
// which must outlive it.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "frugal/cluster/cluster_manager.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

struct SlurmOptions {
  std::string partition;          // Empty: the cluster's default partition.
  std::string frugal_binary;      // The `frugal` executable, at the same path on every node.
  std::string work_dir = ".";     // Shared by the server's host and the nodes.
  std::string host = "127.0.0.1";  // Address the server's host is reached at (coordinators listen there).
  // Slots of each node: 0 = its GPUs (Gres gpu:N), or its CPUs where it has
  // none (a CPU slot per worker, as `frugal cluster agent --slots`).
  int slots_per_node = 0;
  double poll_s = 1;              // Seconds between reads of Slurm's queue (and heartbeats).
  double command_timeout_s = 30;  // Bound on each sbatch, squeue, scancel and sinfo.
  double stop_grace_s = 15;       // A slot-less task's SIGTERM -> SIGKILL (Slurm's KillWait does the rest).
  std::string job_prefix = "frugal-";  // Slurm job name = prefix + task id (how a restarted server finds them).
};

class SlurmBackend {
 public:
  virtual ~SlurmBackend() = default;
  // InvalidArgument for bad options; Unavailable if Slurm does not answer
  // (sinfo fails) or the partition has no node. Run's polling period runs
  // on `clock`, which outlives the backend.
  static Result<std::unique_ptr<SlurmBackend>> Create(ClusterManager& manager, SlurmOptions options,
                                                      Clock& clock = Env::Default());
  // Reads the nodes and the queue once, heartbeats every node that is up
  // and submits or cancels what the manager's replies ask for. Unavailable
  // when Slurm does not answer (tasks keep running; nothing is reported).
  virtual Status RunOnce() = 0;
  // RunOnce every poll_s until `stop`. The Slurm jobs keep running after it
  // returns (a restarted server adopts them by name); the slot-less tasks on
  // this host are stopped.
  virtual void Run(const std::atomic<bool>& stop) = 0;
};

}  // namespace frugal::cluster
