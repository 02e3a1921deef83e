#include "frugal/comm/zmq_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "mailbox.h"
#include "rate_limited_log.h"
#include "tsan_handoff.h"
#include "wire_header.h"
#include "zap_handler.h"
#include "zmq_socket_setup.h"

namespace frugal::comm {

// Note [ZeroMQ transport]
// Sockets: each rank binds one ROUTER (receives from everybody; the ROUTER
// prepends the connection's routing id, which we ignore because the header
// names the sender) and connects one DEALER per peer (sends). One DEALER per
// peer keeps per-pair FIFO order and lets a slow peer's queue grow without
// holding up the others.
//
// Threads: ZeroMQ sockets are not thread-safe, so the I/O thread owns all of
// them after construction. Send() appends to `outgoing_` under `mu_` and
// bumps an eventfd; the I/O thread zmq_polls the ROUTER and the eventfd,
// writes queued messages to the DEALERs and delivers incoming ones to the
// Mailbox, where Recv() waits. High-water marks are off, so the I/O thread
// never blocks on a slow peer.
//
// Zero-copy: the payload frame points into the caller's SharedBytes; the
// zmq message's free callback drops a heap-held reference, so the buffer
// lives until ZeroMQ has written it to the socket.
//
// Untrusted input (Note [Strangers]): the ROUTER accepts connections from
// anyone who can reach the port. A message that does not parse is dropped
// and logged with the connection's address; it never fails the transport.
//
// Shutdown (Note [Closing]): the I/O thread flushes queued sends, waits (up
// to `linger`) until live peers have acknowledged them, sends a goodbye to
// every peer still open, and closes its sockets. Destroying the context then
// waits at most 200 ms for ZeroMQ to put the goodbyes on the wire. Sockets
// to peers known to be gone get linger 0.

struct ZmqListener::Impl {
  ZmqOptions options;
  zmq::context_t context{1};
  std::unique_ptr<ZapHandler> zap;  // kCurve only. After context: stopped before it.
  zmq::socket_t router;             // Declared after context: closed before it.
  std::string endpoint;
};

ZmqListener::ZmqListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqListener::~ZmqListener() = default;
const std::string& ZmqListener::endpoint() const { return impl_->endpoint; }

Result<std::unique_ptr<ZmqListener>> ZmqListener::Bind(const std::string& address, ZmqOptions options) {
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.security));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  FRUGAL_RETURN_IF_ERROR(BindListener(
      impl->context, address, options, "cannot listen on " + address,
      [](zmq::socket_t& router) { router.set(zmq::sockopt::linger, 0); }, &impl->zap, &impl->router, &impl->endpoint));
  return std::unique_ptr<ZmqListener>(new ZmqListener(std::move(impl)));
}

namespace {

// Runs on ZeroMQ's I/O thread once the frame is sent (Note [ThreadSanitizer and libzmq]).
void ReleasePayload(void* /*data*/, void* hint) {
  TsanAcquire(hint);
  delete static_cast<SharedBytes*>(hint);
}

class ZmqTransport final : public Transport {
 public:
  ZmqTransport(int rank, Topology topology, std::unique_ptr<ZmqListener::Impl> listener,
               std::vector<zmq::socket_t> dealers, std::vector<zmq::socket_t> monitors, int wake_fd)
      : Transport(rank, topology),
        listener_(std::move(listener)),
        dealers_(std::move(dealers)),
        monitors_(std::move(monitors)),
        lost_since_(dealers_.size()),
        wake_fd_(wake_fd),
        drops_(listener_->options.log),
        mailbox_(rank, std::move(topology)) {
    io_thread_ = std::thread([this] { IoLoop(); });
  }

  ~ZmqTransport() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    Wake();
    io_thread_.join();
    ::close(wake_fd_);
    // listener_ (the context) is destroyed last and waits for the linger.
  }

