#include "frugal/cluster/cluster_manager.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "frugal/cluster/job_file.h"
#include "frugal/comm/transport/security.h"
#include "manager_impl.h"

namespace frugal::cluster {

// Note [Generations]: a job's tasks are named by (job, generation). Every
// placement change (start, resize, preemption, a node lost, a restart after
// a failure) bumps the generation, and an agent runs exactly the tasks of the
// current generations that the server lists in its heartbeat reply, stopping
// every other. So the server's state is the only truth: an agent that
// missed a reply, a server that restarted, or a duplicate exit report all
// converge on the next heartbeat, and an exit of an old generation is ignored
// (it was stopped on purpose).

namespace {

std::string JobKeySetting(int64_t job_id) { return "job_key_" + std::to_string(job_id); }

// A job's name shows in the dashboard, the event log and the CLI's tables,
// and scripts name files and rows after it (bench/cluster): letters, digits
// and ._- only, not starting with '.' or '-', so it can be none of "..",
// "a/../b", a command-line flag or a line break wherever it ends up.
Status CheckJobName(const std::string& name) {
  constexpr size_t kMaxName = 64;
  auto allowed = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; };
  const bool ok = name.size() <= kMaxName && std::all_of(name.begin(), name.end(), allowed) &&
                  (name.empty() || (name[0] != '.' && name[0] != '-'));
  if (ok) return Status::Ok();
  std::string shown;  // Printable, so that the message stays one line.
  for (char c : name.substr(0, kMaxName)) shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return Status::InvalidArgument("job name must be at most " + std::to_string(kMaxName) +
                                 " letters, digits, '.', '_' or '-', not starting with '.' or '-' (rename it, or "
                                 "set name = \"...\" in the job's file); got '" + shown +
                                 (name.size() > kMaxName ? "...'" : "'"));
}

}  // namespace


Status ClusterManager::Impl::Load() {
  FRUGAL_ASSIGN_OR_RETURN(nodes_, store_->LoadNodes());
  FRUGAL_ASSIGN_OR_RETURN(jobs_, store_->LoadJobs());
  FRUGAL_ASSIGN_OR_RETURN(auto profiles, store_->LoadProfileRates());
  for (const auto& [profile, rates] : profiles) {
    for (const auto& [workers, rate] : rates) profile_rates_[profile].Set(workers, rate);
  }
  const double now = clock_.WallSeconds();
  for (NodeRecord& n : nodes_) n.last_heartbeat = now;  // Grace period after a restart.
  for (JobRecord& j : jobs_) {
    if (IsTerminal(j.state)) continue;
    j.formed = !j.coordinator.empty() && j.last_step > 0;
    LiveSpeed& speed = TrackSpeed(j);
    FRUGAL_ASSIGN_OR_RETURN(std::vector<MetricSample> samples, store_->LoadSamples(j.id));
    for (const MetricSample& m : samples) speed.Observe(m.workers, m.samples_per_s);
  }
  resize_cost_.seconds = options_.policy_options.reallocation_cost;
  FRUGAL_ASSIGN_OR_RETURN(std::string cost, store_->LoadSetting("resize_cost"));
  int measured = 0;
  double seconds = 0;
  if (std::sscanf(cost.c_str(), "%d %lf", &measured, &seconds) == 2 && measured > 0 && seconds >= 0) {
    resize_cost_.measured = measured;
    resize_cost_.measured_seconds = seconds;
  }
  FRUGAL_ASSIGN_OR_RETURN(std::string scale, store_->LoadSetting("prior_scale"));
  if (std::sscanf(scale.c_str(), "%d %lf", &measured, &seconds) == 2 && measured > 0 && seconds > 0 &&
      std::isfinite(seconds)) {
    prior_calibration_ = {measured, seconds};
  }
  next_round_ = now;
  last_accrual_ = now;
  return Status::Ok();
}

