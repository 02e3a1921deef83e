// SingleTaskController: a job run as one task on one node and restarted at
// every placement change (Note [Generations] in cluster_manager.cc). The
// restart controller's `frugal train` jobs and the command jobs are its two
// kinds; each says only what its task runs (Fill).
#pragma once

#include <cstdint>
#include <map>

#include "frugal/cluster/job_controller.h"

namespace frugal::cluster {

class SingleTaskController : public JobController {
 public:
  int MaxNodesPerJob(const JobSubmission&) const override { return 1; }

  // Every placement change starts the task afresh, at the new size.
  bool Reconfigure(JobRecord*, bool fresh) const override { return fresh; }

  ExitMeaning OnExit(const JobRecord& job, const std::string& task_id, int exit_code) const override {
    if (job.placement.empty() || task_id != TaskId(job.id, job.generation)) return ExitMeaning::kIgnore;
    return exit_code == 0 ? ExitMeaning::kFinished : ExitMeaning::kFailed;
  }

  std::multimap<int64_t, TaskSpec> Plan(const JobRecord& job) const override {
    std::multimap<int64_t, TaskSpec> out;
    if (job.placement.empty()) return out;
    const NodeSlots& share = job.placement.front();
    TaskSpec t;
    t.task_id = TaskId(job.id, job.generation);
    t.job_id = job.id;
    t.generation = job.generation;
    t.gpus_per_worker = job.spec.GpusPerWorker();
    t.workers = share.slots / t.gpus_per_worker;
    Fill(job, t.workers, &t);
    out.emplace(share.node_id, std::move(t));
    return out;
  }

 protected:
  // What the task of `job` at `workers` workers runs: its arguments, and
  // its environment, folder and resume settings.
  virtual void Fill(const JobRecord& job, int workers, TaskSpec* t) const = 0;
};

}  // namespace frugal::cluster
