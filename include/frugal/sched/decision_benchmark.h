// Times one scheduling decision on a large synthetic cluster state: the first
// `num_active` jobs of a workload are all active at once, each with a
// deterministic pseudo-random amount of progress and attained service and no
// GPUs yet (the most work for a policy: everything must be placed). Used by
// `frugal cluster bench` for the "one decision with 1,000 active jobs" goal.
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"
#include "frugal/sched/throughput_model.h"
#include "frugal/sched/workload.h"

namespace frugal::sched {

struct DecisionTiming {
  int num_jobs = 0;
  int gpus_allocated = 0;  // In the last decision.
  std::vector<double> seconds;  // One entry per repetition.
  double median = 0;
  double max = 0;
};

Result<DecisionTiming> TimeDecision(const ApplicationCatalog& catalog, const Policy& policy,
                                    const std::vector<JobSpec>& workload, const ClusterSpec& cluster,
                                    int num_active, int repetitions, uint64_t seed);

}  // namespace frugal::sched
