#include "handshake_monitor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <zmq_addon.hpp>

#include "zmq_socket_setup.h"

namespace frugal::comm {
namespace {

constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

// "ADDRESS:PORT" of the peer of a connected TCP socket, or "" (not TCP, or
// already closed).
std::string PeerOfFd(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    return "";
  }
  return std::string(host) + ":" + std::to_string(port);
}

std::string MonitorEndpoint() {
  static std::atomic<uint64_t> next{0};
  return "inproc://frugal.handshake-monitor." + std::to_string(next++);
}

}  // namespace

std::string HandshakeFailureReason(uint16_t event, uint32_t value) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return std::string("handshake failed (") + (value != 0 ? std::strerror(static_cast<int>(value)) : "no detail") +
             ")";
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        return "wrong security mechanism (a plaintext peer? this job requires CURVE)";
      }
      if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
        return "CURVE handshake does not decrypt (the peer holds a wrong server key)";
      }
      return "ZMTP protocol error 0x" + [&] {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "%x", value);
        return std::string(buf);
      }();
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      // 400 is a ZAP denial, already logged by the ZapHandler with the key.
      return value == 400 ? "" : "authentication failed (ZAP status " + std::to_string(value) + ")";
    default:
      return "";
  }
}

Result<std::unique_ptr<HandshakeMonitor>> HandshakeMonitor::Start(zmq::context_t& context, zmq::socket_t& listener,
                                                                  LogSink log) {
  const std::string endpoint = MonitorEndpoint();
  zmq::socket_t socket;
  try {
    if (zmq_socket_monitor(listener.handle(), endpoint.c_str(), kEvents) != 0) throw zmq::error_t();
    socket = zmq::socket_t(context, zmq::socket_type::pair);
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError("starting the handshake monitor", e);
  }
  return std::unique_ptr<HandshakeMonitor>(new HandshakeMonitor(std::move(socket), std::move(log)));
}

HandshakeMonitor::HandshakeMonitor(zmq::socket_t socket, LogSink log)
    : socket_(std::move(socket)), log_(std::move(log)) {
  thread_ = std::thread([this] { Loop(); });
}

HandshakeMonitor::~HandshakeMonitor() {
  stop_ = true;
  thread_.join();
}

// Polls with a short timeout so that destruction never waits long. Each
// event is two frames: 2 bytes event, 4 bytes value; then an endpoint.
void HandshakeMonitor::Loop() {
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (PollRetrying(&item, 1, std::chrono::milliseconds(50)) == 0) continue;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) continue;
      if (frames.empty() || frames[0].size() != 6) continue;
      uint16_t event = 0;
      uint32_t value = 0;
      std::memcpy(&event, frames[0].data(), 2);
      std::memcpy(&value, static_cast<const char*>(frames[0].data()) + 2, 4);
      Handle(event, value);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) break;
      log_.Report(std::string("handshake monitor: ") + e.what());
    }
  }
  socket_.close();
}

// Note [Refused handshakes]
// libzmq's handshake-failure events carry the reason but neither the fd nor
// the peer's address (the endpoint frame is the listener's own address).
// ACCEPTED carries the fd, so its peer address is taken then (getpeername);
// a failure is followed, in the same I/O-thread call, by DISCONNECTED with
// the failed connection's fd, which names the peer. Every context here has
// one I/O thread, so no other connection's event comes between the two. A
// failure whose DISCONNECTED never comes is not logged. A peer that hangs up
// before this thread reads its ACCEPTED event (getpeername: ENOTCONN) is
// logged as "unknown address".
void HandshakeMonitor::Handle(uint16_t event, uint32_t value) {
  const int fd = static_cast<int>(value);
  if (event == ZMQ_EVENT_ACCEPTED) {
    peers_[fd] = PeerOfFd(fd);
    return;
  }
  if (event == ZMQ_EVENT_DISCONNECTED) {
    auto it = peers_.find(fd);
    std::string address = it != peers_.end() ? it->second : std::string();
    if (it != peers_.end()) peers_.erase(it);
    if (pending_reason_.empty()) return;
    if (address.empty()) address = "unknown address";
    ++refused_;
    log_.Report("refused a connection from " + address + " before the key check: " + pending_reason_);
    pending_reason_.clear();
    return;
  }
  pending_reason_ = HandshakeFailureReason(event, value);
}

}  // namespace frugal::comm
