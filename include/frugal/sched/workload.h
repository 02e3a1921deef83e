// A workload: the training jobs submitted to the cluster, in the CSV format of
// data/scheduler/pollux-workloads (`name,time,application,num_replicas,
// batch_size`), with optional `tail_gpu_s` and `gpus_per_worker` columns.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::sched {

struct JobSpec {
  std::string name;
  double submit_time = 0;  // Seconds from the start of the trace.
  std::string application;
  int num_replicas = 1;    // GPUs the user asked for; a multiple of gpus_per_worker.
  int batch_size = 1;      // Global batch size the user asked for (kept fixed).
  // GPU-seconds of work after the job's last step (its final evaluation,
  // saving), shared by the GPUs it holds then, which it keeps meanwhile:
  // measured on a live cluster (bench/cluster/replay.py); 0 in the
  // published traces.
  double tail_gpu_seconds = 0;
  // GPUs one worker process takes; every node share of the job's placement
  // is a multiple of it (JobView::gpus_per_worker).
  int gpus_per_worker = 1;
};

// Reads a workload CSV. Columns are found by name (extra columns are ignored).
// Errors name the file and line. Jobs are returned sorted by submit time
// (stable, so equal times keep file order).
Result<std::vector<JobSpec>> LoadWorkload(const std::string& path);

// Writes the `tail_gpu_s` column only if some job has a tail, and the
// `gpus_per_worker` column only if some job's workers take several GPUs.
Status WriteWorkload(const std::string& path, const std::vector<JobSpec>& jobs);

}  // namespace frugal::sched