  Status Send(int dst, Tag tag, SharedBytes payload) override {
    FRUGAL_RETURN_IF_ERROR(CheckPeer(dst, "Send"));
    FRUGAL_RETURN_IF_ERROR(mailbox_.error());
    if (!payload) payload = std::make_shared<const Bytes>();
    if (dst == rank()) {
      mailbox_.Deliver(rank(), tag, *payload);
      return Status::Ok();
    }
    if (std::string why = mailbox_.ClosedReason(dst); !why.empty()) {
      return Status::Unavailable("cannot send tag " + std::to_string(tag) + " to " +
                                 topology().DescribeRank(dst) + ": it " + why);
    }
    // Start the busy clock before the I/O thread can see the message, or its
    // ack could arrive first.
    CountSent(dst, payload->size());
    TransferStarted(dst, payload->size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      outgoing_.push_back(Outgoing{dst, tag, std::move(payload)});
    }
    Wake();
    return Status::Ok();
  }

  Result<Message> Recv(int src, Tag tag, std::chrono::milliseconds timeout) override {
    FRUGAL_RETURN_IF_ERROR(CheckPeer(src, "Recv"));
    FRUGAL_ASSIGN_OR_RETURN(Bytes payload, mailbox_.Take(src, tag, timeout));
    CountReceived(src, payload.size());
    return Message{src, tag, std::move(payload)};
  }

  void Abort(Status why) override { mailbox_.Fail(std::move(why)); }

 private:
  struct Outgoing {
    int dst;
    Tag tag;
    SharedBytes payload;
  };

  void Wake() {
    uint64_t one = 1;
    // The eventfd counter cannot overflow in practice; EAGAIN would mean a
    // wake-up is already pending, which is all we need.
    ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    (void)n;
  }

