#include "frugal/sched/decision_benchmark.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "frugal/common/random.h"
#include "model_speed.h"

namespace frugal::sched {

Result<DecisionTiming> TimeDecision(const ApplicationCatalog& catalog, const Policy& policy,
                                    const std::vector<JobSpec>& workload, const ClusterSpec& cluster,
                                    int num_active, int repetitions, uint64_t seed) {
  if (num_active <= 0 || static_cast<size_t>(num_active) > workload.size()) {
    return Status::InvalidArgument("need between 1 and " + std::to_string(workload.size()) + " active jobs");
  }
  if (repetitions <= 0) return Status::InvalidArgument("repetitions must be positive");
  SplitMix64 rng(seed);
  std::vector<std::unique_ptr<ModelSpeed>> speeds;
  std::vector<JobView> views(num_active);
  for (int i = 0; i < num_active; ++i) {
    const JobSpec& spec = workload[i];
    const Application* app = catalog.Find(spec.application);
    if (app == nullptr) return Status::InvalidArgument("unknown application '" + spec.application + "'");
    const ConvergenceModel& c = app->convergence();
    int epoch = static_cast<int>(rng.Below(c.NumEpochs()));
    speeds.push_back(std::make_unique<ModelSpeed>(app, spec.batch_size));
    speeds.back()->set_epoch(epoch);
    JobView& v = views[i];
    v.id = i;
    v.submit_time = spec.submit_time;
    v.requested_gpus = std::min(spec.num_replicas, cluster.TotalGpus());
    v.gpus_per_worker = spec.gpus_per_worker;
    v.max_gpus = std::max(1, std::min(app->throughput().MaxGpus(spec.batch_size), cluster.TotalGpus()));
    v.batch_size = spec.batch_size;
    v.min_batch_size = c.MinBatch() > 0 ? c.MinBatch() : spec.batch_size;
    v.max_batch_size = c.MaxBatch() > 0 ? std::max(c.MaxBatch(), v.min_batch_size) : spec.batch_size;
    v.max_gpus_at_max_batch =
        std::max(v.max_gpus, std::min(app->throughput().MaxGpus(v.max_batch_size), cluster.TotalGpus()));
    v.progress = c.EpochEnd(epoch) + rng.NextDouble() * (c.EpochEnd(epoch + 1) - c.EpochEnd(epoch));
    v.remaining_progress = app->TotalProgress() - v.progress;
    v.attained_service = rng.NextDouble() * 3600.0 * 24;
    v.speed = speeds.back().get();
  }
  ClusterView view{cluster, 0};
  DecisionTiming timing;
  timing.num_jobs = num_active;
  for (int r = 0; r < repetitions; ++r) {
    // A benchmark of real time: no Clock seam, a fake one would time nothing.
    auto start = std::chrono::steady_clock::now();
    std::vector<Placement> out = policy.Schedule(view, views);
    timing.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    timing.gpus_allocated = 0;
    for (const Placement& p : out) timing.gpus_allocated += p.NumGpus();
  }
  std::vector<double> sorted = timing.seconds;
  std::sort(sorted.begin(), sorted.end());
  timing.median = sorted[sorted.size() / 2];
  timing.max = sorted.back();
  return timing;
}

}  // namespace frugal::sched
