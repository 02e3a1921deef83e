// Transport: rank-to-rank messaging, the seam between Frugal's distributed
// engine and the network. Implementations: the in-process hub
// (inproc_transport.h, N ranks as threads, for tests) and ZeroMQ over TCP
// (zmq_transport.h). Collective algorithms (sparse_exchange.h) are written
// once against this interface.
//
// Messages are (src, tag, payload). The payload is an opaque byte buffer; the
// tag lets several exchanges (one per gradient bucket per iteration) be in
// flight at once: Recv(src, tag) returns the oldest message from `src` with
// exactly that tag, and messages for a (src, tag) nobody asked for yet wait in
// a queue. Messages between one ordered pair of ranks with the same tag
// arrive in the order they were sent.
//
// Failure semantics: every Recv has a timeout. A silent peer gives
// Status::Timeout, a peer that closed its transport gives
// Status::Unavailable; both name the peer ("rank 3 (cluster b)"). An error
// inside a backend's I/O thread is sticky: it is returned by every later
// Send and Recv.
//
// Time: a backend's timeouts, deadlines and busy time run on the Clock it is
// given (ZmqOptions::clock, InProcHub's constructor; default the real one).
//
// Thread safety: Send, Recv and stats() may be called concurrently from any
// number of threads. Destroying the transport while another thread is inside
// Send or Recv is not allowed.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/comm/transport/topology.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"
#include "frugal/common/status.h"

namespace frugal::comm {

using Bytes = std::vector<uint8_t>;
// An immutable payload shared with the transport until it is on the wire.
using SharedBytes = std::shared_ptr<const Bytes>;
using Tag = uint64_t;

struct Message {
  int src = -1;
  Tag tag = 0;
  Bytes payload;
};

// Payload bytes and message counts on one link (a peer, or a link class).
// Only payload bytes are counted: each message additionally carries a fixed
// wire header (see docs/design/comm.md), so wire bytes = bytes + messages * header.
struct LinkCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  // Seconds during which at least one message sent on this link was in
  // flight: queued, on the wire, or not yet acknowledged by the receiver's
  // transport, credited at each acknowledgement (Note [Busy time] in
  // transport.cc). Over an interval,
  // delta bytes_sent / delta send_busy_s estimates the link's throughput
  // while it is in use. Measured by the ZeroMQ backend; always 0 in-process.
  double send_busy_s = 0;
  // Payload bytes of sent messages the receiver has acknowledged. Over an
  // interval, delta bytes_acked / delta send_busy_s counts the bytes and the
  // time of the same transfers even when a backlog from before the interval
  // drains through it (bytes_sent would count them in the interval they were
  // queued). Always 0 in-process.
  uint64_t bytes_acked = 0;
  // Messages sent and not yet acknowledged, at the time of the snapshot.
  uint64_t messages_in_flight = 0;

  LinkCounters& operator+=(const LinkCounters& o);
  // Counters accumulated since `earlier` (a previous snapshot);
  // messages_in_flight is the current value.
  LinkCounters Since(const LinkCounters& earlier) const;
};

struct TransportStats {
  std::vector<LinkCounters> per_peer;  // Index = peer rank; own entry stays 0.
  LinkCounters intra_cluster;
  LinkCounters inter_cluster;

  const LinkCounters& link(LinkClass c) const {
    return c == LinkClass::kIntraCluster ? intra_cluster : inter_cluster;
  }
  // Traffic since `earlier` (a previous snapshot of the same transport),
  // e.g. the bytes of one training step.
  TransportStats Since(const TransportStats& earlier) const;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return topology_.world_size(); }
  const Topology& topology() const { return topology_; }
  const std::string& cluster() const { return topology_.cluster_name_of(rank_); }

  // Queues `payload` for `dst` and returns without waiting for delivery. The
  // transport keeps a reference to `payload` until it is on the wire (the
  // ZeroMQ backend sends it without copying). A send to self is delivered
  // locally and not counted in stats.
  // Errors: InvalidArgument if `dst` is outside the world; Unavailable if
  // `dst` is known to have closed; the sticky error.
  virtual Status Send(int dst, Tag tag, SharedBytes payload) = 0;
  Status Send(int dst, Tag tag, Bytes payload) {
    return Send(dst, tag, std::make_shared<const Bytes>(std::move(payload)));
  }

  // Waits up to `timeout` for the next message from `src` with `tag`.
  // Errors: Timeout (nothing arrived), Unavailable (`src` closed and nothing
  // for this tag is queued), InvalidArgument (bad rank), the sticky error.
  virtual Result<Message> Recv(int src, Tag tag, std::chrono::milliseconds timeout) = 0;

  // Makes `why` this transport's sticky error: every Recv waiting now and
  // every later Send and Recv return it at once. For a caller that has
  // learnt from elsewhere that the world is gone (the coordinator declared a
  // peer dead, a new membership generation) and must stop waiting on it.
  virtual void Abort(Status why) = 0;

  // A snapshot of the byte counters, counted on both ends: the sender counts
  // bytes_sent to the receiver, the receiver bytes_received from the sender.
  TransportStats stats() const;

  // The clock this transport's timeouts and busy time run on; what times
  // work done over it should use too.
  const Clock& clock() const { return clock_; }

 protected:
  // REQUIRES: `clock` outlives the transport.
  Transport(int rank, Topology topology, const Clock& clock = Env::Default());

  // For implementations: count one message of `bytes` payload bytes.
  void CountSent(int dst, size_t bytes);
  void CountReceived(int src, size_t bytes);
  // For backends that learn when a message has arrived (acknowledgements):
  // a message of `bytes` payload bytes to `dst` is in flight from
  // TransferStarted until TransferAcknowledged, which acknowledges `dst`'s
  // oldest message (acks arrive in send order); TransfersAbandoned ends all
  // of `dst`'s without counting them as acknowledged (it left).
  void TransferStarted(int dst, size_t bytes);
  void TransferAcknowledged(int dst);
  void TransfersAbandoned(int dst);
  uint64_t MessagesInFlight(int dst) const;
  // InvalidArgument naming the bad rank, or Ok.
  Status CheckPeer(int peer, const char* what) const;

 private:
  const int rank_;
  const Topology topology_;
  const Clock& clock_;
  // Busy-time bookkeeping of one LinkCounters slot.
  struct BusyClock {
    uint64_t in_flight = 0;
    Clock::time_point since;                      // Busy time before this is credited (Note [Busy time]).
    std::deque<size_t> sizes;                     // Per-peer slots: in-flight payload sizes, oldest first.
  };
  void EndTransfers(int dst, uint64_t count, bool acknowledged);

  mutable std::mutex stats_mu_;
  TransportStats stats_;          // GUARDED_BY(stats_mu_)
  // GUARDED_BY(stats_mu_). Slots: per peer (index = rank), then
  // intra-cluster, then inter-cluster.
  std::vector<BusyClock> busy_;
};

}  // namespace frugal::comm
