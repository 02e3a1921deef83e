// Agent: `frugal cluster agent` on each host. Every heartbeat_s it reports
// its slots, its running tasks, the tasks that exited and the new records of
// their metrics.jsonl to the server, and makes the host run exactly the tasks
// the server lists in its reply: it starts the missing ones (a `frugal`
// process each, in its own process group) and stops the others (SIGTERM to
// the group, SIGKILL after stop_grace_s). See Note [Generations] in
// src/cluster/cluster_manager.cc.
//
// When the server does not answer, the agent keeps its tasks running and
// retries; a restarted server re-adopts them from the next heartbeat.
//
// Thread safety: one thread drives an Agent. Ownership: owns the client.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "frugal/cluster/client.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

struct AgentOptions {
  std::string node;            // Host name the server knows this node by (default: hostname).
  int slots = 1;               // Worker slots: CPU slots, or with `gpus` 0 (= as many) or their count.
  std::string frugal_binary;   // The `frugal` executable tasks run.
  std::string work_dir = ".";  // Task configs and logs; runs go to <work_dir>/runs.
  std::string host = "127.0.0.1";  // Address this host's tasks listen on and advertise ("{host}").
  double heartbeat_s = 1;
  double stop_grace_s = 15;    // SIGTERM -> SIGKILL.
  // The host's GPUs, by the ids CUDA_VISIBLE_DEVICES takes: the slots are
  // these devices, each task gets its own (Note [Device slots] in
  // src/cluster/agent.cc). Empty: CPU slots, no device is assigned.
  std::vector<std::string> gpus;
};

// `--gpus`: "auto" (the agent's CUDA_VISIBLE_DEVICES, else one id per
// /dev/nvidia<N>), or ids separated by commas ("0,1,2,3", "GPU-<uuid>,...").
// InvalidArgument for an empty, repeated or malformed id, or "auto" that
// finds no GPU. `dev_dir` is where auto looks (tests).
Result<std::vector<std::string>> ParseGpus(const std::string& text, const std::string& dev_dir = "/dev");

// Whether HOST names this machine's loopback (127.x.x.x, localhost, ::1),
// where nobody else can connect.
bool IsLoopbackHost(const std::string& host);

class Agent {
 public:
  virtual ~Agent() = default;
  // InvalidArgument for bad options (missing binary, slots out of range).
  static Result<std::unique_ptr<Agent>> Create(std::unique_ptr<ClusterClient> client, AgentOptions options);
  // One heartbeat and the reconciliation it asks for. Unavailable if the
  // server did not answer (tasks keep running).
  virtual Status RunOnce() = 0;
  // Heartbeats until `stop` is set, then stops every task (waiting up to
  // stop_grace_s). Returns only on stop.
  virtual void Run(const std::atomic<bool>& stop) = 0;
  virtual void StopAll() = 0;
};

}  // namespace frugal::cluster
