// frugal._C.LocalSync's C++ object (replica.cc), shared with the elastic
// session's binding (elastic.cc), which snapshots and restores it.
#pragma once

#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/engine/cluster_average.h"
#include "frugal/engine/local_sync.h"
#include "frugal/engine/replica.h"
#include "frugal/engine/run_config.h"

namespace frugal::python {

// The learning rate of DistributedModel(sync="local") per iteration: the
// constructor's, then each set_lr's from its iteration on (the inner steps
// and --outer-anneal read it). With a torch optimizer: its first group's
// base lr, then the lr of each step() (the outer annealing alone reads it).
class LrTrack {
 public:
  explicit LrTrack(double lr) { points_.emplace_back(0, lr); }
  double At(int64_t t) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto after = std::upper_bound(points_.begin(), points_.end(), t,
                                  [](int64_t v, const std::pair<int64_t, double>& p) { return v < p.first; });
    return after == points_.begin() ? points_.front().second : std::prev(after)->second;
  }
  void Set(int64_t t, double lr) {
    std::lock_guard<std::mutex> lock(mu_);
    while (points_.size() > 1 && points_.back().first >= t) points_.pop_back();
    points_.emplace_back(t, lr);
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<int64_t, double>> points_;
};

// frugal._C.LocalSync: engine::LocalSync (the local-update mode) on the
// parameters of a Replica, whose layout it shares and whose pipeline stays
// idle, as in the Worker.
struct PyLocal {
  std::shared_ptr<LrTrack> lr;
  engine::Replica* replica = nullptr;           // kept alive by the Python object (keep_alive)
  comm::Transport* transport = nullptr;   // the World's, likewise
  engine::OuterStep outer;                // the run's outer step (a checkpoint's "outer_step")
  bool site = false;
  std::unique_ptr<engine::LocalSync> sync;
  // sync='site': the cluster's members average their gradients before each
  // inner step (Note [Site replicas] in sync_strategy.cc).
  std::unique_ptr<engine::ClusterAverage> average;
};

}  // namespace frugal::python
