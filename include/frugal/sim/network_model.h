// Network model for the simulator: how long collectives and point-to-point
// transfers take, given the hardware description's links. The simulator only
// sees this interface, so a packet-level or measured model can replace the
// analytic one.
//
// Thread safety: implementations are immutable; calls may be concurrent.
#pragma once

#include <memory>

#include "frugal/sim/hardware.h"

namespace frugal::sim {

enum class CollectiveAlgorithm {
  kRing,          // Flat ring: 2(n-1)/n N bytes per rank, 2(n-1) latency steps.
  kTree,          // Double binary tree: ~2N bytes per rank, 2 log2(n) latency steps.
  kHierarchical,  // Reduce-scatter in the node, all-reduce across nodes, all-gather in the node.
  kAuto,          // The fastest of the three for this size and group, as NCCL's tuner picks.
};

// A communication group: `size` ranks, `local_size` of them on each node
// (1 <= local_size <= size; size / local_size nodes take part).
struct CommGroup {
  int size = 1;
  int local_size = 1;
  int nodes() const { return (size + local_size - 1) / local_size; }
};

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  virtual double AllReduceSeconds(double bytes, const CommGroup& group, CollectiveAlgorithm algo) const = 0;
  // Each rank contributes `bytes_per_rank`; every rank ends with all of it.
  virtual double AllGatherSeconds(double bytes_per_rank, const CommGroup& group) const = 0;
  virtual double PointToPointSeconds(double bytes, bool inter_node) const = 0;
};

std::unique_ptr<NetworkModel> CreateAnalyticNetworkModel(const HardwareSpec& hw);

}  // namespace frugal::sim
