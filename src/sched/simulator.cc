#include "frugal/sched/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "event_queue.h"
#include "frugal/sched/decision.h"
#include "model_speed.h"

namespace frugal::sched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct SimJob {
  const JobSpec* spec = nullptr;
  const Application* app = nullptr;
  std::unique_ptr<ModelSpeed> speed;
  int max_gpus = 1;
  int num_epochs = 1;
  bool arrived = false;
  bool done = false;
  Placement placement;
  Shape shape;
  uint64_t version = 0;
  double last_time = 0;
  double restart_left = 0;
  // Past its last step: holding its GPUs for tail_left more GPU-seconds of
  // work (the workload's tail_gpu_s; Note [Held jobs] in decision.cc).
  bool in_tail = false;
  double tail_left = 0;
  double progress = 0;
  int epoch = 0;
  JobResult result;
};

// One run of the simulator: all mutable state lives here, not in Simulator.
class SimulationRun {
 public:
  SimulationRun(const ApplicationCatalog& catalog, const Policy& policy, const SimulatorOptions& options)
      : catalog_(catalog), policy_(policy), options_(options) {}

  Result<SimulationResult> Run(const std::vector<JobSpec>& workload);

 private:
  Status Init(const std::vector<JobSpec>& workload);
  void Advance(SimJob& job, double t);
  double PredictFinish(const SimJob& job, double t) const;
  double BestRuntime(const SimJob& job);
  // The most GPUs `job` can use at `batch` in whole workers on this cluster
  // (at least one worker's).
  int MaxGpusAt(const SimJob& job, int batch) const;
  Status CheckWorkers(const JobSpec& spec) const;
  JobView BaseView(const SimJob& job) const;
  // One scheduling round at time t, in steps: bring the active jobs up to
  // t, ask the policy through DecideRound (the code path the live cluster
  // service shares), apply its answer.
  Status ScheduleRound(double t);
  void RetireFinished();  // drops finished jobs from active_, order kept
  std::vector<JobView> ActiveViews() const;
  // Bookkeeping of the decision's wall time (SimulationResult's decision_*).
  void RecordDecision(double seconds, size_t num_views);
  // Gives job i its placement and (unless nullopt) its batch size; a change
  // restarts it and reschedules its completion.
  void ApplyDecision(double t, size_t i, const Placement& placement, std::optional<int> batch);
  void Finish(SimJob& job, double t);
  SimulationResult Summarise();

  const ApplicationCatalog& catalog_;
  const Policy& policy_;
  const SimulatorOptions& options_;
  std::vector<SimJob> jobs_;
  std::vector<size_t> active_;  // Arrived, unfinished; kept in arrival order.
  EventQueue events_;
  bool round_pending_ = false;
  size_t num_done_ = 0;
  long rounds_ = 0;
  double decision_total_ = 0;
  double decision_max_ = 0;
  long max_active_ = 0;
  long active_at_slowest_ = 0;
  std::map<std::tuple<const Application*, int, int>, double> best_runtime_cache_;
};

