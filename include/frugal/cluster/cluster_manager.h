// ClusterManager: the live elastic scheduler's state machine. It owns the
// nodes, jobs and allocations (mirrored, write-through, in a StateStore),
// takes the agents' heartbeats and the users' submissions, and every round
// asks the scheduling policy for new placements through sched::DecideRound,
// the same call the trace-driven simulator makes (docs/guide/cluster.md).
//
// Thread safety: every public method takes the manager's one mutex, so the
// HTTP handlers and the ticker thread may call it concurrently. Errors from
// the store are returned to the caller of the method that hit them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/cluster/job_controller.h"
#include "frugal/cluster/speed_prior.h"
#include "frugal/cluster/state_store.h"
#include "frugal/cluster/types.h"
#include "frugal/common/clock.h"
#include "frugal/common/status.h"
#include "frugal/sched/policy.h"

namespace frugal::cluster {

struct ManagerOptions {
  std::string policy = "afs-p";          // Any of sched::PolicyNames().
  sched::PolicyOptions policy_options;   // Defaults: the simulator's.
  double round_interval_s = 5;           // Seconds between scheduling rounds (and on every submit/exit/node change).
  double node_timeout_s = 10;            // A node silent this long is marked down.
  int max_restarts = 3;                  // Failed generations restarted from a checkpoint before the job fails.
  // Each job's throughput prior (e.g. the planner's); empty: none
  // (Note [Live throughput prior] in src/cluster/live_speed.h).
  SpeedPriorFactory speed_prior;
  // Replace policy_options.reallocation_cost by the resize cost measured on
  // this cluster once there is one (Note [Measured resize cost]).
  bool learn_resize_cost = false;
  // Multiply the prior's predictions by the scale the jobs' measurements
  // give it (Note [Prior calibration]); the scale is kept and shown either way.
  bool calibrate_prior = false;
  // Jobs' processes on non-loopback hosts talk plain TCP rather than CURVE
  // with a key pair per job (Note [Job keys] in src/cluster/cluster_manager.cc).
  bool insecure_jobs = false;
};

// What a resize of a running job costs it, as the policy weighs it.
struct ResizeCost {
  double seconds = 0;  // policy_options.reallocation_cost in force.
  int measured = 0;    // Resizes measured so far (0: seconds is the configured value).
  double measured_seconds = 0;  // Their moving average (weight 0.3); 0 when none.
};

// How the prior's predictions compare with what the jobs measured on this
// cluster (Note [Prior calibration] in src/cluster/cluster_manager.cc).
struct PriorCalibration {
  int measured = 0;   // Step records of jobs with a prediction at their size.
  double scale = 1;   // Moving geometric mean of measured / predicted; predictions are multiplied by it.
};

// Per-job throughput: samples/s by worker count, measured by the job itself
// and by all jobs of its profile (JobSubmission::profile), and what the
// policy assumes at each count from 1 to max_workers (at most 64;
// Note [Live throughput prior]; unit-free where nothing is known).
struct ThroughputTable {
  std::map<int, double> samples_per_s;
  std::map<int, double> profile_samples_per_s;
  std::map<int, double> estimate;
};

class ClusterManager {
 public:
  // Reads the state back from `store` (an empty store is a new cluster);
  // nodes that were up get a grace period of node_timeout_s to heartbeat.
  // Errors: unknown policy, store errors.
  static Result<std::unique_ptr<ClusterManager>> Open(std::unique_ptr<StateStore> store,
                                                      std::unique_ptr<JobController> controller,
                                                      const Clock& clock, ManagerOptions options);
  ~ClusterManager();

  // InvalidArgument for a submission the cluster can never run.
  Result<int64_t> Submit(const JobSubmission& job);
  // NotFound for an unknown id; InvalidArgument if the job already ended.
  Status Cancel(int64_t job_id);
  // Registers the node on its first report; returns what it must run.
  Result<AgentReply> Heartbeat(const AgentReport& report);
  // Marks silent nodes down and runs a scheduling round when one is due.
  Status Tick();
  // A scheduling round now.
  Status RunRound();

  std::vector<NodeRecord> Nodes() const;
  std::vector<JobRecord> Jobs() const;
  Result<JobRecord> Job(int64_t job_id) const;
  std::map<int64_t, ThroughputTable> Throughputs() const;
  // Active jobs in the order the policy is shown them (submission order).
  std::vector<int64_t> QueueOrder() const;
  Result<std::vector<EventRecord>> Events(int64_t after_id, int limit) const;
  Result<std::vector<AllocationRecord>> Allocations() const;
  Result<std::vector<MetricSample>> Samples(int64_t job_id) const;
  const std::string& policy_name() const { return options_.policy; }
  ResizeCost resize_cost() const;
  PriorCalibration prior_calibration() const;
  long rounds() const;

 private:
  class Impl;
  explicit ClusterManager(std::unique_ptr<Impl> impl, ManagerOptions options);
  std::unique_ptr<Impl> impl_;
  ManagerOptions options_;
};

}  // namespace frugal::cluster
