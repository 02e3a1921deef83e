// Trace-driven, event-driven cluster simulator. Jobs arrive at their submit
// time; every `round_interval` seconds the policy re-divides the GPUs; a job
// whose placement changes pauses for `reallocation_cost` seconds; a job
// finishes when its statistical progress reaches its application's total.
// Deterministic: events are ordered by (time, sequence number).
//
// Thread safety: one Simulator per thread; the catalog and policy are only
// read and may be shared.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"
#include "frugal/sched/throughput_model.h"
#include "frugal/sched/workload.h"

namespace frugal::sched {

struct SimulatorOptions {
  ClusterSpec cluster;               // Default 16 nodes x 4 GPUs.
  double round_interval = 60;        // Seconds between scheduling rounds.
  double reallocation_cost = 30;     // Seconds without progress after a placement change.
  // Safety stop: give up (error) if simulated time passes this many seconds.
  double max_time = 1e9;
};

struct JobResult {
  std::string name;
  std::string application;
  double submit_time = 0;
  double start_time = -1;       // First time it held GPUs.
  double finish_time = -1;
  double jct = -1;              // finish - submit.
  double best_runtime = 0;      // Lower bound: run alone on the best shape, one restart.
  double gpu_seconds = 0;       // GPU-seconds held.
  int num_reallocations = 0;    // Placement changes after the first start.
  int max_gpus_held = 0;
};

struct SimulationResult {
  std::string policy;
  std::vector<JobResult> jobs;  // Workload order.
  double avg_jct = 0;
  double median_jct = 0;
  double p99_jct = 0;
  double makespan = 0;           // Last finish - first submit.
  double gpu_utilization = 0;    // Held GPU-seconds / (GPUs x makespan).
  long num_reallocations = 0;
  long num_rounds = 0;
  double decision_seconds_total = 0;  // Wall time inside Policy::Schedule.
  double decision_seconds_max = 0;
  long max_active_jobs = 0;            // Largest number of jobs one decision saw.
  long active_jobs_at_slowest = 0;     // Jobs in the slowest decision.
};

class Simulator {
 public:
  // `catalog` and `policy` must outlive the simulator.
  Simulator(const ApplicationCatalog& catalog, const Policy& policy, SimulatorOptions options);

  // Runs the workload to completion. Errors: unknown application, a job asking
  // for more GPUs than the cluster has (or holds in whole workers of its
  // gpus_per_worker, which must divide its GPUs), a policy returning an
  // invalid allocation (a bug), or max_time exceeded.
  Result<SimulationResult> Run(const std::vector<JobSpec>& workload) const;

 private:
  const ApplicationCatalog& catalog_;
  const Policy& policy_;
  SimulatorOptions options_;
};

// Writes per-job results as CSV.
Status WriteJobResults(const std::string& path, const SimulationResult& result);

}  // namespace frugal::sched
