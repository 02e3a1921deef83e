// Test helpers that behave like strangers on the network: random bytes and
// HTTP over raw TCP, malformed ZeroMQ messages. Used by the hostile-peer and
// CURVE tests. Every call is bounded in time (2 s socket timeouts).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::comm::testing {

// Collects the lines a ZmqOptions::log sink is given. Thread-safe.
class LogCapture {
 public:
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
    };
  }
  // Lines containing `needle`.
  size_t Count(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& l : lines_) n += l.find(needle) != std::string::npos;
    return n;
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// Connects to tcp://HOST:PORT over plain TCP, waits `before`, writes
// `bytes`, waits `after`, closes. Errors are ignored: the other side may
// hang up at any time.
void SendRawTcp(const std::string& endpoint, const std::string& bytes,
                std::chrono::milliseconds before = std::chrono::milliseconds(0),
                std::chrono::milliseconds after = std::chrono::milliseconds(0));
// A ZMTP 3.0 greeting (signature, version, mechanism name, as-client) of a
// peer that speaks `mechanism` ("NULL", "PLAIN" or "CURVE").
std::string ZmtpGreeting(const std::string& mechanism);

// One round of garbage to `endpoint`: 100 KB of random bytes (seeded), an
// HTTP GET, and ZeroMQ messages with 1, 2 and 4 frames, a header with a bad
// magic and a well-formed header from a world of another size.
void Bombard(const std::string& endpoint, uint64_t seed);

// Sends one frame to a rendezvous server over a plain DEALER and returns
// its answer. Errors: Timeout.
Result<std::string> SendRendezvousRequest(const std::string& endpoint, const std::string& body,
                                          std::chrono::milliseconds timeout);

}  // namespace frugal::comm::testing