  void IoLoop() {
    zmq::socket_t& router = listener_->router;
    try {
      std::vector<zmq::pollitem_t> items{{router.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
      std::vector<int> monitor_peer;  // items[2 + i] watches peer monitor_peer[i].
      for (size_t peer = 0; peer < monitors_.size(); ++peer) {
        if (monitors_[peer].handle() == nullptr) continue;
        items.push_back({monitors_[peer].handle(), 0, ZMQ_POLLIN, 0});
        monitor_peer.push_back(static_cast<int>(peer));
      }
      // Set once the destructor asked us to stop: see Note [Closing].
      std::optional<std::chrono::steady_clock::time_point> drain_deadline;
      while (true) {
        for (auto& item : items) item.revents = 0;
        std::chrono::milliseconds wait = NextLostDeadline();
        if (drain_deadline) {
          auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*drain_deadline -
                                                                            std::chrono::steady_clock::now()) +
                      std::chrono::milliseconds(1);
          if (left.count() < 0) left = std::chrono::milliseconds(0);
          if (wait.count() < 0 || left < wait) wait = left;
        }
        PollRetrying(items.data(), items.size(), wait);
        if (items[1].revents & ZMQ_POLLIN) {
          uint64_t count;
          ssize_t n = ::read(wake_fd_, &count, sizeof(count));
          (void)n;
        }
        if (items[0].revents & ZMQ_POLLIN) ReadIncoming();
        for (size_t i = 0; i < monitor_peer.size(); ++i) {
          if (items[2 + i].revents & ZMQ_POLLIN) ReadMonitor(monitor_peer[i]);
        }
        DeclareLostPeers();
        if (FlushOutgoing()) {
          const auto now = std::chrono::steady_clock::now();
          if (!drain_deadline) drain_deadline = now + listener_->options.linger;
          if (!AwaitingAcks() || now >= *drain_deadline) break;
        }
      }
      ReadIncoming();
      SayGoodbye();
    } catch (const zmq::error_t& e) {
      mailbox_.Fail(ZmqError("transport I/O thread of " + topology().DescribeRank(rank()), e));
    }
    for (zmq::socket_t& d : dealers_) {
      if (d.handle() != nullptr) d.close();
    }
    for (zmq::socket_t& m : monitors_) {
      if (m.handle() != nullptr) m.close();
    }
    router.close();
  }

  // Note [Closing]
  // A rank often closes right after its last Send (the leader broadcasts
  // the final result and returns). Those bytes must still reach the peers,
  // so closing waits, up to `linger`, until every peer that is still there
  // has acknowledged every data message (the acks of Note [Busy time] are
  // sent on arrival, so this does not depend on the peer calling Recv).
  // Only then do the goodbyes go out. Peers that left or were declared lost
  // are not waited for.
  bool AwaitingAcks() const {
    for (int peer = 0; peer < world_size(); ++peer) {
      if (peer != rank() && MessagesInFlight(peer) > 0 && !mailbox_.IsClosed(peer)) return true;
    }
    return false;
  }

  // Note [Lost peers]
  // A peer that exits without a goodbye (crash, SIGKILL, host down with a
  // RST) drops the TCP connection our DEALER holds to it; the socket monitor
  // reports ZMQ_EVENT_DISCONNECTED. ZeroMQ keeps reconnecting, so a peer that
  // restarted its listener, or a connection reset by a flaky middlebox, comes
  // back with ZMQ_EVENT_CONNECTED. If it does not come back within
  // `peer_lost_grace`, the peer is marked closed and every wait on it fails
  // with Unavailable at once instead of running into its timeout. A peer that
  // is alive but silent (network stall, no RST) is still only caught by the
  // receive timeouts.
  void ReadMonitor(int peer) {
    zmq::socket_t& mon = monitors_[peer];
    while (true) {
      std::vector<zmq::message_t> parts;
      try {
        if (!zmq::recv_multipart(mon, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) return;  // Note [Signals].
        throw;
      }
      if (parts.empty() || parts[0].size() < sizeof(uint16_t)) continue;
      uint16_t event;
      std::memcpy(&event, parts[0].data(), sizeof(event));
      if (event == ZMQ_EVENT_DISCONNECTED) {
        if (!lost_since_[peer]) lost_since_[peer] = std::chrono::steady_clock::now();
      } else if (event == ZMQ_EVENT_CONNECTED) {
        lost_since_[peer].reset();
      }
    }
  }

  void DeclareLostPeers() {
    const auto now = std::chrono::steady_clock::now();
    for (size_t peer = 0; peer < lost_since_.size(); ++peer) {
      if (!lost_since_[peer] || now - *lost_since_[peer] < listener_->options.peer_lost_grace) continue;
      lost_since_[peer].reset();
      TransfersAbandoned(static_cast<int>(peer));
      mailbox_.MarkClosed(static_cast<int>(peer),
                          "lost its connection and did not reconnect within " +
                              std::to_string(listener_->options.peer_lost_grace.count()) +
                              " ms (process died or host unreachable)");
    }
  }

  // How long poll may sleep before a lost peer's grace period ends.
  std::chrono::milliseconds NextLostDeadline() const {
    std::chrono::milliseconds wait(-1);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& since : lost_since_) {
      if (!since) continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *since + listener_->options.peer_lost_grace - now);
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      if (wait.count() < 0 || left < wait) wait = left + std::chrono::milliseconds(1);
    }
    return wait;
  }

