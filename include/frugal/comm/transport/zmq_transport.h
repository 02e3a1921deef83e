// ZeroMQ backend of Transport: ranks in different processes or hosts talk
// over TCP (or ipc://, inproc:// for tests).
//
// Setup is two-phase because ports are usually ephemeral:
//   1. ZmqListener::Bind("tcp://10.0.0.5:*") binds this rank's receive
//      socket and reports the resolved endpoint().
//   2. The endpoints of all ranks are exchanged (see rendezvous.h), then
//      ConnectZmqTransport(listener, rank, peers) connects to every peer and
//      starts the I/O thread.
// JoinZmqWorld (rendezvous.h) does both phases plus the rendezvous.
//
// Design (Note [ZeroMQ transport] in src/comm/zmq/zmq_transport.cc): each rank binds one
// ROUTER socket and connects one DEALER per peer. One I/O thread owns all
// sockets; Send() hands messages to it through a queue and an eventfd, so
// Send never blocks on the network. Payloads are sent zero-copy: the
// zmq message holds a reference to the SharedBytes until ZeroMQ is done.
// Each message is two frames: a 40-byte header and the payload (wire format
// in docs/design/comm.md). A message that does not parse (a stranger, a port
// scanner, another protocol) is dropped and logged, never fatal. The receiver acknowledges each data message with a
// header-only ack, which gives the per-link busy time in TransportStats.
// Closing a transport sends a "goodbye" to every peer, so peers see
// Unavailable at once instead of waiting for their timeout. A peer whose
// connection drops without a goodbye is declared gone after
// `peer_lost_grace` when its host refuses connections to it (the process
// died), and after `link_grace` when its host does not answer (a broken
// link, a host down). A connection that comes back resends what the peer
// had not acknowledged, and the receiver drops duplicates (Note [Resend
// after reconnect]), so an exchange in flight during an outage completes.
//
// Thread safety: as for Transport. Nothing is process-wide: each transport
// owns its own ZeroMQ context.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frugal/comm/transport/security.h"
#include "frugal/comm/transport/transport.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"

namespace frugal::comm {

struct ZmqOptions {
  // How long closing a transport may wait for live peers to acknowledge the
  // messages sent to them (then at most 200 ms more for the goodbyes).
  // Closing returns as soon as everything is acknowledged; the wait is only
  // long when a peer is alive but stalled. Default: 5 s.
  std::chrono::milliseconds linger{5000};
  // How often a DEALER retries a connection to a peer that is not up yet
  // (ZMQ_RECONNECT_IVL). Default: 100 ms.
  std::chrono::milliseconds reconnect_interval{100};
  // A peer whose connection dropped and whose host refuses connections to
  // its port (nothing listens: the process died) this long is treated as
  // closed: waits on it fail with Unavailable at once instead of running
  // into their timeout. A refusal is the kernel's answer that nothing
  // listens there, so this only has to outlast a probe or two (250 ms
  // apart); it is most of what a killed peer costs the others.
  std::chrono::milliseconds peer_lost_grace{250};
  // A peer whose connection dropped and whose host does not answer (a link
  // outage between sites, a host down) is waited for this long before it is
  // treated as closed; meanwhile its messages stay queued and are resent
  // when it is back. Waits on it still end at their own timeout.
  // Default: 30 s (frugal train/worker/coordinator/run --link-grace-s).
  std::chrono::milliseconds link_grace{30000};
  // A connection whose sent bytes stay unacknowledged by TCP this long
  // (ZMQ_TCP_MAXRT, TCP_USER_TIMEOUT on Linux) is dropped and reconnected,
  // so that a link that comes back is used at once rather than after TCP's
  // exponential retransmission backoff (Note [Resend after reconnect]). A
  // connection making progress, however slowly, is never dropped.
  // Default: 5 s; 0 leaves it to the kernel (about 15 minutes).
  std::chrono::milliseconds stalled_connection{5000};
  // Who may connect and whether bytes are encrypted (security.h). Default:
  // plain TCP.
  SecurityOptions security;
  // Where the backend reports what it drops or refuses: messages that do
  // not parse, strangers, rejected keys; rate-limited (10 lines, then one
  // summary per 10 s). Default (empty): stderr, "frugal: comm: ...".
  std::function<void(const std::string& line)> log;
  // What the transport's timeouts, graces, lingers and busy time run on;
  // outlives the transport. Default: the real clock.
  const Clock* clock = &Env::Default();
};

// One rank's entry in the world table.
struct PeerInfo {
  int rank = -1;
  std::string endpoint;  // e.g. "tcp://10.0.0.5:41000"; what peers connect to.
  std::string cluster;   // Cluster name; see topology.h.
  // Z85 CURVE public key the rank's listener authenticated with (filled by
  // the rendezvous server from the connection, not from the rank's claim);
  // empty without CURVE. Needed to connect to that rank with kCurve.
  std::string public_key;
};

// Phase 1: a bound receive socket that is not yet a Transport.
class ZmqListener {
 public:
  // Binds `address` ("tcp://127.0.0.1:*" picks a free port). Errors:
  // IOError naming the address (in use, bad interface, malformed).
  static Result<std::unique_ptr<ZmqListener>> Bind(const std::string& address, ZmqOptions options = {});
  ~ZmqListener();
  ZmqListener(const ZmqListener&) = delete;
  ZmqListener& operator=(const ZmqListener&) = delete;

  // The resolved endpoint, e.g. "tcp://127.0.0.1:41873". When bound to a
  // wildcard interface (tcp://0.0.0.0:...) advertise a routable address to
  // peers instead.
  const std::string& endpoint() const;

  struct Impl;  // Internal; handed to the transport.

 private:
  explicit ZmqListener(std::unique_ptr<Impl> impl);
  friend Result<std::unique_ptr<Transport>> ConnectZmqTransport(std::unique_ptr<ZmqListener>, int,
                                                                 const std::vector<PeerInfo>&);
  std::unique_ptr<Impl> impl_;
};

// Phase 2: connects to every peer in `peers` (index = rank; entry `rank` is
// this rank) and starts the I/O thread. Errors: InvalidArgument for a bad
// table (ranks out of order, empty endpoint or cluster, `rank` out of
// range), IOError for an endpoint ZeroMQ cannot parse.
Result<std::unique_ptr<Transport>> ConnectZmqTransport(std::unique_ptr<ZmqListener> listener, int rank,
                                                       const std::vector<PeerInfo>& peers);

// Bytes of framing the ZeroMQ backend adds to every message (not counted in
// TransportStats, which counts payload bytes).
inline constexpr size_t kZmqWireHeaderBytes = 40;

}  // namespace frugal::comm
