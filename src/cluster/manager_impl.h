// ClusterManager's state and steps (internal). cluster_manager.cc holds the
// user and agent entry points, manager_round.cc the scheduling round and
// node timeouts. Every method REQUIRES mu_ held by the public caller, except
// Decide and RoundOffLock (Note [Rounds outside the lock]).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "frugal/cluster/cluster_manager.h"
#include "live_speed.h"

namespace frugal::cluster {

// What a round decides on, copied under the manager's lock (index k: the
// k-th active job, in submission order).
struct RoundInput {
  uint64_t node_version = 0;
  sched::ClusterView cluster;
  std::vector<int64_t> node_of_index;  // Up node index (id order) -> node id.
  std::vector<NodeRecord> up_nodes;
  // The policy's nodes (Note [Unequal nodes]): each up node as slots / unit
  // scheduler nodes of `unit` slots; scheduler node -> up node index, and
  // each up node's first scheduler node.
  std::vector<int> node_of_sched;
  std::vector<int> first_sched;
  std::vector<sched::JobView> views;
  std::deque<LiveSpeed> speeds;        // The views' estimates (stable addresses).
  std::vector<int64_t> ids;
  std::vector<int64_t> generations;
  std::vector<int> min_slots;          // min_workers x gpus_per_worker of each job.
  std::vector<int> gpus_per_worker;    // JobSubmission::GpusPerWorker of each job.
  std::vector<int> max_nodes;          // JobController::MaxNodesPerJob of each job.
  std::vector<std::vector<NodeSlots>> placements;
};

class ClusterManager::Impl {
 public:
  Impl(std::unique_ptr<StateStore> store, std::unique_ptr<JobController> controller, const Clock& clock,
       ManagerOptions options, std::unique_ptr<sched::Policy> policy)
      : store_(std::move(store)), controller_(std::move(controller)), clock_(clock), options_(std::move(options)),
        policy_(std::move(policy)) {}

  Status Load();
  // Runs `step` as one store transaction (rolled back if it fails).
  Status Transact(const std::function<Status()>& step);
  Result<int64_t> Submit(const JobSubmission& job);
  Status Cancel(int64_t job_id);
  Result<AgentReply> Heartbeat(const AgentReport& report);
  // Note [Rounds outside the lock]: a round is three steps. Only the first
  // and last hold mu_; the decision in between holds round_mu_ only.
  Status MarkSilentNodesDown();
  bool RoundDue() const;
  // mu_ held: accrues and saves the attained service and snapshots what the
  // policy sees into *in; false if there is nothing to decide.
  Result<bool> PrepareRound(RoundInput* in);
  // Neither lock needed (round_mu_ held): the policy's placements for the
  // snapshot, fitted to the controller.
  Result<std::vector<std::vector<NodeSlots>>> Decide(const RoundInput& in);
  // mu_ held: applies the decision unless what it was decided on changed
  // (then the next tick decides again).
  Status ApplyRound(const RoundInput& in, std::vector<std::vector<NodeSlots>> next);
  Status ExplainTooLarge(const RoundInput& in, const std::vector<JobRecord*>& jobs);
  // The three steps, taking the locks (round_mu_ held by the caller).
  Status RoundOffLock();

