// One scheduling decision: the single code path shared by the trace-driven
// simulator (src/sched/simulator.cc) and the live cluster service
// (src/cluster/cluster_manager.cc). Both build a ClusterView and JobViews
// from their own state and call DecideRound(); neither calls Policy::Schedule
// directly, so a policy behaves the same on traces and on live events.
//
// Thread safety: a free function; the policy is only read.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/clock.h"
#include "frugal/common/env.h"
#include "frugal/common/status.h"
#include "frugal/sched/cluster.h"
#include "frugal/sched/policy.h"

namespace frugal::sched {

struct RoundDecision {
  std::vector<Placement> placements;  // One per job, index-aligned with the views.
  std::vector<int> batch_sizes;       // Empty: keep every job's batch.
  double decision_seconds = 0;        // Time inside Policy::Schedule, on the caller's clock.
};

// Asks `policy` for the placements (and batch sizes) of `jobs` on `cluster`
// and checks its answer: one placement per job, node ids inside the cluster,
// every node share a multiple of the job's gpus_per_worker, no node
// over-committed, no job above max(max_gpus_at_max_batch, requested_gpus),
// batch sizes in each job's range. A policy that breaks these is a bug:
// Internal error naming the policy and the job id. A view with
// gpus_per_worker < 1, or requested_gpus not a multiple of it, is the
// caller's: InvalidArgument naming the job, before the policy runs. Jobs with
// `hold` set then keep their current placements, and the others give way on
// those nodes (Note [Held jobs] in decision.cc). decision_seconds is timed
// on `clock`.
Result<RoundDecision> DecideRound(const Policy& policy, const ClusterView& cluster, const std::vector<JobView>& jobs,
                                  const Clock& clock = Env::Default());

}  // namespace frugal::sched
