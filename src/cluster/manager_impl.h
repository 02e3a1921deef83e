// ClusterManager's state and steps (internal). cluster_manager.cc holds the
// user and agent entry points, manager_round.cc the scheduling round and
// node timeouts. Every method REQUIRES mu_ held by the public caller.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/cluster/cluster_manager.h"
#include "live_speed.h"

namespace frugal::cluster {

class ClusterManager::Impl {
 public:
  Impl(std::unique_ptr<StateStore> store, std::unique_ptr<JobController> controller, const WallClock& clock,
       ManagerOptions options, std::unique_ptr<sched::Policy> policy)
      : store_(std::move(store)), controller_(std::move(controller)), clock_(clock), options_(std::move(options)),
        policy_(std::move(policy)) {}

  Status Load();
  // Runs `step` as one store transaction (rolled back if it fails).
  Status Transact(const std::function<Status()>& step);
  Result<int64_t> Submit(const JobSubmission& job);
  Status Cancel(int64_t job_id);
  Result<AgentReply> Heartbeat(const AgentReport& report);
  Status Tick();
  Status RunRound();

  // Steps.
  Result<NodeRecord*> TouchNode(const AgentReport& report);
  Status HandleExit(const NodeRecord& node, const TaskExit& exit);
  Status HandleSamples(const std::vector<MetricSample>& samples);
  void LearnSample(JobRecord& job, const MetricSample& m);
  Status MarkSilentNodesDown();
  Status NodeDown(NodeRecord& node);
  void AccrueService();
  std::vector<sched::JobView> BuildViews(const std::vector<JobRecord*>& active, const std::map<int64_t, int>& index,
                                         int gpus_per_node);
  std::vector<std::vector<NodeSlots>> FitToController(const std::vector<sched::Placement>& placements,
                                                      const std::vector<int64_t>& node_of_index,
                                                      const std::vector<JobRecord*>& jobs) const;
  void RaiseToMinimum(const std::vector<sched::Placement>& placements, const std::vector<JobRecord*>& jobs,
                      std::vector<std::vector<NodeSlots>>* out) const;
  // Moves the job to `placement` as a new generation (state, allocations,
  // event) and saves it.
  Status SetPlacement(JobRecord& job, std::vector<NodeSlots> placement, const std::string& why);
  Status EndJob(JobRecord& job, JobState state, const std::string& message);
  Status Event(const std::string& kind, int64_t job_id, int64_t node_id, const std::string& message);
  JobRecord* FindJob(int64_t id);

  mutable std::mutex mu_;
  std::unique_ptr<StateStore> store_;                 // GUARDED_BY(mu_), as is everything below.
  std::unique_ptr<JobController> controller_;
  const WallClock& clock_;
  ManagerOptions options_;
  std::unique_ptr<sched::Policy> policy_;
  std::vector<NodeRecord> nodes_;                     // By id.
  std::vector<JobRecord> jobs_;                       // By id, including ended jobs.
  std::map<int64_t, LiveSpeed> speeds_;               // Active jobs' throughput estimates.
  double next_round_ = 0;
  double last_round_ = -1e300;
  double last_accrual_ = 0;
  long rounds_ = 0;
};

}  // namespace frugal::cluster
