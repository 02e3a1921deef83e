// Synthesises workloads from the Philly trace for a cluster of any size:
// arrivals follow a contiguous window of the trace (inter-arrival gaps
// rescaled to reach a target load), and each Philly job is mapped onto the
// application whose run time at the job's GPU count is closest, in log space,
// to the job's GPU-time. See docs/design/scheduler.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sched/throughput_model.h"
#include "frugal/sched/workload.h"

namespace frugal::sched {

// One row of philly.csv.
struct PhillyJob {
  double submit_time = 0;  // Seconds since the epoch of the trace's first row.
  double duration = 0;
  int num_gpus = 1;
  double gpu_time = 0;
};

// Reads philly.csv (`timestamp,duration,num_gpus,gpu_time,cluster`), sorted by
// submit time. Rows with zero duration are skipped. Errors name file and line.
Result<std::vector<PhillyJob>> LoadPhillyTrace(const std::string& path);

struct WorkloadGeneratorOptions {
  int num_jobs = 160;
  int cluster_gpus = 64;
  int gpus_per_node = 4;
  // Offered load: requested GPU-time of all jobs / (cluster GPUs x span).
  double load = 0.6;
  uint64_t seed = 1;
};

// The (application, batch) each mapped job uses, and the GPU counts the
// Pollux workloads use for it. Built in; documented in docs/design/scheduler.md.
struct AppTemplate {
  std::string application;
  int batch_size;
  int min_gpus;
  int max_gpus;
};
std::vector<AppTemplate> DefaultAppTemplates();

Result<std::vector<JobSpec>> GenerateWorkload(const std::vector<PhillyJob>& trace,
                                              const ApplicationCatalog& catalog,
                                              const WorkloadGeneratorOptions& options);

}  // namespace frugal::sched