namespace {

class PlannedRates final : public SpeedPrior {
 public:
  explicit PlannedRates(std::vector<double> rates) : rates_(std::move(rates)) {}
  double SamplesPerSecond(int workers) const override {
    return workers >= 1 && static_cast<size_t>(workers) <= rates_.size() ? rates_[workers - 1] : 0;
  }

 private:
  const std::vector<double> rates_;
};

}  // namespace

std::shared_ptr<const SpeedPrior> PlannedPrior(const JobSubmission& job) {
  if (job.command.planned_samples_per_s.empty()) return nullptr;
  return std::make_shared<PlannedRates>(job.command.planned_samples_per_s);
}

// A command job's own planned rates come before the server's prior, which
// cannot time a program (Note [Live throughput prior]).
LiveSpeed& ClusterManager::Impl::TrackSpeed(const JobRecord& job) {
  LiveSpeed& speed = speeds_[job.id];
  if (std::shared_ptr<const SpeedPrior> planned = PlannedPrior(job.spec)) {
    speed.SetPrior(std::move(planned));
  } else if (options_.speed_prior) {
    speed.SetPrior(options_.speed_prior(job.spec));
  }
  return speed;
}

LiveSpeed ClusterManager::Impl::SpeedForRound(const JobRecord& job) {
  LiveSpeed speed = speeds_[job.id];
  speed.SetGpusPerWorker(job.spec.GpusPerWorker());
  if (options_.calibrate_prior) speed.SetPriorScale(prior_calibration_.scale);
  if (auto shared = profile_rates_.find(job.spec.profile); shared != profile_rates_.end()) {
    speed.SetShared(shared->second);
  }
  return speed;
}

JobRecord* ClusterManager::Impl::FindJob(int64_t id) {
  auto it = std::lower_bound(jobs_.begin(), jobs_.end(), id, [](const JobRecord& j, int64_t v) { return j.id < v; });
  return it != jobs_.end() && it->id == id ? &*it : nullptr;
}

Status ClusterManager::Impl::Event(const std::string& kind, int64_t job_id, int64_t node_id,
                                   const std::string& message) {
  return store_->AppendEvent({0, clock_.WallSeconds(), kind, job_id, node_id, message}).status();
}

Result<int64_t> ClusterManager::Impl::Submit(const JobSubmission& spec) {
  FRUGAL_RETURN_IF_ERROR(CheckSubmission(spec));
  const int least = controller_->MinWorkers(spec);
  if (spec.min_workers < least || spec.max_workers < spec.min_workers || spec.max_workers > 1024) {
    return Status::InvalidArgument(
        "min_workers must be >= " + std::to_string(least) + " and max_workers in [min_workers, 1024]; got " +
        std::to_string(spec.min_workers) + " and " + std::to_string(spec.max_workers) +
        (least > 1 ? " (the " + controller_->Name() +
                         " controller runs a job as `frugal train`, whose single-process trainer writes no "
                         "checkpoints, so a job needs 2 workers to be resized; the elastic controller takes 1)"
                   : ""));
  }
  if (spec.config_toml.size() > (1 << 20)) return Status::InvalidArgument("the job's config is over 1 MiB");
  FRUGAL_RETURN_IF_ERROR(CheckJobName(spec.name));
  JobRecord j;
  j.spec = spec;
  if (j.spec.name.empty()) j.spec.name = "job";
  j.submit_time = clock_.WallSeconds();
  FRUGAL_ASSIGN_OR_RETURN(j.id, store_->SaveJob(j));
  FRUGAL_RETURN_IF_ERROR(Event("submit", j.id, 0,
                               "'" + j.spec.name + "' workers " + std::to_string(spec.min_workers) + ".." +
                                   std::to_string(spec.max_workers)));
  jobs_.push_back(j);
  TrackSpeed(j);
  next_round_ = j.submit_time;  // Schedule it at the next tick.
  return j.id;
}