Status SimulationRun::Init(const std::vector<JobSpec>& workload) {
  const int total = options_.cluster.TotalGpus();
  if (options_.cluster.num_nodes <= 0 || options_.cluster.gpus_per_node <= 0) {
    return Status::InvalidArgument("cluster must have at least one node and one GPU per node");
  }
  if (!(options_.round_interval > 0) || options_.reallocation_cost < 0) {
    return Status::InvalidArgument("round interval must be > 0 and re-allocation cost >= 0");
  }
  jobs_.resize(workload.size());
  for (size_t i = 0; i < workload.size(); ++i) {
    const JobSpec& spec = workload[i];
    SimJob& j = jobs_[i];
    j.spec = &spec;
    j.app = catalog_.Find(spec.application);
    if (j.app == nullptr) {
      std::string known;
      for (const auto& n : catalog_.Names()) known += (known.empty() ? "" : ", ") + n;
      return Status::InvalidArgument("job '" + spec.name + "': unknown application '" + spec.application +
                                     "' (known: " + known + ")");
    }
    if (spec.num_replicas > total) {
      return Status::InvalidArgument("job '" + spec.name + "' asks for " + std::to_string(spec.num_replicas) +
                                     " GPUs but the cluster has " + std::to_string(total));
    }
    FRUGAL_RETURN_IF_ERROR(CheckWorkers(spec));
    j.speed = std::make_unique<ModelSpeed>(j.app, spec.batch_size);
    j.max_gpus = MaxGpusAt(j, spec.batch_size);
    j.num_epochs = j.app->convergence().NumEpochs();
    j.result.name = spec.name;
    j.result.application = spec.application;
    j.result.submit_time = spec.submit_time;
    j.result.best_runtime = BestRuntime(j) + spec.tail_gpu_seconds / j.max_gpus;
    // A job that cannot run on what it asked for would hold GPUs forever
    // under the non-elastic policies.
    const Shape asked = CompactShape(spec.num_replicas, options_.cluster.gpus_per_node, spec.gpus_per_worker);
    if (j.speed->RateAt(asked, 0) <= 0) {
      return Status::InvalidArgument("job '" + spec.name + "' cannot run on " + std::to_string(spec.num_replicas) +
                                     " GPUs at batch " + std::to_string(spec.batch_size) + " (at most " +
                                     std::to_string(j.app->throughput().MaxGpus(spec.batch_size)) +
                                     " GPUs for this batch, or the model does not fit)");
    }
    events_.Push(spec.submit_time, EventKind::kArrival, i);
  }
  return Status::Ok();
}

// Note [Workers of several GPUs] (placer.cc): a job runs in whole workers,
// each inside one node.
Status SimulationRun::CheckWorkers(const JobSpec& spec) const {
  const int unit = spec.gpus_per_worker;
  if (unit < 1 || spec.num_replicas % unit != 0) {
    return Status::InvalidArgument("job '" + spec.name + "' asks for " + std::to_string(spec.num_replicas) +
                                   " GPUs in workers of " + std::to_string(unit) +
                                   " (gpus_per_worker must be >= 1 and divide num_replicas)");
  }
  const int most = options_.cluster.TotalGpusInWorkers(unit);
  if (spec.num_replicas > most) {
    return Status::InvalidArgument("job '" + spec.name + "' asks for " + std::to_string(spec.num_replicas) +
                                   " GPUs in workers of " + std::to_string(unit) + " but the cluster holds " +
                                   std::to_string(most) + " in such workers (" +
                                   std::to_string(options_.cluster.gpus_per_node) + " GPUs per node)");
  }
  return Status::Ok();
}

int SimulationRun::MaxGpusAt(const SimJob& job, int batch) const {
  const int unit = job.spec->gpus_per_worker;
  const int most = std::min(job.app->throughput().MaxGpus(batch), options_.cluster.TotalGpusInWorkers(unit));
  return std::max(unit, most / unit * unit);
}

// Lower bound on a job's running time: every epoch at its best batch size
// (among BatchSizeCandidates, which include the job's own) on the fastest
// compact shape in its workers, plus one start-up cost. Gain per step does
// not depend on the shape, so for each batch the fastest shape is the one
// with the shortest step. Memoised per (application, batch, worker size):
// workloads repeat them.
double SimulationRun::BestRuntime(const SimJob& job) {
  const int unit = job.spec->gpus_per_worker;
  auto key = std::make_tuple(job.app, job.spec->batch_size, unit);
  auto it = best_runtime_cache_.find(key);
  if (it != best_runtime_cache_.end()) return it->second;
  const ConvergenceModel& c = job.app->convergence();
  const int total_gpus = options_.cluster.TotalGpusInWorkers(unit);
  std::vector<int> batches = BatchSizeCandidates(BaseView(job));
  std::vector<double> best_step(batches.size(), kInf);
  for (size_t b = 0; b < batches.size(); ++b) {
    int cap = std::min(job.app->throughput().MaxGpus(batches[b]), total_gpus);
    for (int n = unit; n <= cap; n += unit) {
      best_step[b] = std::min(best_step[b], job.app->throughput().StepTime(
                                                CompactShape(n, options_.cluster.gpus_per_node, unit), batches[b]));
    }
  }
  double total = options_.reallocation_cost;
  for (int e = 0; e < c.NumEpochs() && std::isfinite(total); ++e) {
    double best_rate = 0;
    for (size_t b = 0; b < batches.size(); ++b) {
      if (std::isfinite(best_step[b])) best_rate = std::max(best_rate, c.StepGain(batches[b], e) / best_step[b]);
    }
    total = best_rate > 0 ? total + (c.EpochEnd(e + 1) - c.EpochEnd(e)) / best_rate : kInf;
  }
  best_runtime_cache_.emplace(key, total);
  return total;
}

