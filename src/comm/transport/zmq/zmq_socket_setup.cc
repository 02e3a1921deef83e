#include "zmq_socket_setup.h"

#include <cerrno>

#include "zap_handler.h"

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

std::string PeerAddressOf(const zmq::message_t& msg) {
  const char* v = zmq_msg_gets(msg.handle(), "Peer-Address");
  return v != nullptr && *v != '\0' ? std::string(v) : std::string("unknown address");
}

std::string PeerKeyOf(const zmq::message_t& msg) {
  const char* v = zmq_msg_gets(msg.handle(), "User-Id");
  return v != nullptr ? std::string(v) : std::string();
}

// Note [No ZMTP 1.0]
// libzmq accepts unversioned (ZMTP 1.0) peers, so random bytes sent to a
// listening port arrive as messages, and in libzmq 4.3.4 a ZMTP 1.0 peer
// whose routing id is already taken makes the ROUTER abort the process
// ("Resource temporarily unavailable (src/zmtp_engine.cpp:446)": the
// engine asserts on EAGAIN), which random bytes hit within a few hundred
// connections. libzmq refuses ZMTP 1.0 and 2.0 peers on a socket with a
// ZAP domain, so every listening socket gets one. With the NULL mechanism
// and no ZAP handler in the context, ZMTP 3 peers are admitted as before
// (ZMQ_ZAP_ENFORCE_DOMAIN is off); with CURVE the ZapHandler answers.
Status ConfigureSocket(zmq::socket_t& socket, SocketRole role, const ZmqOptions& options,
                       const std::string& server_key) {
  const SecurityOptions& security = options.security;
  if (security.mechanism == SecurityOptions::Mechanism::kCurve && role == SocketRole::kConnector &&
      server_key.empty()) {
    return Status::InvalidArgument("CURVE: no public key known for the server to connect to");
  }
  try {
    // No high-water mark: the exchange bounds how much is in flight (one
    // message per peer per bucket), and dropping or blocking would be worse
    // than buffering.
    socket.set(zmq::sockopt::sndhwm, 0);
    socket.set(zmq::sockopt::rcvhwm, 0);
    socket.set(zmq::sockopt::linger, static_cast<int>(options.linger.count()));
    if (role == SocketRole::kConnector) {
      socket.set(zmq::sockopt::reconnect_ivl, static_cast<int>(options.reconnect_interval.count()));
      // Note [Resend after reconnect]: a stalled connection is dropped and
      // redialled; a redial into a silent network gives up after 2 s and
      // tries again instead of waiting out the kernel's SYN backoff.
      if (options.stalled_connection.count() > 0) {
        socket.set(zmq::sockopt::tcp_maxrt, static_cast<int>(options.stalled_connection.count()));
      }
      socket.set(zmq::sockopt::connect_timeout, 2000);
    } else {
      // The connecting side of a connection that a link outage broke may
      // have given up on it; keepalive reaps our end within about a minute.
      socket.set(zmq::sockopt::tcp_keepalive, 1);
      socket.set(zmq::sockopt::tcp_keepalive_idle, 30);
      socket.set(zmq::sockopt::tcp_keepalive_intvl, 10);
      socket.set(zmq::sockopt::tcp_keepalive_cnt, 3);
      // Note [No ZMTP 1.0]: a ZAP domain makes libzmq refuse pre-3.0 peers.
      socket.set(zmq::sockopt::zap_domain, "frugal");
    }
    switch (options.security.mechanism) {
      case SecurityOptions::Mechanism::kNone:
        break;
      case SecurityOptions::Mechanism::kCurve:
        // A plaintext or ZMTP 1.0 peer fails the handshake: nothing it
        // sends reaches the application.
        if (role == SocketRole::kListener) {
          socket.set(zmq::sockopt::curve_server, 1);
          socket.set(zmq::sockopt::curve_secretkey, security.keys.secret_key);
        } else {
          socket.set(zmq::sockopt::curve_serverkey, server_key);
          socket.set(zmq::sockopt::curve_publickey, security.keys.public_key);
          socket.set(zmq::sockopt::curve_secretkey, security.keys.secret_key);
        }
        break;
    }
  } catch (const zmq::error_t& e) {
    return ZmqError("configuring socket", e);
  }
  return Status::Ok();
}

Status BindListener(zmq::context_t& context, const std::string& address, const ZmqOptions& options,
                    const std::string& what, const std::function<void(zmq::socket_t&)>& tune,
                    std::unique_ptr<ZapHandler>* zap, zmq::socket_t* router, std::string* endpoint) {
  if (options.security.mechanism == SecurityOptions::Mechanism::kCurve) {
    FRUGAL_ASSIGN_OR_RETURN(*zap, ZapHandler::Start(context, options.security, options.log));
  }
  try {
    *router = zmq::socket_t(context, zmq::socket_type::router);
    FRUGAL_RETURN_IF_ERROR(ConfigureSocket(*router, SocketRole::kListener, options));
    tune(*router);
    if (*zap != nullptr) FRUGAL_RETURN_IF_ERROR((*zap)->MonitorListener(context, *router));
    router->bind(address);
    *endpoint = router->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError(what, e);
  }
  return Status::Ok();
}

}  // namespace frugal::comm