Status ClusterManager::Impl::EndJob(JobRecord& job, JobState state, const std::string& message) {
  job.state = state;
  job.finish_time = clock_.WallSeconds();
  job.placement.clear();
  ++job.generation;  // Stops whatever still runs.
  job.message = message;
  FRUGAL_RETURN_IF_ERROR(store_->ReplaceAllocations(job.id, {}, job.finish_time));
  FRUGAL_RETURN_IF_ERROR(store_->SaveJob(job).status());
  FRUGAL_RETURN_IF_ERROR(Event(JobStateName(state), job.id, 0, message));
  speeds_.erase(job.id);
  pending_resizes_.erase(job.id);
  last_records_.erase(job.id);
  unsettled_.erase(job.id);
  job_keys_.erase(job.id);  // Its saved pair may be an earlier server's (Note [Job keys]).
  FRUGAL_ASSIGN_OR_RETURN(const std::string saved_key, store_->LoadSetting(JobKeySetting(job.id)));
  if (!saved_key.empty()) FRUGAL_RETURN_IF_ERROR(store_->SaveSetting(JobKeySetting(job.id), ""));
  next_round_ = clock_.WallSeconds();
  return Status::Ok();
}

Status ClusterManager::Impl::Cancel(int64_t job_id) {
  JobRecord* job = FindJob(job_id);
  if (job == nullptr) return Status::NotFound("no job " + std::to_string(job_id));
  if (IsTerminal(job->state)) {
    return Status::InvalidArgument("job " + std::to_string(job_id) + " already " + JobStateName(job->state));
  }
  return EndJob(*job, JobState::kCancelled, "cancelled by the user");
}

Status ClusterManager::Impl::SetPlacement(JobRecord& job, std::vector<NodeSlots> placement, const std::string& why,
                                          bool fresh) {
  const double now = clock_.WallSeconds();
  const int before = job.Workers();
  job.placement = std::move(placement);
  ++job.generation;
  fresh = fresh || before == 0;
  const bool in_place = controller_->Reconfigure(&job, fresh);
  if (!in_place) controller_->Reconfigure(&job, true);
  job.state = job.placement.empty() ? JobState::kQueued : JobState::kRunning;
  if (!job.placement.empty() && job.start_time < 0) job.start_time = now;
  std::vector<AllocationRecord> open;
  std::string where;
  for (const NodeSlots& s : job.placement) {
    open.push_back({job.id, s.node_id, s.slots, job.generation, now, -1});
    where += (where.empty() ? "" : "+") + std::string("node ") + std::to_string(s.node_id) + ":" + std::to_string(s.slots);
  }
  job.message = why;
  FRUGAL_RETURN_IF_ERROR(store_->ReplaceAllocations(job.id, open, now));
  FRUGAL_RETURN_IF_ERROR(store_->SaveJob(job).status());
  const char* kind = before == 0 ? "start" : job.placement.empty() ? "preempt" : "resize";
  pending_resizes_.erase(job.id);
  if (!job.placement.empty()) unsettled_.insert(job.id);
  if (auto last = last_records_.find(job.id); before > 0 && !job.placement.empty() && last != last_records_.end()) {
    // The steps made since the job's last record, at that record's rate.
    const MetricSample& r = last->second;
    const double steps = r.samples_per_s > 0 && r.global_batch > 0
                             ? std::max(0.0, now - r.time) * r.samples_per_s / r.global_batch
                             : 0;
    pending_resizes_[job.id] = {now, r.step + steps};
  }
  const char* how = before == 0 || job.placement.empty() ? ""
                    : in_place && !fresh                 ? " [in place]"
                                                         : " [restart from checkpoint]";
  return Event(kind, job.id, 0,
               std::to_string(before) + " -> " + std::to_string(job.Workers()) + " workers" +
                   (where.empty() ? "" : " on " + where) + ", generation " + std::to_string(job.generation) +
                   " (" + why + ")" + how);
}