JobView SimulationRun::BaseView(const SimJob& j) const {
  JobView v;
  v.submit_time = j.spec->submit_time;
  v.requested_gpus = j.spec->num_replicas;
  v.gpus_per_worker = j.spec->gpus_per_worker;
  v.batch_size = j.speed->batch();
  v.max_gpus = j.max_gpus;
  const ConvergenceModel& c = j.app->convergence();
  v.min_batch_size = c.MinBatch() > 0 ? c.MinBatch() : v.batch_size;
  v.max_batch_size = c.MaxBatch() > 0 ? std::max(c.MaxBatch(), v.min_batch_size) : v.batch_size;
  v.max_gpus_at_max_batch = std::max(v.max_gpus, MaxGpusAt(j, v.max_batch_size));
  return v;
}

void SimulationRun::Advance(SimJob& job, double t) {
  double dt = t - job.last_time;
  job.last_time = t;
  if (dt <= 0 || job.done || job.placement.empty()) return;
  const int gpus = job.placement.NumGpus();
  const ConvergenceModel& c = job.app->convergence();
  while (dt > 0 && !job.done) {
    if (job.in_tail) {
      const double d = std::min(dt, job.tail_left / gpus);
      job.tail_left -= d * gpus;
      job.result.gpu_seconds += d * gpus;
      dt -= d;
      if (job.tail_left <= 1e-12) Finish(job, t - dt);
      continue;
    }
    if (job.restart_left > 0) {
      double d = std::min(dt, job.restart_left);
      job.restart_left -= d;
      job.result.gpu_seconds += d * gpus;
      dt -= d;
      continue;
    }
    double rate = job.speed->RateAt(job.shape, job.epoch);
    if (rate <= 0) {
      job.result.gpu_seconds += dt * gpus;
      break;
    }
    double end = c.EpochEnd(job.epoch + 1);
    double need = end - job.progress;
    // Tolerance: completion events are computed with the same arithmetic, but
    // summed in a different order.
    if (rate * dt < need - 1e-9 * std::max(1.0, end)) {
      job.progress += rate * dt;
      job.result.gpu_seconds += dt * gpus;
      break;
    }
    double used = std::min(dt, need / rate);
    job.progress = end;
    job.result.gpu_seconds += used * gpus;
    dt -= used;
    ++job.epoch;
    job.speed->set_epoch(job.epoch);
    if (job.epoch >= job.num_epochs) {
      job.in_tail = true;
      job.tail_left = job.spec->tail_gpu_seconds;
      if (job.tail_left <= 0) Finish(job, t - dt);
    }
  }
}

void SimulationRun::Finish(SimJob& job, double t) {
  job.done = true;
  job.result.finish_time = t;
  job.result.jct = t - job.spec->submit_time;
  job.placement = Placement();
  job.shape.clear();
  ++job.version;
  ++num_done_;
}

double SimulationRun::PredictFinish(const SimJob& job, double t) const {
  const ConvergenceModel& c = job.app->convergence();
  const int gpus = std::max(1, job.placement.NumGpus());
  if (job.in_tail) return t + job.tail_left / gpus;
  double time = t + job.restart_left + job.spec->tail_gpu_seconds / gpus;
  double progress = job.progress;
  for (int e = job.epoch; e < job.num_epochs; ++e) {
    double rate = job.speed->RateAt(job.shape, e);
    if (rate <= 0) return kInf;
    time += (c.EpochEnd(e + 1) - progress) / rate;
    progress = c.EpochEnd(e + 1);
  }
  return time;
}

