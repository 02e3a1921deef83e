// HandshakeMonitor: logs the connections a CURVE listener refuses before
// its ZAP handler sees a key (a plaintext or ZMTP 1.0/2.0 peer, a CURVE
// client holding the wrong server key, garbage in the handshake). The
// ZapHandler logs the refusals it decides itself (wrong key, wrong
// mechanism named in a ZAP request); these never reach it.
//
// One thread per listening socket, owning a PAIR socket connected to the
// listener's zmq_socket_monitor endpoint. Note [Refused handshakes] in
// handshake_monitor.cc says how a refusal is matched with its peer address.
// Lines go through a RateLimitedLog, so a flood of strangers cannot fill the
// disk.
//
// Lifetime: start it before the listener binds; destroy it before the
// context (the ZapHandler that owns it is). Destruction waits at most one
// poll interval (50 ms).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "frugal/common/status.h"
#include "rate_limited_log.h"

namespace frugal::comm {

class HandshakeMonitor {
 public:
  // Starts monitoring `listener` (a socket of `context`). Errors: IOError.
  static Result<std::unique_ptr<HandshakeMonitor>> Start(zmq::context_t& context, zmq::socket_t& listener,
                                                         LogSink log);
  ~HandshakeMonitor();
  HandshakeMonitor(const HandshakeMonitor&) = delete;
  HandshakeMonitor& operator=(const HandshakeMonitor&) = delete;

  // Refusals seen so far (logged or suppressed).
  uint64_t refused() const { return refused_.load(); }

 private:
  HandshakeMonitor(zmq::socket_t socket, LogSink log);
  void Loop();
  void Handle(uint16_t event, uint32_t value);

  zmq::socket_t socket_;  // Loop() only, once started.
  RateLimitedLog log_;
  std::map<int, std::string> peers_;  // Loop() only: accepted fd -> peer address.
  std::string pending_reason_;        // Loop() only: the last refusal, until its fd closes.
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// The reason libzmq gives for a refused handshake, in words ("" for an
// event that is not a refusal, or an AUTH refusal the ZAP handler logged).
std::string HandshakeFailureReason(uint16_t event, uint32_t value);

}  // namespace frugal::comm
