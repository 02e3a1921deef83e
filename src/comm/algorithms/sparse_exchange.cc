#include "frugal/comm/algorithms/sparse_exchange.h"

#include <cassert>

#include "frugal/comm/algorithms/collectives.h"

namespace frugal::comm {

// Note [Exchange determinism]
// Replicas must apply the identical update, so every rank must end with the
// same bytes. Two rules guarantee it for any pure CombineFn:
//  1. Combine inputs are ordered by rank (inside a cluster) or by cluster id
//     (across clusters), never by arrival order.
//  2. In the hierarchical exchange only leaders combine across clusters, and
//     all leaders feed the same per-cluster messages in the same order into
//     the final combine; members receive the leader's bytes verbatim.
// The flat and hierarchical algorithms may give different bytes for the same
// inputs (combine(a,b,c,d) vs combine(combine(a,b), combine(c,d))), but all
// ranks of one run use the same algorithm.

SparseExchange::SparseExchange(Transport* transport, CombineFn combine, MessageExchangeOptions options)
    : transport_(transport), combine_(std::move(combine)), options_(options) {
  assert(transport_ != nullptr);
  assert(combine_);
  algorithm_ = options_.algorithm;
  if (algorithm_ == MessageAlgorithm::kAuto) {
    algorithm_ = transport_->topology().num_clusters() > 1 ? MessageAlgorithm::kHierarchical
                                                           : MessageAlgorithm::kFlat;
  }
}

std::optional<MessageAlgorithm> MessageAlgorithmOf(ExchangeAlgorithm a) {
  switch (a) {
    case ExchangeAlgorithm::kAuto: return MessageAlgorithm::kAuto;
    case ExchangeAlgorithm::kFlat: return MessageAlgorithm::kFlat;
    case ExchangeAlgorithm::kHierarchical: return MessageAlgorithm::kHierarchical;
    case ExchangeAlgorithm::kSharded: return std::nullopt;
  }
  return std::nullopt;
}

Result<Bytes> SparseExchange::Run(Tag tag, Bytes contribution) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<Bytes> parts, RunUncombined(tag, std::move(contribution)));
  Result<Bytes> result = Combine(std::move(parts));  // one part (hierarchical) passes through
  if (!result.ok()) return InContext(tag, result.status());
  return result;
}

Result<std::vector<Bytes>> SparseExchange::RunUncombined(Tag tag, Bytes contribution, const ClusterFn& cluster) {
  if (algorithm_ == MessageAlgorithm::kFlat) {
    // AllGather sends one shared buffer to all N-1 peers (zero-copy on the
    // ZeroMQ backend) and returns the parts in rank order.
    Result<std::vector<Bytes>> parts = AllGather(*transport_, tag, std::move(contribution), options_.timeout);
    if (!parts.ok()) return InContext(tag, parts.status().WithContext("allgather"));
    return parts;
  }
  Result<Bytes> result = RunHierarchical(tag, std::move(contribution), cluster);
  if (!result.ok()) return InContext(tag, result.status());
  std::vector<Bytes> out;
  out.push_back(std::move(result).value());
  return out;
}

// Note [Sharded exchange] in src/collective/compressed_collective.cc has why
// and what it costs. Every owner's message is computed from the same parts in
// rank order and every rank receives the owner's bytes, so the results are
// byte-identical on every rank for a pure ShardFn.
Result<std::vector<Bytes>> SparseExchange::RunSharded(Tag scatter_tag, Tag gather_tag, std::vector<Bytes> shards,
                                                      const std::vector<bool>& active, const ShardFn& owner) {
  const int world = transport_->world_size();
  const int me = transport_->rank();
  assert(shards.size() == static_cast<size_t>(world) && active.size() == shards.size() && owner);
  std::vector<Bytes> to_mine(static_cast<size_t>(world));
  for (int j = 0; j < world; ++j) {
    if (!active[static_cast<size_t>(j)]) continue;
    if (j == me) {
      to_mine[static_cast<size_t>(me)] = std::move(shards[static_cast<size_t>(j)]);
    } else if (Status s = transport_->Send(j, scatter_tag, std::move(shards[static_cast<size_t>(j)])); !s.ok()) {
      return InContext(scatter_tag, s);
    }
  }
  auto mine = std::make_shared<Bytes>();
  if (active[static_cast<size_t>(me)]) {
    for (int k = 0; k < world; ++k) {
      if (k == me) continue;
      Result<Bytes> part = RecvFrom(k, scatter_tag, "gathering my shard");
      if (!part.ok()) return InContext(scatter_tag, part.status());
      to_mine[static_cast<size_t>(k)] = std::move(part).value();
    }
    Result<Bytes> combined = owner(std::move(to_mine));
    if (!combined.ok()) return InContext(scatter_tag, combined.status());
    *mine = std::move(combined).value();
    for (int k = 0; k < world; ++k) {
      if (k == me) continue;
      if (Status s = transport_->Send(k, gather_tag, SharedBytes(mine)); !s.ok()) return InContext(gather_tag, s);
    }
  }
  std::vector<Bytes> out(static_cast<size_t>(world));
  for (int k = 0; k < world; ++k) {
    if (!active[static_cast<size_t>(k)]) continue;
    if (k == me) {
      out[static_cast<size_t>(k)] = *mine;
      continue;
    }
    Result<Bytes> mean = RecvFrom(k, gather_tag, "gathering the shards' owners' messages");
    if (!mean.ok()) return InContext(gather_tag, mean.status());
    out[static_cast<size_t>(k)] = std::move(mean).value();
  }
  return out;
}