Result<NodeRecord*> ClusterManager::Impl::TouchNode(const AgentReport& r) {
  if (r.node.empty() || r.node.size() > 128 || r.slots < 1 || r.slots > 1024) {
    return Status::InvalidArgument("a heartbeat needs a node name (1-128 chars) and slots in [1, 1024]");
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeRecord& n) { return n.name == r.node; });
  const bool is_new = it == nodes_.end();
  if (is_new) {
    nodes_.push_back({0, r.node, r.slots, false, 0});
    it = nodes_.end() - 1;
  }
  NodeRecord& n = *it;
  n.last_heartbeat = clock_.WallSeconds();
  if (!n.up || n.slots != r.slots) {
    const bool came_back = !is_new && !n.up;
    ++node_version_;
    n.up = true;
    n.slots = r.slots;
    FRUGAL_ASSIGN_OR_RETURN(n.id, store_->SaveNode(n));
    FRUGAL_RETURN_IF_ERROR(Event(is_new ? "node-register" : came_back ? "node-up" : "node-resize", 0, n.id,
                                 n.name + " with " + std::to_string(n.slots) + " slots"));
    next_round_ = clock_.WallSeconds();
  }
  return &n;
}

Status ClusterManager::Impl::HandleExit(const NodeRecord& node, const TaskExit& exit) {
  int64_t job_id = 0, gen = 0;
  if (!ParseTaskId(exit.task_id, &job_id, &gen)) return Status::Ok();
  JobRecord* job = FindJob(job_id);
  if (job == nullptr || IsTerminal(job->state)) return Status::Ok();
  const JobController::ExitMeaning meaning = controller_->OnExit(*job, exit.task_id, exit.exit_code);
  if (meaning == JobController::ExitMeaning::kIgnore) return Status::Ok();  // Stopped on purpose, or left.
  if (meaning == JobController::ExitMeaning::kFinished) return EndJob(*job, JobState::kFinished, "finished");
  const std::string why = "task " + exit.task_id + " on " + node.name + " exited with code " +
                          std::to_string(exit.exit_code);
  if (++job->restarts > options_.max_restarts) {
    return EndJob(*job, JobState::kFailed, why + "; gave up after " + std::to_string(options_.max_restarts) +
                                               " restarts");
  }
  // Same placement, next generation: the agent restarts it from its newest checkpoint.
  return SetPlacement(*job, job->placement, why + "; restart " + std::to_string(job->restarts) + " from checkpoint",
                      /*fresh=*/true);
}

// Note [Records that span a change]: a record's samples_per_s is over the
// wall time since the job's previous record, so the first record at a new
// placement's size also covers the process start (a start or restart) or
// the workers leaving and joining (a resize in place). It is the resize
// cost's measurement point (Note [Measured resize cost]) but no rate: taken
// as one, it pulled the job's and its profile's moving averages down by
// the stall (weight 0.3). Records the server rebuilds the rates from after
// its own restart are all taken (which of them spanned a change is not
// stored).
Status ClusterManager::Impl::LearnSample(JobRecord& job, const MetricSample& m) {
  if (m.samples_per_s < 0) return Status::Ok();  // An evaluation record.
  job.formed = true;
  if (m.step > job.last_step) {
    job.progress += static_cast<double>(m.step - job.last_step) * std::max(m.global_batch, 0);
    job.last_step = m.step;
  }
  FRUGAL_RETURN_IF_ERROR(LearnResizeCost(job, m));
  last_records_[job.id] = m;
  if (m.workers == job.Workers() && unsettled_.erase(job.id) > 0) return Status::Ok();
  speeds_[job.id].Observe(m.workers, m.samples_per_s);
  FRUGAL_RETURN_IF_ERROR(CalibratePrior(speeds_[job.id], m));
  if (job.spec.profile.empty()) return Status::Ok();
  RateTable& shared = profile_rates_[job.spec.profile];
  if (!shared.Observe(m.workers, m.samples_per_s)) return Status::Ok();
  return store_->SaveProfileRate(job.spec.profile, m.workers, shared.At(m.workers));
}

