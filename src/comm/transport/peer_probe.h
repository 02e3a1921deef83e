// PeerProbe: asks a peer's host, without waiting, whether anything listens
// on the peer's port, to tell a dead process from a broken link
// (Note [Dead process or broken link] in peer_probe.cc).
//
// One probe is one non-blocking TCP connect to the host and port of a
// tcp:// endpoint; Check() reads its outcome without blocking. Its timeout
// runs on the caller's clock: Start and Check take the caller's Now(). Not
// thread-safe: the thread that starts a probe checks it. Owns its socket.
#pragma once

#include <chrono>
#include <string>

#include "frugal/common/clock.h"

namespace frugal::comm {

class PeerProbe {
 public:
  enum class Answer {
    kPending,    // no answer yet
    kRefused,    // the host answered that nothing listens: the process is gone
    kListening,  // something accepted the connection: the process is there
    kNoAnswer,   // unreachable, timed out, or not a numeric tcp:// endpoint
  };

  PeerProbe() = default;
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // Starts a probe of `endpoint` ("tcp://10.0.0.5:41000"), dropping one in
  // progress. Endpoints that are not tcp:// with a numeric IPv4 or IPv6
  // address answer at once: ipc:// and inproc:// peers share this host, so
  // kRefused (nothing can break between them but the process); a host name
  // gives kNoAnswer (resolving it could block).
  void Start(const std::string& endpoint, std::chrono::milliseconds timeout, Clock::time_point now);
  // The outcome; kPending until the host answers or `now` is past the timeout.
  Answer Check(Clock::time_point now);
  bool started() const { return started_; }
  // Drops a probe in progress; started() is false again.
  void Reset();

 private:
  void Close();

  int fd_ = -1;
  bool started_ = false;
  Answer answer_ = Answer::kPending;
  Clock::time_point deadline_;
};

}  // namespace frugal::comm
