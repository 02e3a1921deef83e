#include "frugal/cluster/job_controller.h"

#include <cstdio>

namespace frugal::cluster {
namespace {

class RestartJobController final : public JobController {
 public:
  explicit RestartJobController(RestartControllerOptions options) : options_(options) {}

  std::string Name() const override { return "restart"; }
  int MaxNodesPerJob(const JobSubmission&) const override { return 1; }
  int MinWorkers(const JobSubmission&) const override { return 2; }

  // Every placement change is a restart from the checkpoint.
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
    t.workers = share.slots;
    t.config_toml = job.spec.config_toml;
    t.resume_run = RunName(job.id);
    // Flags after --config override the file; these are the ones the cluster
    // owns (the worker count, where the run lives, how often it checkpoints).
    std::vector<std::string> common = {"--workers", std::to_string(share.slots), "--checkpoint-every",
                                       std::to_string(options_.checkpoint_every), "--threads",
                                       std::to_string(options_.threads_per_worker), "--quiet"};
    t.args = {"train", "--config", "{config}", "--run-name", RunName(job.id), "--runs-dir", "{runs}"};
    t.args.insert(t.args.end(), common.begin(), common.end());
    t.resume_args = common;
    out.emplace(share.node_id, std::move(t));
    return out;
  }

 private:
  RestartControllerOptions options_;
};

}  // namespace

std::unique_ptr<JobController> NewRestartJobController(RestartControllerOptions options) {
  return std::make_unique<RestartJobController>(options);
}

std::string TaskId(int64_t job_id, int64_t generation) {
  return "job-" + std::to_string(job_id) + "-g" + std::to_string(generation);
}

bool ParseTaskId(const std::string& s, int64_t* job, int64_t* gen) {
  long j = 0, g = 0;
  if (std::sscanf(s.c_str(), "job-%ld-g%ld", &j, &g) != 2) return false;
  *job = j;
  *gen = g;
  return true;
}

std::string RunName(int64_t job_id) { return "job-" + std::to_string(job_id); }

}  // namespace frugal::cluster
