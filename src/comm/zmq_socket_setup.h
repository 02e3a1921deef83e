// The one place where ZeroMQ sockets get their options: buffering, linger,
// reconnect and (later) security. Both the transport and the rendezvous use
// it, so a new SecurityOptions mechanism is added here once.
#pragma once

#include <zmq.hpp>

#include "frugal/comm/zmq_transport.h"

namespace frugal::comm {

enum class SocketRole {
  kListener,   // Binds; peers connect to it (CurveZMQ server side).
  kConnector,  // Connects to a listener (CurveZMQ client side).
};

// Applies `options` to a fresh socket before bind/connect. Errors: the
// ZeroMQ error as a Status.
Status ConfigureSocket(zmq::socket_t& socket, SocketRole role, const ZmqOptions& options);

// Converts a cppzmq exception into a Status: "what: zmq error text".
Status ZmqError(const std::string& what, const zmq::error_t& e);

}  // namespace frugal::comm