void SimulationRun::RetireFinished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(), [&](size_t i) { return jobs_[i].done; }),
                active_.end());
}

std::vector<JobView> SimulationRun::ActiveViews() const {
  std::vector<JobView> views(active_.size());
  for (size_t k = 0; k < active_.size(); ++k) {
    const SimJob& j = jobs_[active_[k]];
    JobView& v = views[k];
    v = BaseView(j);
    v.id = static_cast<int64_t>(active_[k]);
    v.attained_service = j.result.gpu_seconds;
    v.progress = j.progress;
    if (policy_.UsesOracle()) v.remaining_progress = j.app->TotalProgress() - j.progress;
    v.placement = j.placement;
    v.speed = j.speed.get();
    if (j.in_tail && !j.placement.empty()) v.Hold();
  }
  return views;
}

void SimulationRun::RecordDecision(double seconds, size_t num_views) {
  decision_total_ += seconds;
  if (seconds > decision_max_) {
    decision_max_ = seconds;
    active_at_slowest_ = static_cast<long>(num_views);
  }
  max_active_ = std::max(max_active_, static_cast<long>(num_views));
}

void SimulationRun::ApplyDecision(double t, size_t i, const Placement& placement, std::optional<int> batch) {
  SimJob& j = jobs_[i];
  const bool batch_changed = batch && *batch != j.speed->batch();
  if (batch_changed) {
    // A new batch size takes effect without a restart (the trainer adapts
    // it between steps); the completion estimate must be redone.
    j.speed->set_batch(*batch);
    j.max_gpus = MaxGpusAt(j, *batch);
  }
  if (placement == j.placement) {
    if (batch_changed && !j.placement.empty()) {
      ++j.version;
      double finish = PredictFinish(j, t);
      if (std::isfinite(finish)) events_.Push(finish, EventKind::kCompletion, i, j.version);
    }
    return;
  }
  if (j.result.start_time >= 0) ++j.result.num_reallocations;
  j.placement = placement;
  j.shape = ShapeOf(j.placement);
  ++j.version;
  if (j.placement.empty()) {
    j.restart_left = 0;
    return;
  }
  if (j.result.start_time < 0) j.result.start_time = t;
  j.result.max_gpus_held = std::max(j.result.max_gpus_held, j.placement.NumGpus());
  j.restart_left = options_.reallocation_cost;
  double finish = PredictFinish(j, t);
  if (std::isfinite(finish)) events_.Push(finish, EventKind::kCompletion, i, j.version);
}

Status SimulationRun::ScheduleRound(double t) {
  ++rounds_;
  RetireFinished();
  for (size_t i : active_) Advance(jobs_[i], t);
  RetireFinished();
  if (active_.empty()) return Status::Ok();
  const std::vector<JobView> views = ActiveViews();
  const ClusterView cluster{options_.cluster, t};
  // A policy that over-commits is a bug; DecideRound refuses it and the
  // simulation stops rather than simulate nonsense.
  Result<RoundDecision> decision = DecideRound(policy_, cluster, views);
  FRUGAL_RETURN_IF_ERROR(decision.status());
  RecordDecision(decision->decision_seconds, views.size());
  const std::vector<Placement>& next = decision->placements;
  const std::vector<int>& batches = decision->batch_sizes;
  for (size_t k = 0; k < next.size(); ++k) {
    ApplyDecision(t, active_[k], next[k], batches.empty() ? std::nullopt : std::optional<int>(batches[k]));
  }
  return Status::Ok();
}

