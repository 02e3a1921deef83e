// Value types of the live cluster service (docs/guide/cluster.md): what the
// server stores about nodes, jobs, allocations and events, what an agent
// reports, and the tasks the server asks an agent to run.
//
// Thread safety: plain value types.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frugal/sched/cluster.h"

namespace frugal::cluster {

// A host running `frugal cluster agent`; `slots` are its GPUs (CPU slots on
// a machine without one).
struct NodeRecord {
  int64_t id = 0;
  std::string name;
  int slots = 0;
  bool up = false;
  double last_heartbeat = 0;  // Unix seconds; not persisted (a restarted server grants a grace period).
};

enum class JobState { kQueued, kRunning, kFinished, kFailed, kCancelled };
const char* JobStateName(JobState s);
std::optional<JobState> ParseJobState(const std::string& name);
inline bool IsTerminal(JobState s) { return s == JobState::kFinished || s == JobState::kFailed || s == JobState::kCancelled; }

// A job that is the user's own program rather than a built-in model: the
// agent runs it under `frugal run --elastic` (Note [Elastic command jobs] in
// src/cluster/elastic_controller.cc) or, with the restart controller,
// `frugal run --workers N -- <argv>` (Note [Command jobs] in
// src/cluster/command_controller.cc). Validated by CheckSubmission
// (frugal/cluster/job_file.h).
struct CommandSpec {
  std::vector<std::string> argv;            // The program and its arguments; empty: not a command job.
  std::map<std::string, std::string> env;   // Added to the program's environment.
  std::string workdir;                      // Absolute; the program's working directory (empty: the agent's work dir).
  // Slots (GPUs) each worker process takes, 1 to 64; on an agent with
  // --gpus they are its own devices (Note [Device slots] in
  // src/cluster/agent.cc).
  int gpus_per_worker = 1;
  // The planner's samples/s over all workers at 1, 2, ... workers on one
  // node (frugal.plan's Plan.job_prior), the job's throughput prior
  // (Note [Live throughput prior]); empty: none, the speed is learned.
  std::vector<double> planned_samples_per_s;
};

// What a user submits: a `frugal train` configuration (TOML text; the
// server never interprets its options, `frugal train` validates them), or
// a command (the user's own program), and the range of worker counts the
// job may run with.
struct JobSubmission {
  std::string name;
  std::string config_toml;
  int min_workers = 1;
  int max_workers = 1;
  int max_steps = 0;  // From the configuration, for progress; 0 = unknown.
  // Jobs with the same profile run at the same speed at each worker count,
  // so the server shares what one measured with the others
  // (Note [Live throughput prior] in src/cluster/live_speed.h). `frugal cluster
  // submit` derives it from the configuration without the keys that do not change
  // the speed (ProfileOfConfig in src/cli), or for a command job from its
  // command and environment (CommandProfile); empty: the job shares nothing.
  std::string profile;
  CommandSpec command;  // Set: the job is this command, and config_toml is empty.

  bool IsCommand() const { return !command.argv.empty(); }
  // Slots one worker process takes: a command job's gpus_per_worker, else 1.
  int GpusPerWorker() const { return IsCommand() ? std::max(1, command.gpus_per_worker) : 1; }
};

// One share of a job's placement, by node id (not the scheduler's index).
struct NodeSlots {
  int64_t node_id = 0;
  int slots = 0;
  bool operator==(const NodeSlots& o) const { return node_id == o.node_id && slots == o.slots; }
};

// One worker process of an elastic job: task "job-<id>-g<since>-w<index>"
// on `node_id`; `join` if it joined the running job (--join) rather than
// forming its first world.
struct ElasticMember {
  int64_t node_id = 0;
  int64_t since = 0;
  int index = 0;
  bool join = false;
  bool operator==(const ElasticMember& o) const {
    return node_id == o.node_id && since == o.since && index == o.index && join == o.join;
  }
};

struct JobRecord {
  int64_t id = 0;
  JobSubmission spec;
  JobState state = JobState::kQueued;
  double submit_time = 0;
  double start_time = -1;
  double finish_time = -1;
  // Bumped on every placement change; a task belongs to one generation and
  // is stopped when the job moves on (Note [Generations] in cluster_manager.cc).
  int64_t generation = 0;
  std::vector<NodeSlots> placement;  // Empty while queued.
  double progress = 0;               // Samples trained so far (from metrics.jsonl).
  double attained_service = 0;       // Slot-seconds held.
  int last_step = 0;
  int restarts = 0;                  // Failed generations restarted from a checkpoint.
  std::string message;               // Why it failed, or the last notable change.
  // Elastic jobs (Note [Elastic jobs] in src/cluster/elastic_controller.cc):
  // the generation of the job's last fresh start (its coordinator and first
  // workers are named by it), the node running its coordinator, and its
  // worker processes. Persisted; `coordinator` (the endpoint its agent
  // reports) is not: the agent reports it again after a server restart.
  int64_t incarnation = 0;
  int64_t home_node = 0;
  std::vector<ElasticMember> members;
  std::string coordinator;
  // A step record arrived since the last fresh start: the first world has
  // formed, so workers may leave. Not persisted (on loading: a coordinator
  // is known and the job has made steps).
  bool formed = false;

