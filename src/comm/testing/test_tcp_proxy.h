// TcpProxy (tests only): a loopback TCP relay in front of a listener, whose
// links a test can break the way networks break: swallow bytes without a
// word (an outage, with TCP still up), reset connections (a dropped
// connection), or close the port (a dead process: connections refused).
//
// One thread relays every connection; the control methods block until the
// relay thread has applied them, so a test's order of events is the order
// of its calls. Not copyable; stops its thread in the destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace frugal::comm::testing {

class TcpProxy {
 public:
  enum class Mode {
    kForward,    // relay both ways
    kBlackhole,  // accept and read, relay nothing, answer nothing
  };

  // Relays 127.0.0.1:<port()> to 127.0.0.1:`upstream_port`.
  explicit TcpProxy(int upstream_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

  // What existing and new connections do from now on (bytes swallowed while
  // blackholed are gone); kForward also reopens a closed port.
  void SetMode(Mode mode);
  // Closes every connection with a reset, both ways.
  void ResetConnections();
  // Relays at most `bytes_per_s` (a slow link; 0: as fast as it can).
  void SetRate(double bytes_per_s);
  // Resets every connection and closes the port: new connections are refused.
  void ClosePort();

 private:
  struct Relay;
  void Apply(std::function<void(Relay&)> change);

  int port_ = 0;
  std::unique_ptr<Relay> relay_;
  std::thread thread_;
};

// The port of a "tcp://HOST:PORT" endpoint.
int PortOf(const std::string& endpoint);

}  // namespace frugal::comm::testing
