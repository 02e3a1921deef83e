#include "frugal/comm/transport/topology.h"

#include <map>

namespace frugal::comm {

const char* LinkClassName(LinkClass link) {
  return link == LinkClass::kIntraCluster ? "intra_cluster" : "inter_cluster";
}

Result<Topology> Topology::FromClusterNames(std::vector<std::string> cluster_of_rank) {
  if (cluster_of_rank.empty()) return Status::InvalidArgument("topology: world size must be at least 1");
  Topology t;
  std::map<std::string, int> id_of_name;
  for (size_t rank = 0; rank < cluster_of_rank.size(); ++rank) {
    const std::string& name = cluster_of_rank[rank];
    if (name.empty()) {
      return Status::InvalidArgument("topology: rank " + std::to_string(rank) + " has an empty cluster name");
    }
    auto [it, inserted] = id_of_name.emplace(name, static_cast<int>(t.cluster_names_.size()));
    if (inserted) {
      t.cluster_names_.push_back(name);
      t.members_.emplace_back();
    }
    t.cluster_id_of_rank_.push_back(it->second);
    t.members_[it->second].push_back(static_cast<int>(rank));
  }
  t.cluster_of_rank_ = std::move(cluster_of_rank);
  return t;
}

Topology Topology::SingleCluster(int world_size) {
  return FromClusterNames(std::vector<std::string>(world_size < 1 ? 1 : world_size, "local")).value();
}

std::string Topology::DescribeRank(int rank) const {
  if (rank < 0 || rank >= world_size()) return "rank " + std::to_string(rank) + " (not in the world)";
  return "rank " + std::to_string(rank) + " (cluster " + cluster_of_rank_[rank] + ")";
}

}  // namespace frugal::comm
