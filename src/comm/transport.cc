#include "frugal/comm/transport.h"

namespace frugal::comm {

LinkCounters& LinkCounters::operator+=(const LinkCounters& o) {
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  messages_sent += o.messages_sent;
  messages_received += o.messages_received;
  return *this;
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