  // Steps.
  Result<NodeRecord*> TouchNode(const AgentReport& report);
  Status HandleExit(const NodeRecord& node, const TaskExit& exit);
  Status HandleSamples(const std::vector<MetricSample>& samples);
  Status HandleEndpoints(const std::vector<TaskEndpoint>& endpoints);
  Status LearnSample(JobRecord& job, const MetricSample& m);
  // A step record of a job with a resize pending: the resize's cost, if the
  // record is the first at the new size (Note [Measured resize cost]).
  Status LearnResizeCost(JobRecord& job, const MetricSample& m);
  // A rate the job measured at a size its prior predicted (Note [Prior calibration]).
  Status CalibratePrior(const LiveSpeed& speed, const MetricSample& m);
  // mu_ and round_mu_ held: a new policy_ when the measured resize cost moved away from the one in force.
  Status AdoptResizeCost();
  // A new entry in speeds_ for the job, with its prior.
  LiveSpeed& TrackSpeed(const JobRecord& job);
  // The job's estimate as a round sees it: its own rates with its profile's (a copy).
  LiveSpeed SpeedForRound(const JobRecord& job);
  Status NodeDown(NodeRecord& node);
  void AccrueService();
  void BuildViews(const std::vector<JobRecord*>& active, const std::map<int64_t, int>& index, RoundInput* in);
  // The policy's placements on up node indices (Note [Unequal nodes]).
  static std::vector<sched::Placement> OnUpNodes(const std::vector<sched::Placement>& placements, const RoundInput& in);
  std::vector<std::vector<NodeSlots>> FitToController(const std::vector<sched::Placement>& placements,
                                                      const RoundInput& in) const;
  void RaiseToMinimum(const std::vector<sched::Placement>& placements, const RoundInput& in,
                      std::vector<std::vector<NodeSlots>>* out) const;
  // Moves the job to `placement` as a new generation (state, allocations,
  // event) and saves it. `fresh`: restart it from its checkpoint rather than
  // resize it in place (JobController::Reconfigure).
  Status SetPlacement(JobRecord& job, std::vector<NodeSlots> placement, const std::string& why, bool fresh = false);
  Status EndJob(JobRecord& job, JobState state, const std::string& message);
  // Fills the task's transport: the job's key pair, made and saved on first
  // use, or insecure_transport (Note [Job keys]).
  Status SecureTask(TaskSpec* task);
  Status Event(const std::string& kind, int64_t job_id, int64_t node_id, const std::string& message);
  JobRecord* FindJob(int64_t id);  // Binary search: jobs_ is sorted by id.

  std::mutex round_mu_;  // One round at a time; taken before mu_. Guards policy_ too.
  mutable std::mutex mu_;
  std::unique_ptr<StateStore> store_;                 // GUARDED_BY(mu_), as is everything below.
  std::unique_ptr<JobController> controller_;
  const Clock& clock_;
  ManagerOptions options_;
  std::unique_ptr<sched::Policy> policy_;
  std::vector<NodeRecord> nodes_;                     // By id.
  std::vector<JobRecord> jobs_;                       // By id, including ended jobs.
  std::map<int64_t, LiveSpeed> speeds_;               // Active jobs' throughput estimates.
  std::map<std::string, RateTable> profile_rates_;    // What the jobs of each profile measured.
  ResizeCost resize_cost_;                             // seconds: the policy's; see Note [Measured resize cost].
  PriorCalibration prior_calibration_;                 // Note [Prior calibration].
  // A running job's last resize, until its second step record at the new
  // size past it: when, the job's estimated step then, and the first record
  // at the new size (first_time < 0: none yet).
  struct PendingResize {
    double time = 0;
    double step = 0;
    double first_time = -1;
    int first_step = 0;
  };
  std::map<int64_t, PendingResize> pending_resizes_;
  std::map<int64_t, MetricSample> last_records_;       // Each active job's newest step record.
  // Jobs placed anew (started, resized, restarted) whose first record at the
  // new size has not arrived: its window spans the change, so it is no rate.
  std::set<int64_t> unsettled_;
  // Active jobs' CurveZMQ key pairs (public, secret), as saved in the
  // store's setting "job_key_<id>" (Note [Job keys]).
  std::map<int64_t, std::pair<std::string, std::string>> job_keys_;
  double next_round_ = 0;
  double last_round_ = -1e300;
  double last_accrual_ = 0;
  long rounds_ = 0;
  uint64_t node_version_ = 0;  // Bumped when a node registers, goes up or down, or changes slots.
};

}  // namespace frugal::cluster