  // Writes everything queued; returns whether the transport is stopping.
  bool FlushOutgoing() {
    std::deque<Outgoing> batch;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch.swap(outgoing_);
      stopping = stopping_;
    }
    for (Outgoing& out : batch) {
      if (mailbox_.IsClosed(out.dst)) {
        // Queued before Send() learned that the peer left; nobody will ack.
        TransfersAbandoned(out.dst);
        continue;
      }
      WireHeader h;
      h.kind = WireKind::kData;
      h.src = static_cast<uint32_t>(rank());
      h.world_size = static_cast<uint32_t>(world_size());
      h.tag = out.tag;
      h.length = out.payload->size();
      SendFrames(out.dst, h, std::move(out.payload));
    }
    return stopping;
  }

  void SendFrames(int dst, const WireHeader& h, SharedBytes payload) {
    auto header = h.Encode();
    zmq::socket_t& dealer = dealers_[dst];
    zmq::message_t header_frame(header.data(), header.size());
    SendRetrying(dealer, header_frame, zmq::send_flags::sndmore);
    zmq::message_t body;
    if (payload && !payload->empty()) {
      auto* hold = new SharedBytes(std::move(payload));
      body = zmq::message_t(const_cast<uint8_t*>((*hold)->data()), (*hold)->size(), &ReleasePayload, hold);
      TsanRelease(hold);  // after this thread's last use of the payload
    }
    SendRetrying(dealer, body, zmq::send_flags::none);
  }

  void ReadIncoming() {
    zmq::socket_t& router = listener_->router;
    while (true) {
      std::vector<zmq::message_t> parts;
      try {
        if (!zmq::recv_multipart(router, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) return;  // Note [Signals]: the next poll wakes us again.
        throw;
      }
      Status st = HandleIncoming(parts);
      if (!st.ok()) {
        drops_.Report(topology().DescribeRank(rank()) + " dropped a message from " +
                      (parts.empty() ? std::string("unknown address") : PeerAddressOf(parts.back())) + ": " +
                      st.message());
      }
    }
  }

  // Note [Strangers]
  // Anyone who can reach the listening port can connect and send: a port
  // scanner, a health check speaking HTTP, a worker of another job. libzmq
  // even accepts unversioned (ZMTP 1.0) peers, so random bytes arrive as
  // messages with any number of frames. Such a message names no peer we can
  // blame, and failing the transport would let one packet stop a run; so
  // HandleIncoming only checks and reports, and the caller drops what does
  // not parse. On plain TCP a stranger who forges a well-formed header can
  // still inject data; CURVE (security.h) closes that door.

  // Delivers a well-formed message; returns why a message is malformed
  // without acting on it (Note [Strangers]).
  Status HandleIncoming(std::vector<zmq::message_t>& parts) {
    // [routing id][header][payload]
    const uint8_t* header = parts.size() > 1 ? parts[1].data<uint8_t>() : nullptr;
    const size_t header_size = parts.size() > 1 ? parts[1].size() : 0;
    FRUGAL_ASSIGN_OR_RETURN(WireHeader h, DecodeMessage(parts.size(), header, header_size,
                                                        parts.size() > 2 ? parts[2].size() : 0, rank(), world_size()));
    const int src = static_cast<int>(h.src);
    switch (h.kind) {
      case WireKind::kGoodbye:
        mailbox_.MarkClosed(src, "closed its transport");
        TransfersAbandoned(src);
        return Status::Ok();
      case WireKind::kAck:
        TransferAcknowledged(src);
        return Status::Ok();
      case WireKind::kData:
        break;
    }
    const uint8_t* data = parts[2].data<uint8_t>();
    mailbox_.Deliver(src, h.tag, Bytes(data, data + parts[2].size()));
    SendControl(src, WireKind::kAck);
    return Status::Ok();
  }

  // A header-only message (ack, goodbye) to `peer`.
  void SendControl(int peer, WireKind kind) {
    WireHeader h;
    h.kind = kind;
    h.src = static_cast<uint32_t>(rank());
    h.world_size = static_cast<uint32_t>(world_size());
    SendFrames(peer, h, nullptr);
  }

  // Goodbyes are best effort: data has been acknowledged already
  // (Note [Closing]), and a peer that misses our goodbye still notices through
  // lost-peer detection or its timeout. So a peer that is closing at the
  // same moment, whose ROUTER no longer accepts connections, must not hold
  // our context termination for the whole linger.
  void SayGoodbye() {
    const int goodbye_linger_ms = static_cast<int>(std::min<int64_t>(listener_->options.linger.count(), 200));
    for (int peer = 0; peer < world_size(); ++peer) {
      if (peer == rank()) continue;
      if (mailbox_.IsClosed(peer)) {
        dealers_[peer].set(zmq::sockopt::linger, 0);
      } else {
        SendControl(peer, WireKind::kGoodbye);
        dealers_[peer].set(zmq::sockopt::linger, goodbye_linger_ms);
      }
    }
  }

  std::unique_ptr<ZmqListener::Impl> listener_;  // Context + ROUTER.
  std::vector<zmq::socket_t> dealers_;           // Index = peer rank; own entry empty. I/O thread only.
  std::vector<zmq::socket_t> monitors_;          // PAIR sockets reading the dealers' monitors. I/O thread only.
  std::vector<std::optional<std::chrono::steady_clock::time_point>> lost_since_;  // I/O thread only.
  const int wake_fd_;
  RateLimitedLog drops_;  // Messages dropped by ReadIncoming.
  Mailbox mailbox_;
  std::mutex mu_;
  std::deque<Outgoing> outgoing_;  // GUARDED_BY(mu_)
  bool stopping_ = false;          // GUARDED_BY(mu_)
  std::thread io_thread_;
};

}  // namespace

