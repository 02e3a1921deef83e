#include "frugal/sim/network_model.h"

#include <algorithm>
#include <cmath>

namespace frugal::sim {
namespace {

// Note [Analytic collective costs]
// Bandwidths are per GPU and per direction. Inside a node a GPU reaches its
// peers at intra_link_gbs (NVLink through a switch, or PCIe). Across nodes
// every GPU owns 1/gpus_per_node of the node's NICs (DGX-style, one NIC per
// GPU), and NCCL runs one ring or tree per NIC, so a group with L members per
// node moves inter-node data at L times the per-GPU NIC rate, capped by the
// node's total. Efficiency factors of the hardware description scale both.
//
// Every collective is alpha-beta: a fixed cost per collective
// (collective_latency_us: the NCCL launch and the synchronisation of the
// group), plus a latency per algorithm step on the link it crosses
// (intra_latency_us over NVLink/PCIe, inter_latency_us over the network),
// plus bytes over bandwidth. Ring: 2(n-1) steps, 2(n-1)/n N bytes per rank;
// tree (across nodes): 2 ceil(log2 nodes-involved n) steps, 2N bytes. kAuto
// takes the fastest, as NCCL's tuner does: across nodes small messages go by
// tree and large ones by ring or hierarchically. Inside one node NCCL's tree
// degenerates to a chain, so the ring is used. A pipeline send pays
// p2p_latency_us once on top of the link latency.
class AnalyticNetworkModel : public NetworkModel {
 public:
  explicit AnalyticNetworkModel(const HardwareSpec& hw)
      : intra_bw_(hw.intra_link_gbs * 1e9 * hw.efficiency.intra_link),
        nic_bw_(hw.InterNodeBytesPerGpu() * hw.efficiency.inter_link),
        intra_lat_(hw.intra_latency_us * 1e-6),
        inter_lat_(hw.inter_latency_us * 1e-6),
        collective_s_(hw.efficiency.collective_latency_us * 1e-6),
        p2p_s_(hw.efficiency.p2p_latency_us * 1e-6) {}

  double AllReduceSeconds(double bytes, const CommGroup& g, CollectiveAlgorithm algo) const override {
    const int n = g.size;
    if (n <= 1 || bytes <= 0) return 0.0;
    return collective_s_ + AllReduceSteps(bytes, g, algo);
  }

  double AllGatherSeconds(double bytes_per_rank, const CommGroup& g) const override {
    const int n = g.size;
    if (n <= 1 || bytes_per_rank <= 0) return 0.0;
    const bool cross = g.nodes() > 1;
    const double bw = cross ? std::min(intra_bw_, nic_bw_ * std::min(g.local_size, n)) : intra_bw_;
    const double lat = cross ? inter_lat_ : intra_lat_;
    return collective_s_ + (n - 1) * (bytes_per_rank / bw + lat);
  }

  double PointToPointSeconds(double bytes, bool inter_node) const override {
    if (bytes <= 0) return 0.0;
    return p2p_s_ + (inter_node ? bytes / nic_bw_ + inter_lat_ : bytes / intra_bw_ + intra_lat_);
  }

 private:
  static double Ring(double bytes, int n, double bw, double lat) {
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
  }
  static double Tree(double bytes, int n, double bw, double lat) {
    return 2.0 * bytes / bw + 2.0 * std::ceil(std::log2(static_cast<double>(n))) * lat;
  }

  // The all-reduce without the fixed per-collective cost.
  double AllReduceSteps(double bytes, const CommGroup& g, CollectiveAlgorithm algo) const {
    const int n = g.size;
    const int nodes = g.nodes();
    const int local = std::min(g.local_size, n);
    if (nodes <= 1) {
      // NCCL's tree is a tree of nodes with a chain inside each node: in one
      // node it is a chain (2(n-1) hops, 2N bytes), never faster than the
      // ring, so every algorithm is the ring here.
      return Ring(bytes, n, intra_bw_, intra_lat_);
    }
    const double cross_bw = std::min(intra_bw_, nic_bw_ * local);
    switch (algo) {
      case CollectiveAlgorithm::kAuto:
        return std::min({AllReduceSteps(bytes, g, CollectiveAlgorithm::kRing),
                         AllReduceSteps(bytes, g, CollectiveAlgorithm::kTree),
                         AllReduceSteps(bytes, g, CollectiveAlgorithm::kHierarchical)});
      case CollectiveAlgorithm::kRing:
        return Ring(bytes, n, cross_bw, inter_lat_);
      case CollectiveAlgorithm::kTree:
        return Tree(bytes, n, cross_bw, inter_lat_);
      case CollectiveAlgorithm::kHierarchical: {
        if (local <= 1) return Ring(bytes, nodes, nic_bw_, inter_lat_);
        const double half = (local - 1.0) / local * bytes / intra_bw_ + (local - 1) * intra_lat_;
        return 2.0 * half + Ring(bytes / local, nodes, nic_bw_, inter_lat_);
      }
    }
    return 0.0;
  }

  double intra_bw_;
  double nic_bw_;
  double intra_lat_;
  double inter_lat_;
  double collective_s_;
  double p2p_s_;
};

}  // namespace

std::unique_ptr<NetworkModel> CreateAnalyticNetworkModel(const HardwareSpec& hw) {
  return std::make_unique<AnalyticNetworkModel>(hw);
}

}  // namespace frugal::sim