// Note [Prior calibration]: a prior's level can be off by a factor that is
// the cluster's, not the job's: the planner's CPU description of this
// machine predicted 43-57% below what batch-256 jobs measured (docs/design/scheduler.md,
// "What the live server knows before measuring"). So every rate a job
// measures at a size its prior predicts updates one cluster-wide scale, a
// moving average (weight 0.3) of log(measured / predicted), stored as the
// setting "prior_scale", and with ManagerOptions::calibrate_prior
// (`--calibrate-prior`) the predictions a round uses are multiplied by it.
// Speed-ups (ratios of predictions) are unchanged; the level matters where
// a job without measurements is compared with measured ones (remaining
// time, goodput). Not the default: the planner's error on CPU slots depends
// on the configuration more than on the cluster. Live, at 2 workers and
// batch 32-128, the measured rates were x0.43 (mlp, batch 32), x0.65 (mlp,
// 64), x0.80 (mlp, 128) and x1.21 (cnn, 32) of the predictions, and a scale
// learned on the jobs before made 3 of 5 held-out estimates worse. The
// scale is still kept and shown: it says how far off the planner is here.
Status ClusterManager::Impl::CalibratePrior(const LiveSpeed& speed, const MetricSample& m) {
  const double predicted = speed.PredictedAt(m.workers);
  if (!(predicted > 0) || !(m.samples_per_s > 0) || !std::isfinite(m.samples_per_s)) return Status::Ok();
  PriorCalibration& c = prior_calibration_;
  const double ratio = std::log(m.samples_per_s / predicted);
  const double old = std::log(c.scale);
  c.scale = std::exp(c.measured == 0 ? ratio : old + RateTable::kSmoothing * (ratio - old));
  ++c.measured;
  char text[64];
  std::snprintf(text, sizeof(text), "%d %.17g", c.measured, c.scale);
  return store_->SaveSetting("prior_scale", text);
}

// Note [Measured resize cost]: the policies weigh a resize against the
// seconds it costs the job (Note [Switch cost] in src/sched/afs_policy.cc),
// which the server measures on its own jobs: from the `resize` event to the
// job's first step record at the new size past its step at the resize (the
// last record's step plus the steps since, at that record's rate), less the
// time the steps past it take at the new size. What remains is the stall:
// workers leaving or joining, or a restart with its process start,
// checkpoint load and steps redone. The rate at the new size is the second
// record's: a record's samples_per_s is over the wall time since the
// previous record, so the first one's includes the stall (with it, the
// first live run measured 0 s for every resize). The average (weight 0.3)
// is stored, and with ManagerOptions::learn_resize_cost (`frugal cluster
// serve` without --realloc-cost) it replaces the configured cost at the next
// round once it differs from it by more than 10% and half a second.
Status ClusterManager::Impl::LearnResizeCost(JobRecord& job, const MetricSample& m) {
  auto it = pending_resizes_.find(job.id);
  if (it == pending_resizes_.end() || m.workers != job.Workers() || m.step <= it->second.step ||
      !(m.samples_per_s > 0) || m.global_batch <= 0) {
    return Status::Ok();
  }
  PendingResize& p = it->second;
  if (p.first_time < 0) {
    p.first_time = m.time;
    p.first_step = m.step;
    return Status::Ok();
  }
  const double progress_s = (p.first_step - p.step) * m.global_batch / m.samples_per_s;
  const double stall = std::max(0.0, p.first_time - p.time - progress_s);
  pending_resizes_.erase(it);
  ResizeCost& c = resize_cost_;
  c.measured_seconds = c.measured == 0 ? stall : c.measured_seconds + 0.3 * (stall - c.measured_seconds);
  ++c.measured;
  char text[64];
  std::snprintf(text, sizeof(text), "%d %.17g", c.measured, c.measured_seconds);
  return store_->SaveSetting("resize_cost", text);
}

