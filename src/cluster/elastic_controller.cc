// ElasticJobController: cluster jobs as elastic Frugal jobs (the
// membership API).
#include <algorithm>
#include <cstdio>
#include <map>

#include "frugal/cluster/job_controller.h"

namespace frugal::cluster {

// Note [Elastic jobs]: a job started by this controller is
//   - a coordinator task on its home node (the first node of the placement
//     it started on): `frugal coordinator --elastic --world N0`, whose
//     printed endpoint the agent reports back (TaskEndpoint);
//   - once that endpoint is known, one `frugal worker --elastic` task per
//     slot of its placement (JobRecord::members). The first N0 form the
//     first world; workers added later run with --join and receive the
//     model state from rank 0.
// A resize keeps the incarnation: members on nodes that lost slots are
// dropped from the plan (newest first), so their agent stops them with
// SIGTERM, which makes an elastic worker leave at its next check gate (the
// membership "leave" request: the survivors form the next generation and
// train on); nodes that gained slots get new --join members. The scheduler
// picks which node frees slots, which `frugal job resize` (the highest ranks
// leave, wherever they run) could not honour. Task ids never repeat (a new
// member is named by the generation that added it), so an agent never
// mistakes a new member for one it already ran.
//
// A fresh incarnation (first start, a failed task, the coordinator's node
// lost, a resize before the job reported a step of its first world) starts a new
// coordinator and workers that resume from the newest complete checkpoint
// ("--resume-from {checkpoint}", resolved by the agent): the
// restart-from-checkpoint fallback. The coordinator runs with
// --min-workers 1: the job's minimum is the scheduler's business, and a
// preempted job's workers leave one by one.
//
// Note [Elastic command jobs]: a command job (Note [Command jobs] in
// command_controller.cc) runs the same way, its members being
//   frugal run --elastic --coordinator C --workers 1 [--join] -- <command>
// in the job's workdir, with its env and FRUGAL_RUN_DIR: one own-script
// worker each, which joins the coordinator as `frugal worker --elastic`
// does (Note [Elastic scripts] in python/frugal/_model.py). So a resize
// keeps the running scripts, a --join member receives the state (the
// user's optimizer and schedulers with it) from rank 0, SIGTERM makes a
// script leave at its model's next check gate, and a job may span nodes.
// A fresh incarnation's first world resumes itself with frugal.load from
// FRUGAL_RUN_DIR, as under the command controller: no resume arguments.

namespace {

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

class ElasticJobController final : public JobController {
 public:
  explicit ElasticJobController(ElasticControllerOptions options) : options_(options) {}

  std::string Name() const override { return "elastic"; }
  int MaxNodesPerJob(const JobSubmission&) const override { return options_.max_nodes_per_job; }
  int MinWorkers(const JobSubmission&) const override { return 1; }

  bool Reconfigure(JobRecord* job, bool fresh) const override {
    if (job->placement.empty()) {
      job->members.clear();
      job->home_node = 0;
      job->coordinator.clear();
      return true;
    }
    if (fresh) {
      job->formed = false;
      job->incarnation = job->generation;
      job->home_node = job->placement.front().node_id;
      job->coordinator.clear();
      job->members.clear();
      int index = 0;
      const int gpus = job->spec.GpusPerWorker();
      for (const NodeSlots& s : job->placement) {
        for (int k = 0; k < s.slots / gpus; ++k) job->members.push_back({s.node_id, job->generation, index++, false});
      }
      return true;
    }
    // Before the first world formed, a removed worker may be one the
    // coordinator still waits for: start afresh (nothing trained is lost).
    if (job->coordinator.empty() || !job->formed) return false;
    Resize(job);
    return true;
  }

  ExitMeaning OnExit(const JobRecord& job, const std::string& task_id, int exit_code) const override {
    if (job.placement.empty()) return ExitMeaning::kIgnore;
    if (task_id == CoordinatorTaskId(job.id, job.incarnation)) {
      return exit_code == 0 ? ExitMeaning::kFinished : ExitMeaning::kFailed;
    }
    for (const ElasticMember& m : job.members) {
      if (MemberTaskId(job.id, m) == task_id) {
        // A worker that ends well ends with the job, which the coordinator's
        // exit reports; one that fails takes the fallback restart.
        return exit_code == 0 ? ExitMeaning::kIgnore : ExitMeaning::kFailed;
      }
    }
    return ExitMeaning::kIgnore;
  }

  // Members of incarnation I were added at generations >= I (generations
  // only grow), so a task added before the current incarnation belongs to
  // an ended one; a member removed by an in-place shrink does not, and
  // leaves gracefully. A finished job's workers are ending on their own.
  bool Superseded(const JobRecord& job, const std::string& task_id) const override {
    int64_t id = 0, since = 0;
    if (!ParseTaskId(task_id, &id, &since) || id != job.id || job.state == JobState::kFinished) return false;
    if (job.state != JobState::kRunning || job.placement.empty()) return true;
    return since < job.incarnation;
  }

