#include "frugal/comm/transport/transport.h"

#include <algorithm>

namespace frugal::comm {

LinkCounters& LinkCounters::operator+=(const LinkCounters& o) {
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  messages_sent += o.messages_sent;
  messages_received += o.messages_received;
  send_busy_s += o.send_busy_s;
  bytes_acked += o.bytes_acked;
  messages_in_flight += o.messages_in_flight;
  return *this;
}

LinkCounters LinkCounters::Since(const LinkCounters& earlier) const {
  LinkCounters d;
  d.bytes_sent = bytes_sent - earlier.bytes_sent;
  d.bytes_received = bytes_received - earlier.bytes_received;
  d.messages_sent = messages_sent - earlier.messages_sent;
  d.messages_received = messages_received - earlier.messages_received;
  d.send_busy_s = send_busy_s - earlier.send_busy_s;
  d.bytes_acked = bytes_acked - earlier.bytes_acked;
  d.messages_in_flight = messages_in_flight;
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

// Note [Busy time]
// To estimate a link's throughput the controller needs bytes per second
// *while the link is in use*, not per wall-clock second (the link idles while
// the GPU computes). A message is in flight from Send until the receiver's
// transport acknowledges it (the ZeroMQ backend's I/O thread answers every
// data message with a header-only ack as soon as it has read it, whether or
// not the application has called Recv). Each LinkCounters slot (peer, link
// class) runs a clock while its in-flight count is non-zero; a class's
// count is the sum over its peers, so its busy time is the union of their
// busy periods. Busy time is credited at acks: each ack adds the busy time
// since the previous ack (or since the busy period began) together with the
// acknowledged message's bytes (bytes_acked), so over any interval between
// two snapshots the bytes and the time belong to the same transfers. (Time
// credited at the end of a busy period instead read a link as nearly idle
// in a window that a long transfer spanned into, and as infinitely fast in
// the next one.) Each busy period includes one round trip for the ack, so
// the estimate is low for tiny messages and accurate for gradient-sized ones.

Transport::Transport(int rank, Topology topology, const Clock& clock)
    : rank_(rank), topology_(std::move(topology)), clock_(clock) {
  stats_.per_peer.resize(topology_.world_size());
  busy_.resize(topology_.world_size() + 2);
}

TransportStats Transport::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  TransportStats snapshot = stats_;
  const size_t n = snapshot.per_peer.size();
  for (size_t slot = 0; slot < busy_.size(); ++slot) {
    LinkCounters& c = slot < n ? snapshot.per_peer[slot]
                               : (slot == n ? snapshot.intra_cluster : snapshot.inter_cluster);
    c.messages_in_flight = busy_[slot].in_flight;
  }
  return snapshot;
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

void Transport::TransferStarted(int dst, size_t bytes) {
  if (dst == rank_) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  busy_[dst].sizes.push_back(bytes);
  const size_t n = stats_.per_peer.size();
  const size_t class_slot = n + (topology_.LinkBetween(rank_, dst) == LinkClass::kIntraCluster ? 0 : 1);
  const auto now = clock_.Now();
  for (size_t slot : {static_cast<size_t>(dst), class_slot}) {
    if (busy_[slot].in_flight++ == 0) busy_[slot].since = now;
  }
}

void Transport::TransferAcknowledged(int dst) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EndTransfers(dst, 1, /*acknowledged=*/true);
}

void Transport::TransfersAbandoned(int dst) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EndTransfers(dst, busy_[dst].in_flight, /*acknowledged=*/false);
}

uint64_t Transport::MessagesInFlight(int dst) const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return dst >= 0 && dst < static_cast<int>(stats_.per_peer.size()) ? busy_[dst].in_flight : 0;
}

// REQUIRES: stats_mu_ held.
void Transport::EndTransfers(int dst, uint64_t count, bool acknowledged) {
  if (dst == rank_ || dst < 0 || dst >= static_cast<int>(stats_.per_peer.size())) return;
  count = std::min(count, busy_[dst].in_flight);  // A stray ack must not underflow.
  if (count == 0) return;
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < count && !busy_[dst].sizes.empty(); ++i) {
    bytes += busy_[dst].sizes.front();
    busy_[dst].sizes.pop_front();
  }
  const size_t n = stats_.per_peer.size();
  const bool intra = topology_.LinkBetween(rank_, dst) == LinkClass::kIntraCluster;
  const size_t class_slot = n + (intra ? 0 : 1);
  const auto now = clock_.Now();
  LinkCounters* counters[] = {&stats_.per_peer[dst], intra ? &stats_.intra_cluster : &stats_.inter_cluster};
  size_t slots[] = {static_cast<size_t>(dst), class_slot};
  for (int i = 0; i < 2; ++i) {
    BusyClock& clock = busy_[slots[i]];
    clock.in_flight -= count;
    if (acknowledged) {
      // Credit the busy time up to this ack together with its bytes.
      counters[i]->bytes_acked += bytes;
      counters[i]->send_busy_s += std::chrono::duration<double>(now - clock.since).count();
    }
    clock.since = now;
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
