// Test helpers: build a world of N transports on one backend and run one
// function per rank on its own thread (gloo's test `spawn` pattern).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/comm/transport/zmq_transport.h"

namespace frugal::comm::testing {

enum class Backend { kInProc, kZmq };
std::string BackendName(Backend b);

struct World {
  std::vector<std::unique_ptr<Transport>> ranks;
  std::shared_ptr<void> keepalive;  // Backend state the transports need (the hub).
  std::vector<std::string> endpoints;  // ZeroMQ only: where each rank listens.
};

inline std::string EndpointOf(const World& w, int rank) { return w.endpoints.at(rank); }

// One transport per entry of `cluster_of_rank`. ZeroMQ ranks listen on
// ZmqOptions for tests: linger 300 ms.
ZmqOptions FastZmqOptions();

// One transport per entry of `cluster_of_rank`. ZeroMQ ranks listen on
// tcp://127.0.0.1 with ephemeral ports, with `zmq`; with CURVE every rank
// uses zmq.security's key pair.
World MakeWorld(Backend backend, const std::vector<std::string>& cluster_of_rank, ZmqOptions zmq = FastZmqOptions());

// Runs fn(rank) on world_size threads and joins them.
void RunRanks(int world_size, const std::function<void(int)>& fn);

}  // namespace frugal::comm::testing
