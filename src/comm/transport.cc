#include "frugal/comm/transport.h"

namespace frugal::comm {

LinkCounters& LinkCounters::operator+=(const LinkCounters& o) {
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  messages_sent += o.messages_sent;
  messages_received += o.messages_received;
  return *this;
}

LinkCounters LinkCounters::Since(const LinkCounters& earlier) const {
  LinkCounters d;
  d.bytes_sent = bytes_sent - earlier.bytes_sent;
  d.bytes_received = bytes_received - earlier.bytes_received;
  d.messages_sent = messages_sent - earlier.messages_sent;
  d.messages_received = messages_received - earlier.messages_received;
  return d;
}

TransportStats TransportStats::Since(const TransportStats& earlier) const {
  TransportStats d;
  d.per_peer.resize(per_peer.size());
  for (size_t i = 0; i < per_peer.size(); ++i) {
    d.per_peer[i] = i < earlier.per_peer.size() ? per_peer[i].Since(earlier.per_peer[i]) : per_peer[i];
  }
  d.intra_cluster = intra_cluster.Since(earlier.intra_cluster);
  d.inter_cluster = inter_cluster.Since(earlier.inter_cluster);
  return d;
}

Transport::Transport(int rank, Topology topology) : rank_(rank), topology_(std::move(topology)) {
  stats_.per_peer.resize(topology_.world_size());
}

TransportStats Transport::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Transport::CountSent(int dst, size_t bytes) {
  if (dst == rank_) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  LinkCounters& link = topology_.LinkBetween(rank_, dst) == LinkClass::kIntraCluster ? stats_.intra_cluster
                                                                                      : stats_.inter_cluster;
  for (LinkCounters* c : {&stats_.per_peer[dst], &link}) {
    c->bytes_sent += bytes;
    c->messages_sent += 1;
  }
}

void Transport::CountReceived(int src, size_t bytes) {
  if (src == rank_) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  LinkCounters& link = topology_.LinkBetween(rank_, src) == LinkClass::kIntraCluster ? stats_.intra_cluster
                                                                                      : stats_.inter_cluster;
  for (LinkCounters* c : {&stats_.per_peer[src], &link}) {
    c->bytes_received += bytes;
    c->messages_received += 1;
  }
}

Status Transport::CheckPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= world_size()) {
    return Status::InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                                   " is outside the world of " + std::to_string(world_size()) + " ranks");
  }
  return Status::Ok();
}

}  // namespace frugal::comm