Status ClusterManager::Impl::AdoptResizeCost() {
  const ResizeCost& c = resize_cost_;
  if (!options_.learn_resize_cost || c.measured == 0 ||
      std::abs(c.measured_seconds - c.seconds) <= std::max(0.1 * c.seconds, 0.5)) {
    return Status::Ok();
  }
  sched::PolicyOptions po = options_.policy_options;
  po.reallocation_cost = c.measured_seconds;
  FRUGAL_ASSIGN_OR_RETURN(policy_, sched::CreatePolicy(options_.policy, po));
  options_.policy_options = po;
  char text[160];
  std::snprintf(text, sizeof(text), "the policy now weighs a resize at %.1f s (was %.1f s; measured over %d resizes)",
                c.measured_seconds, c.seconds, c.measured);
  resize_cost_.seconds = c.measured_seconds;
  return Event("resize-cost", 0, 0, text);
}

Status ClusterManager::Impl::HandleSamples(const std::vector<MetricSample>& samples) {
  std::vector<MetricSample> kept;
  std::map<int64_t, JobRecord*> changed;
  for (MetricSample m : samples) {
    JobRecord* job = FindJob(m.job_id);
    if (job == nullptr) continue;
    m.time = clock_.WallSeconds();
    kept.push_back(m);
    if (IsTerminal(job->state)) continue;
    FRUGAL_RETURN_IF_ERROR(LearnSample(*job, m));
    changed[job->id] = job;
  }
  FRUGAL_RETURN_IF_ERROR(store_->AppendSamples(kept));
  for (auto& [id, job] : changed) FRUGAL_RETURN_IF_ERROR(store_->SaveJob(*job).status());
  return Status::Ok();
}

// An elastic coordinator's endpoint, reported by the agent of its node, is
// what the job's workers connect to (Note [Elastic jobs]).
Status ClusterManager::Impl::HandleEndpoints(const std::vector<TaskEndpoint>& endpoints) {
  for (const TaskEndpoint& e : endpoints) {
    int64_t job_id = 0, gen = 0;
    if (!ParseTaskId(e.task_id, &job_id, &gen) || e.endpoint.size() > 256) continue;
    JobRecord* job = FindJob(job_id);
    if (job == nullptr || IsTerminal(job->state) || job->placement.empty()) continue;
    if (e.task_id != CoordinatorTaskId(job->id, job->incarnation) || job->coordinator == e.endpoint) continue;
    job->coordinator = e.endpoint;
    FRUGAL_RETURN_IF_ERROR(store_->SaveJob(*job).status());
    FRUGAL_RETURN_IF_ERROR(Event("coordinator", job->id, 0, "elastic coordinator at " + e.endpoint));
  }
  return Status::Ok();
}

Result<AgentReply> ClusterManager::Impl::Heartbeat(const AgentReport& report) {
  FRUGAL_ASSIGN_OR_RETURN(NodeRecord* node, TouchNode(report));
  FRUGAL_RETURN_IF_ERROR(HandleSamples(report.samples));
  FRUGAL_RETURN_IF_ERROR(HandleEndpoints(report.endpoints));
  for (const TaskExit& exit : report.exited) FRUGAL_RETURN_IF_ERROR(HandleExit(*node, exit));
  AgentReply reply;
  reply.node_id = node->id;
  for (const JobRecord& j : jobs_) {
    if (j.state != JobState::kRunning) continue;
    std::multimap<int64_t, TaskSpec> plan = controller_->Plan(j);
    auto [first, last] = plan.equal_range(reply.node_id);
    for (auto it = first; it != last; ++it) {
      FRUGAL_RETURN_IF_ERROR(SecureTask(&it->second));
      reply.tasks.push_back(std::move(it->second));
    }
  }
  std::set<std::string> planned;
  for (const TaskSpec& t : reply.tasks) planned.insert(t.task_id);
  for (const std::string& id : report.running) {
    int64_t job_id = 0, generation = 0;
    if (planned.count(id) || !ParseTaskId(id, &job_id, &generation)) continue;
    const JobRecord* job = FindJob(job_id);
    if (job != nullptr && controller_->Superseded(*job, id)) reply.superseded.push_back(id);
  }
  return reply;
}

