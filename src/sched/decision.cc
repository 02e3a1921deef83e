#include "frugal/sched/decision.h"

#include <algorithm>
#include <chrono>

namespace frugal::sched {
namespace {

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

}  // namespace

Result<RoundDecision> DecideRound(const Policy& policy, const ClusterView& cluster, const std::vector<JobView>& jobs) {
  RoundDecision d;
  auto start = std::chrono::steady_clock::now();
  d.placements = policy.Schedule(cluster, jobs);
  d.decision_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  FRUGAL_RETURN_IF_ERROR(CheckPlacements(policy, cluster, jobs, d.placements));
  d.batch_sizes = policy.ChooseBatchSizes(cluster, jobs, d.placements);
  FRUGAL_RETURN_IF_ERROR(CheckBatchSizes(policy, jobs, d.batch_sizes));
  return d;
}

}  // namespace frugal::sched
