// CommandJobController: cluster jobs that are the user's own program, and
// the controller that routes each job to its kind's controller.
#include <cstdio>

#include "frugal/cluster/job_controller.h"
#include "single_task_controller.h"

namespace frugal::cluster {

// Note [Command jobs]: under `frugal cluster serve --controller restart`, a
// job submitted as `command = [...]` runs as
//   frugal run --workers N --threads T --timeout-s S -- <command>
// on one node (the local form of the launcher: its coordinator on loopback,
// N children with RANK, WORLD_SIZE, ... and FRUGAL_* for frugal.init()), in
// the job's workdir, with its env and FRUGAL_RUN_DIR = <runs>/job-<id>.
// That directory is the contract with the program: a DistributedModel built
// with run_dir=os.environ["FRUGAL_RUN_DIR"] writes metrics.jsonl there,
// which the agent forwards as it does for `frugal train` (progress, and the
// measured speed the policy learns: Note [Live throughput prior]), and
// frugal.save / frugal.load keep its checkpoints there. A resize is a new
// generation: the agent stops the old process group and starts the launcher
// at the new size, and the program resumes with frugal.load, which takes a
// checkpoint written by another world size. Under the elastic controller
// (the default) a command job is resized in place instead: Note [Elastic
// command jobs] in elastic_controller.cc.

namespace {

class CommandJobController final : public SingleTaskController {
 public:
  explicit CommandJobController(CommandControllerOptions options) : options_(options) {}

  std::string Name() const override { return "command"; }
  int MinWorkers(const JobSubmission&) const override { return 1; }

 protected:
  void Fill(const JobRecord& job, int workers, TaskSpec* t) const override {
    t->args = Launch(job, workers);
    SetCommandEnvironment(job, t);
    t->resume_run = RunName(job.id);  // Where the agent reads metrics.jsonl.
    t->resume_appends = true;         // No resume arguments: the program resumes itself.
  }

 private:
  std::vector<std::string> Launch(const JobRecord& job, int workers) const {
    char timeout[32];
    std::snprintf(timeout, sizeof(timeout), "%g", options_.timeout_s);
    std::vector<std::string> args = {"run", "--workers", std::to_string(workers), "--threads",
                                     std::to_string(options_.threads_per_worker), "--timeout-s", timeout};
    // Each local worker sees its own devices of the task's (Note [Device slots]).
    const int gpus = job.spec.GpusPerWorker();
    if (gpus > 1) args.insert(args.end(), {"--gpus-per-worker", std::to_string(gpus)});
    args.push_back("--");
    args.insert(args.end(), job.spec.command.argv.begin(), job.spec.command.argv.end());
    return args;
  }

  CommandControllerOptions options_;
};

class MixedJobController final : public JobController {
 public:
  MixedJobController(std::unique_ptr<JobController> train, std::unique_ptr<JobController> command)
      : train_(std::move(train)), command_(std::move(command)) {}

  std::string Name() const override { return train_->Name(); }
  int MaxNodesPerJob(const JobSubmission& job) const override { return Of(job).MaxNodesPerJob(job); }
  int MinWorkers(const JobSubmission& job) const override { return Of(job).MinWorkers(job); }
  bool Reconfigure(JobRecord* job, bool fresh) const override { return Of(job->spec).Reconfigure(job, fresh); }
  std::multimap<int64_t, TaskSpec> Plan(const JobRecord& job) const override { return Of(job.spec).Plan(job); }
  ExitMeaning OnExit(const JobRecord& job, const std::string& task_id, int exit_code) const override {
    return Of(job.spec).OnExit(job, task_id, exit_code);
  }
  bool Superseded(const JobRecord& job, const std::string& task_id) const override {
    return Of(job.spec).Superseded(job, task_id);
  }

 private:
  const JobController& Of(const JobSubmission& job) const { return job.IsCommand() ? *command_ : *train_; }

  std::unique_ptr<JobController> train_;
  std::unique_ptr<JobController> command_;
};

}  // namespace

std::unique_ptr<JobController> NewCommandJobController(CommandControllerOptions options) {
  return std::make_unique<CommandJobController>(options);
}

std::unique_ptr<JobController> NewMixedJobController(std::unique_ptr<JobController> train,
                                                     std::unique_ptr<JobController> command) {
  return std::make_unique<MixedJobController>(std::move(train), std::move(command));
}

}  // namespace frugal::cluster
