// JobController: how a scheduling decision becomes processes. The manager
// decides *where* a job runs (its placement and generation); the controller
// says *what* each node must run for that. It is the seam where the elastic
// membership API (issue 16) plugs in: today's RestartJobController resizes by
// stopping the job's workers and starting `frugal train --resume` with the
// new worker count from the job's newest checkpoint.
//
// Thread safety: Plan() is const and keeps no state.
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
  // job.generation. REQUIRES: job.placement is non-empty.
  virtual std::map<int64_t, TaskSpec> Plan(const JobRecord& job) const = 0;
  // Largest number of nodes one job may span (the manager trims a wider
  // placement to its largest shares).
  virtual int MaxNodesPerJob() const = 0;
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

// "job-<id>-g<generation>".
std::string TaskId(int64_t job_id, int64_t generation);
// "job-<id>": the run directory name under the agent's runs dir.
std::string RunName(int64_t job_id);

}  // namespace frugal::cluster
