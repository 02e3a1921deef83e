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
  // The most GPUs a job whose workers take `gpus_per_worker` GPUs each can
  // hold on one node, and on the whole cluster: whole workers only (0 where
  // a worker does not fit a node). Note [Workers of several GPUs] in
  // src/sched/placer.cc.
  int NodeGpusInWorkers(int gpus_per_worker) const {
    return gpus_per_worker > 0 ? gpus_per_node / gpus_per_worker * gpus_per_worker : 0;
  }
  int TotalGpusInWorkers(int gpus_per_worker) const { return num_nodes * NodeGpusInWorkers(gpus_per_worker); }
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
// nodes as possible, e.g. 6 GPUs on 4-GPU nodes -> {2, 4}. For a job whose
// workers take `gpus_per_worker` GPUs each, a node holds only whole workers,
// so full nodes hold floor(gpus_per_node / gpus_per_worker) of them: 6 GPUs
// in workers of 3 on 4-GPU nodes -> {3, 3}. Empty where a worker does not fit
// a node. REQUIRES: gpus_per_node > 0, gpus a multiple of gpus_per_worker.
Shape CompactShape(int gpus, int gpus_per_node, int gpus_per_worker = 1);

}  // namespace frugal::sched