// Note [Job keys]: a job spanning hosts listens on their addresses, where
// anyone on the network could join its world or read its gradients. So each
// job gets one CurveZMQ key pair, made by the server when the job's tasks
// are first handed out and shared by all the job's processes: each admits
// the holders of the job's key and nobody else (SecurityOptions admits a
// process's own public key). The pair travels in the agents' heartbeat
// replies, which carry the bearer token too: the API's link is trusted as
// for the token (use --token-file, and keep the server and agents on a
// network you trust or tunnel it). It is kept in the store (setting
// "job_key_<id>") so that a restarted server hands out the same pair to the
// job's new members, and cleared when the job ends. An agent uses it only for
// tasks that listen on a non-loopback --host (agent.cc, AddSecurityArgs);
// `serve --insecure-jobs` sends none and such tasks run with --insecure.
Status ClusterManager::Impl::SecureTask(TaskSpec* task) {
  if (options_.insecure_jobs) {
    task->insecure_transport = true;
    return Status::Ok();
  }
  auto it = job_keys_.find(task->job_id);
  if (it == job_keys_.end()) {
    const std::string setting = JobKeySetting(task->job_id);
    FRUGAL_ASSIGN_OR_RETURN(std::string saved, store_->LoadSetting(setting));
    std::pair<std::string, std::string> pair;
    const size_t space = saved.find(' ');
    if (space != std::string::npos) {
      pair = {saved.substr(0, space), saved.substr(space + 1)};
    } else {
      FRUGAL_ASSIGN_OR_RETURN(comm::CurveKeyPair fresh, comm::GenerateCurveKeyPair());
      pair = {fresh.public_key, fresh.secret_key};
      FRUGAL_RETURN_IF_ERROR(store_->SaveSetting(setting, pair.first + " " + pair.second));
    }
    it = job_keys_.emplace(task->job_id, std::move(pair)).first;
  }
  task->job_public_key = it->second.first;
  task->job_secret_key = it->second.second;
  return Status::Ok();
}

// ---- ClusterManager: locking wrappers -------------------------------------

Result<std::unique_ptr<ClusterManager>> ClusterManager::Open(std::unique_ptr<StateStore> store,
                                                             std::unique_ptr<JobController> controller,
                                                             const Clock& clock, ManagerOptions options) {
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy,
                          sched::CreatePolicy(options.policy, options.policy_options));
  if (policy->UsesOracle()) {
    return Status::InvalidArgument("policy " + options.policy + " needs to know each job's remaining work, which a " +
                                   "live cluster cannot; use afs-p, afs-goodput, tiresias or fifo");
  }
  if (!options.insecure_jobs && !comm::CurveAvailable()) {
    return Status::InvalidArgument("this libzmq was built without CURVE, so jobs spanning hosts cannot be encrypted: "
                                   "install a libzmq with libsodium (Debian's libzmq5 has it), or serve with "
                                   "--insecure-jobs on a network you trust");
  }
  auto impl = std::make_unique<Impl>(std::move(store), std::move(controller), clock, options, std::move(policy));
  FRUGAL_RETURN_IF_ERROR(impl->Load());
  return std::unique_ptr<ClusterManager>(new ClusterManager(std::move(impl), std::move(options)));
}

ClusterManager::ClusterManager(std::unique_ptr<Impl> impl, ManagerOptions options)
    : impl_(std::move(impl)), options_(std::move(options)) {}
ClusterManager::~ClusterManager() = default;

