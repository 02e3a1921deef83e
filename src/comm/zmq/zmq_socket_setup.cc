#include "zmq_socket_setup.h"

#include <cerrno>

namespace frugal::comm {

Status ZmqError(const std::string& what, const zmq::error_t& e) {
  return Status::IOError(what + ": " + e.what());
}

// Note [Signals]
// The engine's process may take signals (SIGINT for a clean stop, SIGCHLD
// from launched workers, profilers). poll(2) returns EINTR on any handled
// signal, whatever SA_RESTART says, and cppzmq turns that into an
// exception. In the transport's I/O thread that must not become a sticky
// error, so every blocking ZeroMQ call goes through these wrappers.
int PollRetrying(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout) {
  int rc = zmq_poll(items, static_cast<int>(count), static_cast<long>(timeout.count()));
  if (rc >= 0) return rc;
  if (zmq_errno() == EINTR) {
    for (size_t i = 0; i < count; ++i) items[i].revents = 0;
    return 0;
  }
  throw zmq::error_t();
}

void SendRetrying(zmq::socket_t& socket, zmq::message_t& msg, zmq::send_flags flags) {
  while (true) {
    try {
      socket.send(msg, flags);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

Status ConfigureSocket(zmq::socket_t& socket, SocketRole role, const ZmqOptions& options) {
  try {
    // No high-water mark: the exchange bounds how much is in flight (one
    // message per peer per bucket), and dropping or blocking would be worse
    // than buffering.
    socket.set(zmq::sockopt::sndhwm, 0);
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.set(zmq::sockopt::linger, static_cast<int>(options.linger.count()));
    if (role == SocketRole::kConnector) {
      socket.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options.reconnect_interval.count()));
    }
    switch (options.security.mechanism) {
      case SecurityOptions::Mechanism::kNone:
        break;
    }
  } catch (const zmq::error_t& e) {
    return ZmqError("configuring socket", e);
  }
  return Status::Ok();
}

}  // namespace frugal::comm