Result<SimulationResult> SimulationRun::Run(const std::vector<JobSpec>& workload) {
  FRUGAL_RETURN_IF_ERROR(Init(workload));
  const double interval = options_.round_interval;
  while (!events_.empty()) {
    Event e = events_.Pop();
    if (e.time > options_.max_time) {
      return Status::Internal("simulation passed max_time " + std::to_string(options_.max_time) + " s with " +
                              std::to_string(jobs_.size() - num_done_) + " jobs unfinished");
    }
    switch (e.kind) {
      case EventKind::kArrival: {
        SimJob& j = jobs_[e.job];
        j.arrived = true;
        j.last_time = e.time;
        active_.push_back(e.job);
        if (!round_pending_) {
          // Rounds happen on a fixed grid; the cluster was idle, so resume it.
          events_.Push(std::ceil(e.time / interval) * interval, EventKind::kRound);
          round_pending_ = true;
        }
        break;
      }
      case EventKind::kCompletion: {
        SimJob& j = jobs_[e.job];
        if (j.done || j.version != e.version) break;
        Advance(j, e.time);
        if (!j.done) Finish(j, e.time);  // Rounding: the event time is the model's answer.
        break;
      }
      case EventKind::kRound: {
        round_pending_ = false;
        FRUGAL_RETURN_IF_ERROR(ScheduleRound(e.time));
        if (!active_.empty()) {
          events_.Push(e.time + interval, EventKind::kRound);
          round_pending_ = true;
        }
        break;
      }
    }
  }
  if (num_done_ != jobs_.size()) {
    return Status::Internal(std::to_string(jobs_.size() - num_done_) +
                            " jobs never finished (a job the policy cannot run?)");
  }
  return Summarise();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

SimulationResult SimulationRun::Summarise() {
  SimulationResult r;
  r.policy = policy_.Name();
  std::vector<double> jcts;
  double first_submit = kInf, last_finish = 0, gpu_seconds = 0;
  for (SimJob& j : jobs_) {
    jcts.push_back(j.result.jct);
    first_submit = std::min(first_submit, j.spec->submit_time);
    last_finish = std::max(last_finish, j.result.finish_time);
    gpu_seconds += j.result.gpu_seconds;
    r.num_reallocations += j.result.num_reallocations;
    r.jobs.push_back(std::move(j.result));
  }
  if (!jcts.empty()) {
    double sum = 0;
    for (double x : jcts) sum += x;
    r.avg_jct = sum / jcts.size();
    r.median_jct = Percentile(jcts, 0.5);
    r.p99_jct = Percentile(jcts, 0.99);
    r.makespan = last_finish - first_submit;
    if (r.makespan > 0) r.gpu_utilization = gpu_seconds / (options_.cluster.TotalGpus() * r.makespan);
  }
  r.num_rounds = rounds_;
  r.decision_seconds_total = decision_total_;
  r.decision_seconds_max = decision_max_;
  r.max_active_jobs = max_active_;
  r.active_jobs_at_slowest = active_at_slowest_;
  return r;
}

}  // namespace

Simulator::Simulator(const ApplicationCatalog& catalog, const Policy& policy, SimulatorOptions options)
    : catalog_(catalog), policy_(policy), options_(options) {}

Result<SimulationResult> Simulator::Run(const std::vector<JobSpec>& workload) const {
  SimulationRun run(catalog_, policy_, options_);
  return run.Run(workload);
}

Status WriteJobResults(const std::string& path, const SimulationResult& result) {
  std::ofstream out(path);
  if (!out) return Status::IOError(path + ": cannot open for writing");
  out << "name,application,submit_time,start_time,finish_time,jct,best_runtime,gpu_seconds,"
         "num_reallocations,max_gpus\n";
  char buf[256];
  for (const JobResult& j : result.jobs) {
    std::snprintf(buf, sizeof(buf), "%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%d,%d", j.submit_time, j.start_time,
                  j.finish_time, j.jct, j.best_runtime, j.gpu_seconds, j.num_reallocations, j.max_gpus_held);
    out << j.name << ',' << j.application << ',' << buf << '\n';
  }
  out.flush();
  if (!out) return Status::IOError(path + ": write failed");
  return Status::Ok();
}

}  // namespace frugal::sched