  int Slots() const {
    int n = 0;
    for (const NodeSlots& s : placement) n += s.slots;
    return n;
  }
  // Worker processes: the slots over the slots each takes.
  int Workers() const { return Slots() / spec.GpusPerWorker(); }
};

// One allocation interval of a job on a node (the dashboard's timeline).
struct AllocationRecord {
  int64_t job_id = 0;
  int64_t node_id = 0;
  int slots = 0;
  int64_t generation = 0;
  double start = 0;
  double end = -1;  // -1 while open.
};

struct EventRecord {
  int64_t id = 0;
  double time = 0;
  std::string kind;  // "submit", "resize", "finish", "node-down", ...
  int64_t job_id = 0;
  int64_t node_id = 0;
  std::string message;
};

// One metrics.jsonl record of a job, as the agent forwards it.
struct MetricSample {
  int64_t job_id = 0;
  int step = 0;
  double time = 0;            // Server time when received.
  int workers = 0;
  int global_batch = 0;
  double loss = -1;           // -1: not in this record.
  double accuracy = -1;       // test_accuracy; -1: not an evaluation record.
  double samples_per_s = -1;
};

// A process the server wants an agent to run: `frugal <args...>`, where
// "{config}", "{runs}" and "{host}" stand for the task's config file, the
// agent's runs dir and the agent's --host. With `resume_run` set and a
// complete checkpoint in that run directory, `resume_args` apply (see
// resume_appends).
struct TaskSpec {
  std::string task_id;  // "job-<id>-g<generation>[-c|-w<index>]"
  int64_t job_id = 0;
  // The job's generation (restart controller) or incarnation (elastic): the
  // agent starts no task of a job while one of another generation of it is
  // still stopping (they share the run directory).
  int64_t generation = 0;
  int workers = 0;
  // Slots each worker takes: the agent gives the task workers x this of its
  // devices (Note [Device slots] in src/cluster/agent.cc).
  int gpus_per_worker = 1;
  std::vector<std::string> args;
  std::string config_toml;      // Written by the agent to <work>/<task_id>.toml; "{config}" in args names it.
  std::string resume_run;       // Run directory name, relative to the agent's runs dir.
  std::vector<std::string> resume_args;
  // false: a checkpoint replaces args by `train --resume <dir>` + resume_args;
  // true: resume_args are appended to args, with "{checkpoint}" naming the
  // newest complete checkpoint step directory.
  bool resume_appends = false;
  // An elastic coordinator: the agent reports the endpoint it prints
  // ("... listening on tcp://HOST:PORT") back in TaskEndpoint.
  bool reports_endpoint = false;
  // The agent forwards the run's metrics.jsonl records while this task runs.
  // One task per job does (the elastic coordinator; the restart
  // controller's one process), so that a job spanning several agents that
  // share the runs dir has each record sent once.
  bool reads_metrics = true;
  // The transport of a task that listens on its host's address ("{host}" in
  // args; Note [Job keys] in src/cluster/cluster_manager.cc): the job's
  // CurveZMQ key pair (Z85), shared by all its processes, or, with
  // insecure_transport (`serve --insecure-jobs`), plain TCP. An agent whose
  // --host is not loopback writes the pair to <task_id>.key (mode 0600) and
  // runs the task with --key/--authorized-keys, or with --insecure.
  std::string job_public_key;
  std::string job_secret_key;  // Never logged.
  bool insecure_transport = false;
  // A command job's task (Note [Command jobs]): variables added to its
  // environment ("{runs}" in a value stands for the agent's runs dir), and
  // the directory it runs in (empty: the agent's work dir).
  std::map<std::string, std::string> env;
  std::string workdir;
};

struct TaskEndpoint {
  std::string task_id;
  std::string endpoint;
};

struct TaskExit {
  std::string task_id;
  int exit_code = 0;  // 128 + signal for a signalled process.
};

struct AgentReport {
  std::string node;
  int slots = 0;
  std::vector<std::string> running;  // task ids alive on the node
  std::vector<TaskExit> exited;      // since the last acknowledged report
  std::vector<MetricSample> samples; // new metrics.jsonl records (job_id set)
  std::vector<TaskEndpoint> endpoints;  // of the running tasks with reports_endpoint
};

struct AgentReply {
  int64_t node_id = 0;
  std::vector<TaskSpec> tasks;  // Everything the node should run now; the rest is stopped.
  // Of the tasks the node reported running and the server no longer plans,
  // those of a run that has ended (JobController::Superseded): stopped with
  // SIGKILL at once rather than SIGTERM and the stop grace.
  std::vector<std::string> superseded;
};

}  // namespace frugal::cluster
