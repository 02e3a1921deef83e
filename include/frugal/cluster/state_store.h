// StateStore: the cluster service's durable state in one SQLite database in
// WAL mode (nodes, jobs, allocations, events, metric samples, the rates
// learned per job profile). The manager
// writes through it on every change, so a restarted server reads back
// exactly what it had decided (docs/guide/cluster.md, "Recovery").
//
// Thread safety: not thread-safe; the ClusterManager serialises calls under
// its mutex. Ownership: owns the sqlite3 handle, closed in the destructor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/cluster/types.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Opens (creating if needed) the database at `path`; ":memory:" for tests.
  // Errors: IOError naming the path, Corruption if it is not a Frugal
  // cluster database.
  static Result<std::unique_ptr<StateStore>> Open(const std::string& path);

  virtual Result<std::vector<NodeRecord>> LoadNodes() = 0;
  virtual Result<std::vector<JobRecord>> LoadJobs() = 0;
  virtual Result<std::vector<AllocationRecord>> LoadAllocations(int64_t job_id = 0) = 0;  // 0: all
  virtual Result<std::vector<EventRecord>> LoadEvents(int64_t after_id, int limit) = 0;
  virtual Result<std::vector<MetricSample>> LoadSamples(int64_t job_id) = 0;
  // Samples/s by worker count learned from every job of a profile
  // (JobSubmission::profile), by profile.
  virtual Result<std::map<std::string, std::map<int, double>>> LoadProfileRates() = 0;

  // Inserts (id 0: the store assigns it) or updates the node; returns the id.
  virtual Result<int64_t> SaveNode(const NodeRecord& node) = 0;
  virtual Result<int64_t> SaveJob(const JobRecord& job) = 0;
  // Only the attained service of the given jobs (id, slot-seconds): every
  // round saves it for every running job.
  virtual Status SaveAttained(const std::vector<std::pair<int64_t, double>>& attained) = 0;
  // Closes the job's open allocations at `time` and opens the given ones.
  virtual Status ReplaceAllocations(int64_t job_id, const std::vector<AllocationRecord>& open, double time) = 0;
  virtual Result<int64_t> AppendEvent(const EventRecord& event) = 0;
  // Samples already stored (same job, step, kind) are ignored.
  virtual Status AppendSamples(const std::vector<MetricSample>& samples) = 0;
  // The server's own values by key ("" when never saved).
  virtual Result<std::string> LoadSetting(const std::string& key) = 0;
  virtual Status SaveSetting(const std::string& key, const std::string& value) = 0;
  // Inserts or replaces the profile's rate at `workers`.
  virtual Status SaveProfileRate(const std::string& profile, int workers, double samples_per_s) = 0;

  // Several writes as one transaction (one fsync in WAL mode).
  virtual Status Begin() = 0;
  virtual Status Commit() = 0;
  virtual Status Rollback() = 0;
};

}  // namespace frugal::cluster