// Each entry point is one transaction: its writes land together or not at
// all. (On a failed write the in-memory state may be ahead of the database;
// the store's errors are I/O errors the server reports and exits on.)
Status ClusterManager::Impl::Transact(const std::function<Status()>& step) {
  FRUGAL_RETURN_IF_ERROR(store_->Begin());
  Status st = step();
  if (!st.ok()) {
    (void)store_->Rollback();
    return st;
  }
  return store_->Commit();
}

Result<int64_t> ClusterManager::Submit(const JobSubmission& job) {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  int64_t id = 0;
  FRUGAL_RETURN_IF_ERROR(impl_->Transact([&]() -> Status {
    FRUGAL_ASSIGN_OR_RETURN(id, impl_->Submit(job));
    return Status::Ok();
  }));
  return id;
}
Status ClusterManager::Cancel(int64_t job_id) {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->Transact([&] { return impl_->Cancel(job_id); });
}
Result<AgentReply> ClusterManager::Heartbeat(const AgentReport& report) {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  AgentReply reply;
  FRUGAL_RETURN_IF_ERROR(impl_->Transact([&]() -> Status {
    FRUGAL_ASSIGN_OR_RETURN(reply, impl_->Heartbeat(report));
    return Status::Ok();
  }));
  return reply;
}
// Marks silent nodes down, then runs a round if one is due; the round's
// decision is taken outside mu_ (Note [Rounds outside the lock]).
Status ClusterManager::Tick() {
  std::lock_guard<std::mutex> round(impl_->round_mu_);
  bool due = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu_);
    FRUGAL_RETURN_IF_ERROR(impl_->Transact([&] { return impl_->MarkSilentNodesDown(); }));
    due = impl_->RoundDue();
  }
  return due ? impl_->RoundOffLock() : Status::Ok();
}
Status ClusterManager::RunRound() {
  std::lock_guard<std::mutex> round(impl_->round_mu_);
  return impl_->RoundOffLock();
}
std::vector<NodeRecord> ClusterManager::Nodes() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->nodes_;
}
std::vector<JobRecord> ClusterManager::Jobs() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->jobs_;
}
Result<JobRecord> ClusterManager::Job(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  JobRecord* j = impl_->FindJob(job_id);
  if (j == nullptr) return Status::NotFound("no job " + std::to_string(job_id));
  return *j;
}
std::map<int64_t, ThroughputTable> ClusterManager::Throughputs() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  std::map<int64_t, ThroughputTable> out;
  for (const JobRecord& j : impl_->jobs_) {
    auto speed = impl_->speeds_.find(j.id);
    if (IsTerminal(j.state) || speed == impl_->speeds_.end()) continue;
    ThroughputTable& t = out[j.id];
    t.samples_per_s = speed->second.measured();
    if (auto it = impl_->profile_rates_.find(j.spec.profile); it != impl_->profile_rates_.end()) {
      t.profile_samples_per_s = it->second.rates();
    }
    const LiveSpeed view = impl_->SpeedForRound(j);
    for (int n = 1; n <= std::min(j.spec.max_workers, 64); ++n) t.estimate[n] = view.RateAt(n);
  }
  return out;
}
std::vector<int64_t> ClusterManager::QueueOrder() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  std::vector<int64_t> out;
  for (const JobRecord& j : impl_->jobs_) {
    if (!IsTerminal(j.state)) out.push_back(j.id);
  }
  return out;
}
Result<std::vector<EventRecord>> ClusterManager::Events(int64_t after_id, int limit) const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->store_->LoadEvents(after_id, limit);
}
Result<std::vector<AllocationRecord>> ClusterManager::Allocations() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->store_->LoadAllocations(0);
}
Result<std::vector<MetricSample>> ClusterManager::Samples(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->store_->LoadSamples(job_id);
}
PriorCalibration ClusterManager::prior_calibration() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->prior_calibration_;
}

ResizeCost ClusterManager::resize_cost() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->resize_cost_;
}
long ClusterManager::rounds() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->rounds_;
}

}  // namespace frugal::cluster
