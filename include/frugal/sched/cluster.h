// Cluster and placement value types shared by the scheduling policies, the
// simulator and (later) the live scheduler service.
//
// Thread safety: plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal::sched {

// A homogeneous cluster: `num_nodes` nodes of `gpus_per_node` GPUs each.
struct ClusterSpec {
  int num_nodes = 16;
  int gpus_per_node = 4;

  int TotalGpus() const { return num_nodes * gpus_per_node; }
};

// The number of GPUs one job holds on one node.
struct NodeShare {
  int node = 0;
  int gpus = 0;

  bool operator==(const NodeShare& o) const { return node == o.node && gpus == o.gpus; }
};

// Which GPUs a job holds: per-node counts, sorted by node id, no zero counts.
// GPUs inside a node are interchangeable, so counts are all a placement needs.
// An empty placement means the job holds no GPU (pending or preempted).
class Placement {
 public:
  Placement() = default;
  // REQUIRES: shares have distinct nodes; zero counts are dropped.
  explicit Placement(std::vector<NodeShare> shares);

  const std::vector<NodeShare>& shares() const { return shares_; }
  bool empty() const { return shares_.empty(); }
  int NumGpus() const;
  int NumNodes() const { return static_cast<int>(shares_.size()); }
  // GPUs held on `node` (0 if none).
  int GpusOn(int node) const;

  bool operator==(const Placement& o) const { return shares_ == o.shares_; }
  bool operator!=(const Placement& o) const { return !(*this == o); }

  // "n3:4+n7:2"; "-" when empty.
  std::string ToString() const;

 private:
  std::vector<NodeShare> shares_;
};

// The shape of a placement: per-node GPU counts sorted ascending, node ids
// dropped. Throughput depends on the shape only.
using Shape = std::vector<int>;

Shape ShapeOf(const Placement& placement);

// The most compact shape for `gpus` GPUs on nodes of `gpus_per_node`: as few
// nodes as possible, e.g. 6 GPUs on 4-GPU nodes -> {2, 4}.
Shape CompactShape(int gpus, int gpus_per_node);

}  // namespace frugal::sched
