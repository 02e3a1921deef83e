// Test helpers that behave like strangers on the network: random bytes and
// HTTP over raw TCP, malformed ZeroMQ messages. Used by the hostile-peer and
// CURVE tests. Every call is bounded in time (2 s socket timeouts).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "frugal/common/status.h"

namespace frugal::comm::testing {

// Connects to tcp://HOST:PORT over plain TCP, writes `bytes`, closes.
// Errors are ignored: the other side may hang up at any time.
void SendRawTcp(const std::string& endpoint, const std::string& bytes);

// One round of garbage to `endpoint`: 100 KB of random bytes (seeded), an
// HTTP GET, and ZeroMQ messages with 1, 2 and 4 frames, a header with a bad
// magic and a well-formed header from a world of another size.
void Bombard(const std::string& endpoint, uint64_t seed);

// Sends one frame to a rendezvous server over a plain DEALER and returns
// its answer. Errors: Timeout.
Result<std::string> SendRendezvousRequest(const std::string& endpoint, const std::string& body,
                                          std::chrono::milliseconds timeout);

}  // namespace frugal::comm::testing
