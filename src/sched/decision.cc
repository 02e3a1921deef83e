#include "frugal/sched/decision.h"

#include <algorithm>
#include <chrono>

namespace frugal::sched {
namespace {

// The caller's side of the contract: whole workers
// (Note [Workers of several GPUs] in placer.cc).
Status CheckViews(const std::vector<JobView>& views) {
  for (const JobView& v : views) {
    if (v.gpus_per_worker < 1 || v.requested_gpus % v.gpus_per_worker != 0) {
      return Status::InvalidArgument("job " + std::to_string(v.id) + " asks for " +
                                     std::to_string(v.requested_gpus) + " GPUs in workers of " +
                                     std::to_string(v.gpus_per_worker) +
                                     " (gpus_per_worker must be >= 1 and divide the request)");
    }
  }
  return Status::Ok();
}

Status CheckPlacements(const Policy& policy, const ClusterView& cluster, const std::vector<JobView>& views,
                       const std::vector<Placement>& next) {
  if (next.size() != views.size()) {
    return Status::Internal("policy " + policy.Name() + " returned " + std::to_string(next.size()) +
                            " placements for " + std::to_string(views.size()) + " jobs");
  }
  const ClusterSpec& spec = cluster.spec;
  std::vector<int> used(std::max(spec.num_nodes, 0), 0);
  for (size_t k = 0; k < next.size(); ++k) {
    for (const NodeShare& s : next[k].shares()) {
      if (s.node < 0 || s.node >= spec.num_nodes) {
        return Status::Internal("policy " + policy.Name() + " used node " + std::to_string(s.node));
      }
      if (s.gpus % views[k].gpus_per_worker != 0) {
        return Status::Internal("policy " + policy.Name() + " gave job " + std::to_string(views[k].id) + " " +
                                std::to_string(s.gpus) + " GPUs on node " + std::to_string(s.node) +
                                ", not whole workers of " + std::to_string(views[k].gpus_per_worker));
      }
      used[s.node] += s.gpus;
      if (used[s.node] > spec.gpus_per_node) {
        return Status::Internal("policy " + policy.Name() + " over-committed node " + std::to_string(s.node) +
                                " at t=" + std::to_string(cluster.now));
      }
    }
    if (next[k].NumGpus() > std::max(views[k].max_gpus_at_max_batch, views[k].requested_gpus)) {
      return Status::Internal("policy " + policy.Name() + " gave job " + std::to_string(views[k].id) +
                              " more GPUs than it can use");
    }
  }
  return Status::Ok();
}

Status CheckBatchSizes(const Policy& policy, const std::vector<JobView>& views, const std::vector<int>& batches) {
  if (!batches.empty() && batches.size() != views.size()) {
    return Status::Internal("policy " + policy.Name() + " returned the wrong number of batch sizes");
  }
  for (size_t k = 0; k < batches.size(); ++k) {
    if (batches[k] < views[k].min_batch_size || batches[k] > views[k].max_batch_size) {
      return Status::Internal("policy " + policy.Name() + " chose batch " + std::to_string(batches[k]) +
                              " outside [" + std::to_string(views[k].min_batch_size) + ", " +
                              std::to_string(views[k].max_batch_size) + "] for job " + std::to_string(views[k].id));
    }
  }
  return Status::Ok();
}

// Note [Held jobs]: a job past its last step is only evaluating its model
// and writing its result, seconds to a minute. Resizing it then gains
// nothing: a worker that joins finds the run over, and a shrink or a
// preemption throws the evaluation away (and restarts the job). So a held
// job keeps its placement whatever the policy said. Where the policy gave
// its GPUs to others, they give way in view order (queue order): an earlier
// job keeps its GPUs on a node, a later one is trimmed, possibly to nothing,
// in whole workers (Note [Workers of several GPUs] in placer.cc).
void HoldPlacements(const ClusterView& cluster, const std::vector<JobView>& views, std::vector<Placement>* next) {
  if (std::none_of(views.begin(), views.end(), [](const JobView& v) { return v.hold; })) return;
  std::vector<int> free(std::max(cluster.spec.num_nodes, 0), cluster.spec.gpus_per_node);
  for (size_t k = 0; k < views.size(); ++k) {
    if (!views[k].hold) continue;
    std::vector<NodeShare> kept;  // A node the cluster no longer has is dropped.
    for (const NodeShare& s : views[k].placement.shares()) {
      if (s.node < 0 || s.node >= cluster.spec.num_nodes) continue;
      kept.push_back(s);
      free[s.node] -= s.gpus;
    }
    (*next)[k] = Placement(std::move(kept));
  }
  for (size_t k = 0; k < views.size(); ++k) {
    if (views[k].hold) continue;
    std::vector<NodeShare> kept;
    for (const NodeShare& s : (*next)[k].shares()) {
      const int room = std::max(0, free[s.node]);
      const int gpus = std::min(s.gpus, room / views[k].gpus_per_worker * views[k].gpus_per_worker);
      if (gpus > 0) kept.push_back({s.node, gpus});
      free[s.node] -= gpus;
    }
    (*next)[k] = Placement(std::move(kept));
  }
}

}  // namespace

Result<RoundDecision> DecideRound(const Policy& policy, const ClusterView& cluster, const std::vector<JobView>& jobs,
                                  const Clock& clock) {
  FRUGAL_RETURN_IF_ERROR(CheckViews(jobs));
  RoundDecision d;
  const Clock::time_point start = clock.Now();
  d.placements = policy.Schedule(cluster, jobs);
  d.decision_seconds = Seconds(clock.Now() - start);
  FRUGAL_RETURN_IF_ERROR(CheckPlacements(policy, cluster, jobs, d.placements));
  HoldPlacements(cluster, jobs, &d.placements);
  d.batch_sizes = policy.ChooseBatchSizes(cluster, jobs, d.placements);
  FRUGAL_RETURN_IF_ERROR(CheckBatchSizes(policy, jobs, d.batch_sizes));
  return d;
}

}  // namespace frugal::sched
