// The one place where ZeroMQ sockets get their options: buffering, linger,
// reconnect and security (SecurityOptions, security.h). Both the transport and the rendezvous use
// it, so a new SecurityOptions mechanism is added here once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "frugal/comm/transport/zmq_transport.h"

namespace frugal::comm {

enum class SocketRole {
  kListener,   // Binds; peers connect to it (CurveZMQ server side).
  kConnector,  // Connects to a listener (CurveZMQ client side).
};

// Applies `options` to a fresh socket before bind/connect. A kCurve
// connector needs `server_key`, the Z85 public key of the listener it
// connects to; a kCurve listener needs a ZapHandler in its context
// (zap_handler.h). Errors: InvalidArgument (no server key), the ZeroMQ
// error as a Status.
Status ConfigureSocket(zmq::socket_t& socket, SocketRole role, const ZmqOptions& options,
                       const std::string& server_key = "");

class ZapHandler;

// A listening ROUTER socket, as the transport and the rendezvous both need
// one: with kCurve, the ZapHandler is started first (into *zap) and given a
// HandshakeMonitor on the listener (refusals before the key check); then the
// listener options, `tune` for the caller's own ones, bind, and the bound
// endpoint. Errors name `what` ("cannot listen on ADDRESS").
Status BindListener(zmq::context_t& context, const std::string& address, const ZmqOptions& options,
                    const std::string& what, const std::function<void(zmq::socket_t&)>& tune,
                    std::unique_ptr<ZapHandler>* zap, zmq::socket_t* router, std::string* endpoint);

// The address of the connection a received message came from
// ("Peer-Address" property), or "unknown address".
std::string PeerAddressOf(const zmq::message_t& msg);

// The ZAP user id of the connection a message came from: the Z85 public key
// the ZapHandler admitted; empty without CURVE.
std::string PeerKeyOf(const zmq::message_t& msg);

// zmq_poll that treats a signal (EINTR) as a spurious wake-up: returns 0
// and lets the caller's loop poll again. Other errors throw zmq::error_t.
int PollRetrying(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout);

// socket.send(msg, flags), retried when a signal interrupts it. On return
// ZeroMQ owns the message. Other errors throw zmq::error_t.
void SendRetrying(zmq::socket_t& socket, zmq::message_t& msg, zmq::send_flags flags);

// Converts a cppzmq exception into a Status: "what: zmq error text".
Status ZmqError(const std::string& what, const zmq::error_t& e);

}  // namespace frugal::comm
