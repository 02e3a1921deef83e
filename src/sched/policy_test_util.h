// Speeds, jobs and policies the policy tests share. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/sched/policy.h"

namespace frugal::sched {

// Throughput by total GPU count (placement ignored); rates beyond the table
// repeat the last entry.
class TableSpeed : public SpeedEstimate {
 public:
  explicit TableSpeed(std::vector<double> by_gpus) : by_gpus_(std::move(by_gpus)) {}
  double ProgressRate(const Shape& shape) const override {
    int n = 0;
    for (int g : shape) n += g;
    if (n == 0) return 0;
    return by_gpus_[std::min<size_t>(n, by_gpus_.size()) - 1];
  }

 private:
  std::vector<double> by_gpus_;  // [0] = one GPU.
};

inline JobView Job(int64_t id, const SpeedEstimate* speed, double submit = 0, int requested = 1, int max_gpus = 64) {
  JobView v;
  v.id = id;
  v.speed = speed;
  v.submit_time = submit;
  v.requested_gpus = requested;
  v.max_gpus = max_gpus;
  return v;
}

inline std::unique_ptr<Policy> Make(const std::string& name, PolicyOptions options = {}) {
  auto p = CreatePolicy(name, options);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

inline ClusterView Cluster(int nodes, int gpus_per_node) { return ClusterView{{nodes, gpus_per_node}, 0}; }

}  // namespace frugal::sched
