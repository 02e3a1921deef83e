#include "frugal/cluster/job_controller.h"
#include "frugal/cluster/job_file.h"

#include <cstdio>

#include "single_task_controller.h"

namespace frugal::cluster {
namespace {

class RestartJobController final : public SingleTaskController {
 public:
  explicit RestartJobController(RestartControllerOptions options) : options_(options) {}

  std::string Name() const override { return "restart"; }
  int MinWorkers(const JobSubmission&) const override { return 2; }

 protected:
  void Fill(const JobRecord& job, int workers, TaskSpec* t) const override {
    t->config_toml = job.spec.config_toml;
    t->resume_run = RunName(job.id);
    // Flags after --config override the file; these are the ones the cluster
    // owns (the worker count, where the run lives, how often it checkpoints).
    std::vector<std::string> common = {"--workers", std::to_string(workers), "--checkpoint-every",
                                       std::to_string(options_.checkpoint_every), "--threads",
                                       std::to_string(options_.threads_per_worker), "--quiet"};
    t->args = {"train", "--config", "{config}", "--run-name", RunName(job.id), "--runs-dir", "{runs}"};
    t->args.insert(t->args.end(), common.begin(), common.end());
    t->resume_args = common;
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

void SetCommandEnvironment(const JobRecord& job, TaskSpec* t) {
  t->env = job.spec.command.env;
  t->env[kRunDirEnv] = "{runs}/" + RunName(job.id);
  t->workdir = job.spec.command.workdir;
}

}  // namespace frugal::cluster
