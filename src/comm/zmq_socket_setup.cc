#include "zmq_socket_setup.h"

namespace frugal::comm {

Status ZmqError(const std::string& what, const zmq::error_t& e) {
  return Status::IOError(what + ": " + e.what());
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