Status SparseExchange::InContext(Tag tag, const Status& status) const {
  return status.WithContext("exchange tag " + std::to_string(tag) + " on " +
                            transport_->topology().DescribeRank(transport_->rank()));
}

Result<Bytes> SparseExchange::Combine(std::vector<Bytes> parts) {
  if (parts.size() == 1) return std::move(parts.front());
  return combine_(std::move(parts));
}

Result<Bytes> SparseExchange::RecvFrom(int src, Tag tag, const char* phase) {
  Result<Message> msg = transport_->Recv(src, tag, options_.timeout);
  if (!msg.ok()) return msg.status().WithContext(phase);
  return std::move(msg->payload);
}

Result<Bytes> SparseExchange::RunHierarchical(Tag tag, Bytes contribution, const ClusterFn& cluster_fn) {
  const Topology& topo = transport_->topology();
  const int me = transport_->rank();
  const int cluster = topo.cluster_id(me);
  const int leader = topo.leader(cluster);

  if (me != leader) {
    FRUGAL_RETURN_IF_ERROR(transport_->Send(leader, tag, std::move(contribution)));
    return RecvFrom(leader, tag, "waiting for the cluster leader's result");
  }

  // 1. Reduce inside the cluster, in rank order.
  const std::vector<int>& members = topo.members(cluster);
  std::vector<Bytes> local;
  local.reserve(members.size());
  for (int member : members) {
    if (member == me) {
      local.push_back(std::move(contribution));
    } else {
      FRUGAL_ASSIGN_OR_RETURN(Bytes part, RecvFrom(member, tag, "gathering the cluster"));
      local.push_back(std::move(part));
    }
  }
  // A cluster of one sends its contribution as it is.
  FRUGAL_ASSIGN_OR_RETURN(Bytes cluster_combined, local.size() > 1 && cluster_fn ? cluster_fn(std::move(local))
                                                                                 : Combine(std::move(local)));

  // 2. Exactly one message per ordered pair of clusters crosses a slow link.
  auto shared_cluster = std::make_shared<const Bytes>(std::move(cluster_combined));
  for (int other = 0; other < topo.num_clusters(); ++other) {
    if (other != cluster) FRUGAL_RETURN_IF_ERROR(transport_->Send(topo.leader(other), tag, shared_cluster));
  }
  std::vector<Bytes> per_cluster(topo.num_clusters());
  for (int other = 0; other < topo.num_clusters(); ++other) {
    if (other == cluster) {
      per_cluster[other] = *shared_cluster;
    } else {
      FRUGAL_ASSIGN_OR_RETURN(per_cluster[other],
                              RecvFrom(topo.leader(other), tag, "exchanging between cluster leaders"));
    }
  }
  FRUGAL_ASSIGN_OR_RETURN(Bytes final_bytes, Combine(std::move(per_cluster)));

  // 3. Broadcast inside the cluster.
  auto shared_final = std::make_shared<const Bytes>(std::move(final_bytes));
  for (int member : members) {
    if (member != me) FRUGAL_RETURN_IF_ERROR(transport_->Send(member, tag, shared_final));
  }
  return *shared_final;
}

}  // namespace frugal::comm
