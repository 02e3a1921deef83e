// JobController: how a scheduling decision becomes processes. The manager
// decides *where* a job runs (its placement and generation); the controller
// says *what* each node must run for that. Two controllers:
//  - ElasticJobController (the default): a job is an elastic coordinator plus
//    one `frugal worker --elastic` per slot; a resize keeps the job running
//    (leaving workers are stopped with SIGTERM and leave gracefully, new ones
//    start with --join), and only a failure restarts it from its checkpoint
//    (Note [Elastic jobs] in src/cluster/elastic_controller.cc).
//  - RestartJobController: resizes by stopping the job's workers and starting
//    `frugal train --resume` with the new worker count from the newest
//    checkpoint (the baseline the elastic path is measured against).
// and, for jobs that are the user's own program (JobSubmission::command),
//  - CommandJobController: `frugal run --workers N -- <command>`; a resize
//    restarts it at the new size (Note [Command jobs] in
//    src/cluster/command_controller.cc).
// A server runs both kinds through NewMixedJobController.
//
// Thread safety: every method is const and keeps no state.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "frugal/cluster/types.h"

namespace frugal::cluster {

class JobController {
 public:
  virtual ~JobController() = default;
  virtual std::string Name() const = 0;
  // The tasks, by node id, that run `job` on job.placement at
  // job.generation (several per node for an elastic job).
  virtual std::multimap<int64_t, TaskSpec> Plan(const JobRecord& job) const = 0;
  // Largest number of nodes `job` may span (the manager moves a wider
  // placement onto one node).
  virtual int MaxNodesPerJob(const JobSubmission& job) const = 0;
  // Smallest min_workers `job` may ask for: 1 where one worker process still
  // checkpoints (the elastic worker, a command job's script), 2 where the
  // job runs as `frugal train`, whose single-process trainer writes no
  // checkpoints.
  virtual int MinWorkers(const JobSubmission& job) const = 0;
  // Called by the manager after it moved `job` to a new placement (already in
  // job->placement, job->generation bumped). `fresh`: the job starts from
  // nothing (first start, or a restart from its checkpoint after a failure);
  // otherwise a running job is resized. Returns false if the controller
  // cannot resize it in place, and then the manager calls it again with
  // fresh = true (a restart from the checkpoint).
  virtual bool Reconfigure(JobRecord* job, bool fresh) const = 0;
  enum class ExitMeaning { kIgnore, kFinished, kFailed };
  // What the exit of task `task_id` of `job` means; kIgnore for tasks the
  // current plan no longer holds (stopped on purpose, or left the job).
  virtual ExitMeaning OnExit(const JobRecord& job, const std::string& task_id, int exit_code) const = 0;
  // Whether task `task_id` of `job`, still running on a node but no longer
  // planned, belongs to a run of the job that has ended (an elastic
  // incarnation replaced by a fresh one, or the job no longer running). Its
  // agent then stops it with SIGKILL: a graceful stop would wait, up to the
  // stop grace, for a coordinator that is gone. Default: false (SIGTERM).
  virtual bool Superseded(const JobRecord&, const std::string&) const { return false; }
};

struct RestartControllerOptions {
  int checkpoint_every = 20;   // Steps between checkpoints a resize can resume from.
  int threads_per_worker = 1;  // LibTorch threads of each worker (one CPU slot each).
};

// One-host jobs: `frugal train --config <job config> --workers N --run-name
// job-<id>` on the job's node, or `--resume runs/job-<id> --workers N` once a
// checkpoint exists (the agent checks). A resize is a new generation: the
// agent stops the old process group and starts the new one.
std::unique_ptr<JobController> NewRestartJobController(RestartControllerOptions options = {});

struct ElasticControllerOptions {
  int checkpoint_every = 20;          // Steps between checkpoints (the fallback restart resumes from them).
  int threads_per_worker = 1;
  int max_nodes_per_job = 1;          // >1 needs a runs dir shared by the agents (checkpoints, metrics).
  double heartbeat_timeout_s = 5;     // A worker silent this long is dead (coordinator and workers).
  double coordinator_timeout_s = 300; // Bound on forming each generation.
  double worker_timeout_s = 60;       // A command job's `frugal run --timeout-s` (its network waits).
};

// Jobs as elastic Frugal jobs (Note [Elastic jobs]): `frugal train` jobs as
// `frugal worker --elastic` members, command jobs as `frugal run --elastic`
// members (Note [Elastic command jobs]); a resize is in place.
std::unique_ptr<JobController> NewElasticJobController(ElasticControllerOptions options = {});

struct CommandControllerOptions {
  int threads_per_worker = 1;  // Torch threads of each worker (`frugal run --threads`).
  double timeout_s = 60;       // `frugal run --timeout-s`: bound on the workers' network waits.
};

// Command jobs: `frugal run --workers N --threads T --timeout-s S --
// <command>` on the job's one node, in its workdir, with its env plus
// FRUGAL_RUN_DIR=<runs>/job-<id>; a resize is a restart at the new size,
// from which the program resumes with frugal.load.
std::unique_ptr<JobController> NewCommandJobController(CommandControllerOptions options = {});

// Routes each job to `command` if it is a command job
// (JobSubmission::IsCommand), else to `train`. Name() is train's.
std::unique_ptr<JobController> NewMixedJobController(std::unique_ptr<JobController> train,
                                                     std::unique_ptr<JobController> command);

// "job-<id>-g<generation>".
std::string TaskId(int64_t job_id, int64_t generation);
// "job-<id>-g<incarnation>-c": an elastic job's coordinator task.
std::string CoordinatorTaskId(int64_t job_id, int64_t incarnation);
// "job-<id>-g<generation>..." -> (id, generation); false if malformed.
bool ParseTaskId(const std::string& task_id, int64_t* job_id, int64_t* generation);
// "job-<id>": the run directory name under the agent's runs dir.
std::string RunName(int64_t job_id);
// A command job's task runs in the job's workdir with its env and
// FRUGAL_RUN_DIR = {runs}/<RunName> (Note [Command jobs]), whichever
// controller starts it.
void SetCommandEnvironment(const JobRecord& job, TaskSpec* t);

}  // namespace frugal::cluster
