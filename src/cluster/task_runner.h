// TaskRunner (internal): how an agent's tasks become processes. The agent
// decides which tasks run (what the server lists) and reads their metrics;
// the runner starts, polls and stops them:
//  - the local runner: a process group on this host (`frugal cluster agent`);
//  - the Slurm runner: a Slurm batch job on one node (`frugal cluster serve
//    --backend slurm`, src/cluster/slurm_backend.cc).
// A task is known to the runner by a handle (a pid, a Slurm job id).
//
// Thread safety: one thread drives a runner (its agent's).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/cluster/agent.h"
#include "frugal/cluster/client.h"
#include "frugal/cluster/types.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Once per heartbeat, before the polls (the Slurm runner reads the queue).
  virtual void Refresh() {}
  // Starts `argv` for `spec` in `cwd`, output appended to `log_path`, with
  // spec.env (its "{runs}" already expanded) added to its environment.
  virtual Result<int64_t> Start(const TaskSpec& spec, const std::vector<std::string>& argv, const std::string& cwd,
                                const std::string& log_path) = 0;
  // The exit code once the task ended (128 + signal if killed), else nullopt.
  virtual std::optional<int> PollExit(int64_t handle) = 0;
  // Asks the task to stop (SIGTERM: an elastic worker leaves its job); `kill`:
  // at once (SIGKILL).
  virtual void Stop(int64_t handle, bool kill) = 0;
  // After PollExit reported the exit: kills what it left behind.
  virtual void Cleanup(int64_t /*handle*/) {}
  // What "{host}" in the task's arguments stands for: the address its
  // processes listen on.
  virtual std::string Host(const TaskSpec& spec) const = 0;
  // Tasks of this agent that already run when it starts (re-adopted after a
  // server restart): task id -> handle.
  virtual std::map<std::string, int64_t> Running() { return {}; }
};

// Process groups on this host (process.h); "{host}" is `host`.
std::unique_ptr<TaskRunner> NewLocalTaskRunner(std::string host);

// An agent whose tasks `runner` runs (Agent::Create: the local runner).
// Errors as Agent::Create.
Result<std::unique_ptr<Agent>> CreateAgentWithRunner(std::unique_ptr<ClusterClient> client, AgentOptions options,
                                                     std::unique_ptr<TaskRunner> runner);

}  // namespace frugal::cluster