  std::multimap<int64_t, TaskSpec> Plan(const JobRecord& job) const override {
    std::multimap<int64_t, TaskSpec> out;
    if (job.placement.empty() || job.home_node == 0) return out;
    out.emplace(job.home_node, CoordinatorTask(job));
    if (job.coordinator.empty()) return out;  // Workers start once its endpoint is known.
    for (const ElasticMember& m : job.members) out.emplace(m.node_id, WorkerTask(job, m));
    return out;
  }

 private:
  static std::string MemberTaskId(int64_t job_id, const ElasticMember& m) {
    return TaskId(job_id, m.since) + "-w" + std::to_string(m.index);
  }

  // Members on nodes that lost slots leave (newest first); nodes that gained
  // slots get new --join members, named by the current generation.
  static void Resize(JobRecord* job) {
    std::map<int64_t, int> want;  // Workers by node.
    for (const NodeSlots& s : job->placement) want[s.node_id] += s.slots / job->spec.GpusPerWorker();
    std::vector<ElasticMember> kept;
    std::map<int64_t, int> have;
    std::vector<ElasticMember> old = job->members;
    std::stable_sort(old.begin(), old.end(), [](const ElasticMember& a, const ElasticMember& b) {
      return a.since != b.since ? a.since < b.since : a.index < b.index;
    });
    for (const ElasticMember& m : old) {
      if (have[m.node_id] < want[m.node_id]) {
        ++have[m.node_id];
        kept.push_back(m);
      }
    }
    int index = 0;
    for (const auto& [node, workers] : want) {
      for (int k = have[node]; k < workers; ++k) kept.push_back({node, job->generation, index++, true});
    }
    job->members = std::move(kept);
  }

  TaskSpec Base(const JobRecord& job, const std::string& id) const {
    TaskSpec t;
    t.task_id = id;
    t.job_id = job.id;
    t.generation = job.incarnation;
    t.config_toml = job.spec.config_toml;
    t.resume_run = RunName(job.id);
    t.resume_appends = true;
    return t;
  }

  TaskSpec CoordinatorTask(const JobRecord& job) const {
    TaskSpec t = Base(job, CoordinatorTaskId(job.id, job.incarnation));
    int first_world = 0;
    for (const ElasticMember& m : job.members) first_world += m.join ? 0 : 1;
    t.args = {"coordinator", "--elastic", "--listen", "tcp://{host}:*", "--world",
              std::to_string(std::max(1, first_world)), "--min-workers", "1", "--timeout-s",
              Seconds(options_.coordinator_timeout_s), "--heartbeat-timeout-s",
              Seconds(options_.heartbeat_timeout_s)};
    t.reports_endpoint = true;
    return t;
  }

  TaskSpec WorkerTask(const JobRecord& job, const ElasticMember& m) const {
    TaskSpec t = Base(job, MemberTaskId(job.id, m));
    t.workers = 1;
    t.gpus_per_worker = job.spec.GpusPerWorker();
    t.reads_metrics = false;  // The coordinator's agent forwards the run's records.
    if (job.spec.IsCommand()) {
      FillCommand(job, m, &t);
      return t;
    }
    // Flags after --config override the file: the ones the cluster owns.
    t.args = {"worker", "--elastic", "--config", "{config}", "--coordinator", job.coordinator,
              "--listen", "tcp://{host}:*", "--run-name", RunName(job.id), "--runs-dir", "{runs}",
              "--checkpoint-every", std::to_string(options_.checkpoint_every), "--threads",
              std::to_string(options_.threads_per_worker), "--heartbeat-timeout-s",
              Seconds(options_.heartbeat_timeout_s), "--quiet"};
    if (m.join) {
      t.args.push_back("--join");  // Receives the state from rank 0; nothing to resume.
    } else {
      t.resume_args = {"--resume-from", "{checkpoint}"};
    }
    return t;
  }

  // Note [Elastic command jobs].
  void FillCommand(const JobRecord& job, const ElasticMember& m, TaskSpec* t) const {
    // --listen on the agent's host: peers on other hosts reach the script
    // there, and off loopback the agent adds the job's keys (Note [Job keys]).
    t->args = {"run", "--elastic", "--coordinator", job.coordinator, "--workers", "1", "--listen", "tcp://{host}:*",
               "--threads", std::to_string(options_.threads_per_worker), "--timeout-s",
               Seconds(options_.worker_timeout_s), "--heartbeat-timeout-s", Seconds(options_.heartbeat_timeout_s)};
    if (m.join) t->args.push_back("--join");
    t->args.push_back("--");
    t->args.insert(t->args.end(), job.spec.command.argv.begin(), job.spec.command.argv.end());
    SetCommandEnvironment(job, t);
  }

  ElasticControllerOptions options_;
};

}  // namespace

std::unique_ptr<JobController> NewElasticJobController(ElasticControllerOptions options) {
  return std::make_unique<ElasticJobController>(options);
}

std::string CoordinatorTaskId(int64_t job_id, int64_t incarnation) { return TaskId(job_id, incarnation) + "-c"; }

}  // namespace frugal::cluster