Result<std::unique_ptr<Transport>> ConnectZmqTransport(std::unique_ptr<ZmqListener> listener, int rank,
                                                       const std::vector<PeerInfo>& peers) {
  if (!listener) return Status::InvalidArgument("ConnectZmqTransport: no listener");
  const int n = static_cast<int>(peers.size());
  if (rank < 0 || rank >= n) {
    return Status::InvalidArgument("ConnectZmqTransport: rank " + std::to_string(rank) +
                                   " is outside the world of " + std::to_string(n) + " ranks");
  }
  std::vector<std::string> clusters;
  for (int r = 0; r < n; ++r) {
    const PeerInfo& p = peers[r];
    if (p.rank != r) {
      return Status::InvalidArgument("ConnectZmqTransport: peer table entry " + std::to_string(r) +
                                     " is for rank " + std::to_string(p.rank));
    }
    if (p.endpoint.empty()) {
      return Status::InvalidArgument("ConnectZmqTransport: rank " + std::to_string(r) + " has no endpoint");
    }
    clusters.push_back(p.cluster);
  }
  FRUGAL_ASSIGN_OR_RETURN(Topology topology, Topology::FromClusterNames(std::move(clusters)));

  std::unique_ptr<ZmqListener::Impl> impl = std::move(listener->impl_);
  std::vector<zmq::socket_t> dealers(n);
  std::vector<zmq::socket_t> monitors(n);
  for (int r = 0; r < n; ++r) {
    if (r == rank) continue;
    try {
      dealers[r] = zmq::socket_t(impl->context, zmq::socket_type::dealer);
      Status configured = ConfigureSocket(dealers[r], SocketRole::kConnector, impl->options, peers[r].public_key);
      if (!configured.ok()) return configured.WithContext("connecting to " + topology.DescribeRank(r));
      // See Note [Lost peers]. inproc names are per context, so rank numbers
      // are unique enough.
      const std::string monitor_endpoint = "inproc://frugal-peer-monitor-" + std::to_string(r);
      if (zmq_socket_monitor(dealers[r].handle(), monitor_endpoint.c_str(),
                             ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
        throw zmq::error_t();
      }
      monitors[r] = zmq::socket_t(impl->context, zmq::socket_type::pair);
      monitors[r].set(zmq::sockopt::linger, 0);
      monitors[r].connect(monitor_endpoint);
      dealers[r].connect(peers[r].endpoint);
    } catch (const zmq::error_t& e) {
      return ZmqError("cannot connect to " + topology.DescribeRank(r) + " at " + peers[r].endpoint, e);
    }
  }
  int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) return Status::IOError(std::string("eventfd: ") + std::strerror(errno));
  return std::unique_ptr<Transport>(
      new ZmqTransport(rank, std::move(topology), std::move(impl), std::move(dealers), std::move(monitors), wake_fd));
}

}  // namespace frugal::comm
