// ZapHandler: the ZeroMQ authentication (ZAP, RFC 27) handler of one
// context. A listening socket with CURVE asks it, for every handshake,
// whether the client's public key may connect; it admits the keys of
// SecurityOptions::authorized_keys and the process's own key, and logs every
// rejection with the client's address and key fingerprint.
//
// One thread per handler, owning a REP socket on inproc://zeromq.zap.01 of
// the given context (inproc names are per context, so several handlers can
// live in one process). The admitted key is returned as the ZAP user id, so
// messages from that connection carry it as the "User-Id" property.
//
// Lifetime: start it before binding the listening socket (with no handler,
// libzmq admits everyone); destroy it before the context.
#pragma once

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "frugal/comm/transport/security.h"
#include "handshake_monitor.h"
#include "rate_limited_log.h"

namespace frugal::comm {

class ZapHandler {
 public:
  // Binds the handler's socket in `context`. Errors: IOError.
  static Result<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context, const SecurityOptions& security,
                                                   LogSink log);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  uint64_t rejected() const { return rejected_.load(); }

  // Also logs the handshakes `listener` refuses before asking this handler
  // (handshake_monitor.h); the monitor lives as long as this handler. Call
  // before the listener binds. Errors: IOError.
  Status MonitorListener(zmq::context_t& context, zmq::socket_t& listener);

 private:
  ZapHandler(zmq::socket_t socket, std::set<std::string> allowed, LogSink log);
  void Loop();
  void Answer(std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;              // Loop() only, once started.
  const std::set<std::string> allowed_;  // Binary 32-byte public keys.
  LogSink sink_;
  RateLimitedLog log_;
  std::vector<std::unique_ptr<HandshakeMonitor>> monitors_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rejected_{0};
  std::thread thread_;
};

}  // namespace frugal::comm
