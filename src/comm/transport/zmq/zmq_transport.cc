#include "frugal/comm/transport/zmq_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "transport/mailbox.h"
#include "transport/peer_probe.h"
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
//
// Outages (Note [Lost peers], Note [Resend after reconnect]): a dropped
// connection is redialled by ZeroMQ; the peer is waited for as long as its
// host answers that it is there or does not answer at all, up to
// `link_grace`, and what it had not acknowledged is resent once it is back.
//
// Note [Messages in parts]: ZeroMQ hands a message over only once all of it
// has arrived, so a wait on a large message over a slow link would count
// its whole transfer against the receive timeout: a 500 MB round (a 1 B
// parameter model at int4) takes 400 s at 10 Mbit/s, and every fixed
// timeout is either too short for it or far too long to catch a stalled
// peer. So a payload over kPartBytes travels as parts of kPartBytes (frames
// of kind kDataPart, the last one kData), each with its own sequence number
// and ack, written from the caller's buffer without a copy. The receiver
// appends the parts in sequence order and delivers the message with its
// last; every part tells the mailbox (PartArrived), and a wait on that peer
// then times out only `timeout` after its latest part: the timeout bounds
// the silence of a peer, not the length of its transfer. Busy time and
// messages in flight still count whole messages (the last part's ack ends
// one). What it costs: one header and one ack per MiB, and a receiver that
// learns nothing of a message until its first part is complete.

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
  if (options.clock == nullptr) return Status::InvalidArgument("ZmqListener::Bind: ZmqOptions::clock is null");
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
               std::vector<zmq::socket_t> dealers, std::vector<zmq::socket_t> monitors,
               std::vector<std::string> endpoints, int wake_fd)
      : Transport(rank, topology, *listener->options.clock),
        listener_(std::move(listener)),
        dealers_(std::move(dealers)),
        monitors_(std::move(monitors)),
        endpoints_(std::move(endpoints)),
        links_(dealers_.size()),
        wake_fd_(wake_fd),
        drops_(listener_->options.log, clock()),
        mailbox_(rank, std::move(topology), clock()) {
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

  // Messages over this many bytes travel in parts (Note [Messages in parts]).
  static constexpr size_t kPartBytes = size_t{1} << 20;

  struct Unacked {  // One frame: a whole message, or a part of one.
    uint64_t seq;
    Tag tag;
    SharedBytes payload;  // The whole message's.
    size_t offset;
    size_t length;
    bool last;            // The message's last (or only) frame.
  };
  struct Early {
    Tag tag;
    Bytes payload;
    bool last;
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
      std::optional<Clock::time_point> drain_deadline;
      while (true) {
        for (auto& item : items) item.revents = 0;
        std::chrono::milliseconds wait = NextLostDeadline();
        if (drain_deadline) {
          auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*drain_deadline - clock().Now()) +
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
          const auto now = clock().Now();
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
  // A peer that exits without a goodbye (crash, SIGKILL) drops the TCP
  // connection our DEALER holds to it, and so does a link outage once the
  // connection stalls for `stalled_connection` (Note [Resend after
  // reconnect]); the socket monitor reports ZMQ_EVENT_DISCONNECTED and
  // ZeroMQ keeps redialling. The peer is back when a redial completes its
  // handshake (ZMQ_EVENT_HANDSHAKE_SUCCEEDED: a bare TCP connect proves
  // nothing). While it is away, a probe asks its host whether its port is
  // still open (Note [Dead process or broken link] in peer_probe.cc): a host
  // that refuses for `peer_lost_grace` has lost the process, and the peer is
  // marked closed, so every wait on it fails with Unavailable at once
  // instead of running into its timeout; a host that accepts or does not
  // answer gets `link_grace`. A peer that is alive but silent without a
  // dropped connection (a stall shorter than `stalled_connection`) is only
  // caught by the receive timeouts.
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
      PeerLink& link = links_[peer];
      if (event == ZMQ_EVENT_DISCONNECTED) {
        if (!link.lost_since) {
          link.lost_since = clock().Now();
          link.refused_since.reset();
          link.next_probe = *link.lost_since;
        }
      } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        link.lost_since.reset();
        link.refused_since.reset();
        if (link.connected_before) Resend(peer);
        link.connected_before = true;
      }
    }
  }

  // Probes the hosts of peers that are away and closes those whose grace
  // ended (Note [Lost peers]).
  void DeclareLostPeers() {
    const ZmqOptions& o = listener_->options;
    const auto now = clock().Now();
    for (size_t peer = 0; peer < links_.size(); ++peer) {
      PeerLink& link = links_[peer];
      if (!link.lost_since) continue;
      if (mailbox_.IsClosed(static_cast<int>(peer))) {  // said goodbye, or already declared lost
        link.lost_since.reset();
        link.probe.Reset();
        continue;
      }
      if (link.probe.started()) {
        const PeerProbe::Answer answer = link.probe.Check(now);
        if (answer != PeerProbe::Answer::kPending) {
          if (answer != PeerProbe::Answer::kRefused) {
            link.refused_since.reset();
          } else if (!link.refused_since) {
            link.refused_since = now;
          }
          link.probe.Reset();
          link.next_probe = now + kProbeInterval;
        }
      } else if (now >= link.next_probe) {
        link.probe.Start(endpoints_[peer], kProbeTimeout, now);
        continue;  // checked on the next turn of the loop
      }
      std::string why;
      if (link.refused_since && now - *link.refused_since >= o.peer_lost_grace) {
        why = "lost its connection, and its host refuses connections to it (process died)";
      } else if (now - *link.lost_since >= o.link_grace) {
        why = "lost its connection and was not back within the link grace of " +
              std::to_string(o.link_grace.count()) + " ms (host down or link broken)";
      } else {
        continue;
      }
      link.lost_since.reset();
      link.refused_since.reset();
      link.probe.Reset();
      link.unacked.clear();
      TransfersAbandoned(static_cast<int>(peer));
      mailbox_.MarkClosed(static_cast<int>(peer), why);
    }
  }

  // How long poll may sleep: short while a peer is away (its probe and its
  // grace are checked on every turn), else until woken.
  std::chrono::milliseconds NextLostDeadline() const {
    for (const PeerLink& link : links_) {
      if (link.lost_since) return kAwayPollInterval;
    }
    return std::chrono::milliseconds(-1);
  }

  // Note [Resend after reconnect]
  // TCP alone rides out a short outage: the kernel keeps retransmitting and
  // the connection survives. But where the network drops packets without an
  // ICMP answer (which would reset the backoff), the retransmission backoff
  // doubles up to two minutes, so after a 40 s outage the next retry can
  // come 20 s after the link is back; so a connection that stays stalled for
  // `stalled_connection` is dropped (TCP_USER_TIMEOUT) and ZeroMQ redials it
  // every `reconnect_interval`. A dropped connection loses what was in its
  // socket buffers, and ZeroMQ does not resend: so every data message
  // carries a sequence number per (sender, receiver) pair, the sender keeps
  // each payload until the receiver acknowledges it (acks are cumulative:
  // "every message up to seq"), and when a redial completes its handshake
  // the sender resends everything unacknowledged and re-sends its own
  // cumulative ack (acks to that peer travel on the same connection). The
  // receiver delivers in sequence order, holds a message that arrives ahead
  // of a gap, and drops one it has already delivered, so a resend is never
  // delivered twice. The costs: a payload lives until its ack (one round trip
  // longer than its write, which can make a caller's buffer reuse allocate),
  // and a reconnect may resend messages that had not been lost (those still
  // queued in ZeroMQ's pipe), which the receiver drops.
  void Resend(int peer) {
    PeerLink& link = links_[peer];
    for (const Unacked& u : link.unacked) SendData(peer, u);
    SendControl(peer, WireKind::kAck, link.delivered);
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
      PeerLink& link = links_[out.dst];
      // Note [Messages in parts].
      const size_t size = out.payload->size();
      size_t offset = 0;
      do {
        const size_t length = std::min(kPartBytes, size - offset);
        const bool last = offset + length == size;
        link.unacked.push_back(Unacked{link.next_seq++, out.tag, out.payload, offset, length, last});
        SendData(out.dst, link.unacked.back());
        offset += length;
      } while (offset < size);
    }
    return stopping;
  }

  void SendData(int dst, const Unacked& u) {
    WireHeader h;
    h.kind = u.last ? WireKind::kData : WireKind::kDataPart;
    h.src = static_cast<uint32_t>(rank());
    h.world_size = static_cast<uint32_t>(world_size());
    h.tag = u.tag;
    h.length = u.length;
    h.seq = u.seq;
    SendFrames(dst, h, u.payload, u.offset, u.length);
  }

  // The header, then `length` bytes of `payload` from `offset` (none for a
  // null payload), sent from the payload's own memory.
  void SendFrames(int dst, const WireHeader& h, SharedBytes payload, size_t offset = 0, size_t length = 0) {
    auto header = h.Encode();
    zmq::socket_t& dealer = dealers_[dst];
    zmq::message_t header_frame(header.data(), header.size());
    SendRetrying(dealer, header_frame, zmq::send_flags::sndmore);
    zmq::message_t body;
    if (payload && length > 0) {
      auto* hold = new SharedBytes(std::move(payload));
      body = zmq::message_t(const_cast<uint8_t*>((*hold)->data()) + offset, length, &ReleasePayload, hold);
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
        links_[src].unacked.clear();
        TransfersAbandoned(src);
        return Status::Ok();
      case WireKind::kAck: {
        // Cumulative (Note [Resend after reconnect]): a repeated ack acknowledges nothing new.
        PeerLink& link = links_[src];
        while (!link.unacked.empty() && link.unacked.front().seq <= h.seq) {
          // A message is acknowledged with its last part (Note [Messages in parts]).
          if (link.unacked.front().last) TransferAcknowledged(src);
          link.unacked.pop_front();
        }
        return Status::Ok();
      }
      case WireKind::kData:
      case WireKind::kDataPart:
        break;
    }
    if (h.seq == 0) return Status::Corruption("data message from rank " + std::to_string(src) + " has no sequence number");
    PeerLink& link = links_[src];
    const uint8_t* data = parts[2].data<uint8_t>();
    const size_t size = parts[2].size();
    const bool last = h.kind == WireKind::kData;
    if (h.seq == link.delivered + 1 && link.early.empty()) {
      DeliverInOrder(src, h.tag, last, data, size);  // The usual case: no copy kept aside.
      link.delivered = h.seq;
    } else if (h.seq > link.delivered && link.early.count(h.seq) == 0) {
      link.early.emplace(h.seq, Early{h.tag, Bytes(data, data + size), last});
    }
    // Deliver in sequence order: what arrived ahead of a gap waits for the resend that fills it.
    for (auto it = link.early.begin(); it != link.early.end() && it->first == link.delivered + 1;
         it = link.early.erase(it)) {
      const Bytes& frame = it->second.payload;
      DeliverInOrder(src, it->second.tag, it->second.last, frame.data(), frame.size());
      link.delivered = it->first;
    }
    SendControl(src, WireKind::kAck, link.delivered);
    return Status::Ok();
  }

  // The next frame of `src` in sequence order, `size` bytes at `data`: a
  // whole message, or a part of one (Note [Messages in parts]).
  void DeliverInOrder(int src, Tag tag, bool last, const uint8_t* data, size_t size) {
    PeerLink& link = links_[src];
    if (link.partial.empty() && last) {
      mailbox_.Deliver(src, tag, Bytes(data, data + size));
      return;
    }
    if (!link.partial.empty() && tag != link.partial_tag) {
      // A peer that follows the protocol never interleaves messages' parts.
      drops_.Report(topology().DescribeRank(rank()) + " dropped a partial message from " +
                    topology().DescribeRank(src) + ": its next frame has another tag");
      link.partial.clear();
    }
    if (link.partial.empty()) {
      link.partial.reserve(4 * size);  // Grown by doubling from there.
      link.partial_tag = tag;
    }
    link.partial.insert(link.partial.end(), data, data + size);
    if (!last) {
      mailbox_.PartArrived(src);
      return;
    }
    mailbox_.Deliver(src, tag, std::move(link.partial));
    link.partial = Bytes();
  }

  // A header-only message (ack, goodbye) to `peer`.
  void SendControl(int peer, WireKind kind, uint64_t seq = 0) {
    WireHeader h;
    h.kind = kind;
    h.src = static_cast<uint32_t>(rank());
    h.world_size = static_cast<uint32_t>(world_size());
    h.seq = seq;
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

  static constexpr std::chrono::milliseconds kProbeInterval{250};
  static constexpr std::chrono::milliseconds kProbeTimeout{1000};
  static constexpr std::chrono::milliseconds kAwayPollInterval{20};

  // One peer's side of the pair, as this rank sees it. I/O thread only.
  struct PeerLink {
    // Sending (Note [Resend after reconnect]).
    uint64_t next_seq = 1;
    std::deque<Unacked> unacked;  // in seq order
    // Receiving: the newest frame delivered in order, those ahead of a gap,
    // and the parts of a message so far (Note [Messages in parts]).
    uint64_t delivered = 0;
    std::map<uint64_t, Early> early;
    Bytes partial;
    Tag partial_tag = 0;
    // Our DEALER's connection (Note [Lost peers]).
    bool connected_before = false;
    std::optional<Clock::time_point> lost_since;
    std::optional<Clock::time_point> refused_since;
    Clock::time_point next_probe;
    PeerProbe probe;
  };

  std::unique_ptr<ZmqListener::Impl> listener_;  // Context + ROUTER.
  std::vector<zmq::socket_t> dealers_;           // Index = peer rank; own entry empty. I/O thread only.
  std::vector<zmq::socket_t> monitors_;          // PAIR sockets reading the dealers' monitors. I/O thread only.
  const std::vector<std::string> endpoints_;     // Index = peer rank: where its listener is (probes).
  std::vector<PeerLink> links_;                  // Index = peer rank. I/O thread only.
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
  std::vector<std::string> endpoints(n);
  for (int r = 0; r < n; ++r) {
    endpoints[r] = peers[r].endpoint;
    if (r == rank) continue;
    try {
      dealers[r] = zmq::socket_t(impl->context, zmq::socket_type::dealer);
      Status configured = ConfigureSocket(dealers[r], SocketRole::kConnector, impl->options, peers[r].public_key);
      if (!configured.ok()) return configured.WithContext("connecting to " + topology.DescribeRank(r));
      // See Note [Lost peers]. inproc names are per context, so rank numbers
      // are unique enough.
      const std::string monitor_endpoint = "inproc://frugal-peer-monitor-" + std::to_string(r);
      if (zmq_socket_monitor(dealers[r].handle(), monitor_endpoint.c_str(),
                             ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0) {
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
      new ZmqTransport(rank, std::move(topology), std::move(impl), std::move(dealers), std::move(monitors),
                       std::move(endpoints), wake_fd));
}

}  // namespace frugal::comm
