// Topology: which cluster each rank belongs to. A cluster is a set of ranks
// joined by a fast network (one host, one rack, one cloud region); clusters
// are joined by slow links. The topology decides the link class of every
// rank pair and who leads each cluster in the hierarchical exchange.
//
// Cluster ids are assigned in order of first appearance by rank: the cluster
// of rank 0 is cluster 0, the next new name is cluster 1, and so on. Every
// rank builds the same Topology from the same rendezvous table, so ids,
// member lists and leaders agree everywhere without further messages.
//
// Thread safety: immutable value type after construction.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::comm {

enum class LinkClass {
  kIntraCluster = 0,  // Both ends in the same cluster (fast network).
  kInterCluster = 1,  // Ends in different clusters (slow link).
};

const char* LinkClassName(LinkClass link);

class Topology {
 public:
  Topology() = default;

  // One cluster name per rank (index = rank). Fails on an empty list or an
  // empty cluster name.
  static Result<Topology> FromClusterNames(std::vector<std::string> cluster_of_rank);

  // Convenience for tests: `world_size` ranks in one cluster named "local".
  static Topology SingleCluster(int world_size);

  int world_size() const { return static_cast<int>(cluster_of_rank_.size()); }
  int num_clusters() const { return static_cast<int>(cluster_names_.size()); }

  // REQUIRES: 0 <= rank < world_size().
  int cluster_id(int rank) const { return cluster_id_of_rank_[rank]; }
  const std::string& cluster_name_of(int rank) const { return cluster_of_rank_[rank]; }

  // REQUIRES: 0 <= cluster < num_clusters().
  const std::string& cluster_name(int cluster) const { return cluster_names_[cluster]; }
  // Ranks of `cluster` in increasing order; never empty.
  const std::vector<int>& members(int cluster) const { return members_[cluster]; }
  // The lowest rank of `cluster`.
  int leader(int cluster) const { return members_[cluster].front(); }

  bool is_leader(int rank) const { return leader(cluster_id(rank)) == rank; }
  LinkClass LinkBetween(int a, int b) const {
    return cluster_id(a) == cluster_id(b) ? LinkClass::kIntraCluster : LinkClass::kInterCluster;
  }

  // "rank 3 (cluster cloud)": how error messages name a peer.
  std::string DescribeRank(int rank) const;

 private:
  std::vector<std::string> cluster_of_rank_;
  std::vector<int> cluster_id_of_rank_;
  std::vector<std::string> cluster_names_;
  std::vector<std::vector<int>> members_;
};

}  // namespace frugal::comm
