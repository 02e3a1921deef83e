#include "frugal/sched/cluster.h"

#include <algorithm>
#include <cassert>

namespace frugal::sched {

Placement::Placement(std::vector<NodeShare> shares) {
  for (const NodeShare& s : shares) {
    if (s.gpus > 0) shares_.push_back(s);
  }
  std::sort(shares_.begin(), shares_.end(),
            [](const NodeShare& a, const NodeShare& b) { return a.node < b.node; });
}

int Placement::NumGpus() const {
  int n = 0;
  for (const NodeShare& s : shares_) n += s.gpus;
  return n;
}

int Placement::GpusOn(int node) const {
  for (const NodeShare& s : shares_) {
    if (s.node == node) return s.gpus;
  }
  return 0;
}

std::string Placement::ToString() const {
  if (shares_.empty()) return "-";
  std::string out;
  for (const NodeShare& s : shares_) {
    if (!out.empty()) out += '+';
    out += "n" + std::to_string(s.node) + ":" + std::to_string(s.gpus);
  }
  return out;
}

Shape ShapeOf(const Placement& placement) {
  Shape shape;
  shape.reserve(placement.shares().size());
  for (const NodeShare& s : placement.shares()) shape.push_back(s.gpus);
  std::sort(shape.begin(), shape.end());
  return shape;
}

Shape CompactShape(int gpus, int gpus_per_node, int gpus_per_worker) {
  assert(gpus_per_node > 0);
  Shape shape;
  const int per_node = ClusterSpec{1, gpus_per_node}.NodeGpusInWorkers(gpus_per_worker);
  if (gpus <= 0 || per_node <= 0) return shape;
  assert(gpus % gpus_per_worker == 0);
  int rem = gpus % per_node;
  if (rem > 0) shape.push_back(rem);
  for (int i = 0; i < gpus / per_node; ++i) shape.push_back(per_node);
  return shape;
}

}  // namespace frugal::sched
