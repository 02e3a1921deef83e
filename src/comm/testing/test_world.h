// Test helpers: build a world of N transports on one backend and run one
// function per rank on its own thread (gloo's test `spawn` pattern). The
// multi-rank tests of comm, collective and engine get their worlds here and
// run as value-parameterised suites over both backends:
//
//   class FooTest : public ::testing::TestWithParam<Backend> {};
//   TEST_P(FooTest, Bar) { World w = MakeWorld(GetParam(), {"a", "b"}); ... }
//   INSTANTIATE_TEST_SUITE_P(Backends, FooTest, AllBackends(), BackendParamName());
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/comm/transport/zmq_transport.h"

namespace frugal::comm::testing {

enum class Backend { kInProc, kZmq };
std::string BackendName(Backend b);

// How gtest prints a Backend parameter (in ctest's test names too).
inline void PrintTo(Backend b, std::ostream* os) { *os << BackendName(b); }

// The generator of a suite parameterised over the backends.
inline auto AllBackends() { return ::testing::Values(Backend::kInProc, Backend::kZmq); }

// The name printer for a Backend parameter: test names end in /InProc or
// /Zmq, so `ctest -R Zmq` selects the ZeroMQ instances.
struct BackendParamName {
  std::string operator()(const ::testing::TestParamInfo<Backend>& info) const { return BackendName(info.param); }
};

struct World {
  int world_size = 0;  // As asked for; ranks has fewer entries if building failed.
  std::vector<std::unique_ptr<Transport>> ranks;
  std::shared_ptr<void> keepalive;  // Backend state the transports need (the hub).
  std::vector<std::string> endpoints;  // ZeroMQ only: where each rank listens.
};

inline std::string EndpointOf(const World& w, int rank) { return w.endpoints.at(rank); }

// ZmqOptions for tests: linger 300 ms. Every wait still has its own timeout
// (the callers' exchange timeouts), so a broken test fails, never hangs.
ZmqOptions FastZmqOptions();

// One transport per entry of `cluster_of_rank`. ZeroMQ ranks listen on
// tcp://127.0.0.1 with ephemeral ports, with `zmq`; with CURVE every rank
// uses zmq.security's key pair.
// A world that could not be built has fewer ranks than world_size and a
// test failure recorded; RunRanks(world, fn) then runs nothing.
World MakeWorld(Backend backend, const std::vector<std::string>& cluster_of_rank, ZmqOptions zmq = FastZmqOptions());

// Runs fn(rank) on world_size threads and joins them.
void RunRanks(int world_size, const std::function<void(int)>& fn);

// Runs fn(rank, transport) on one thread per rank of `world`; fn may take
// the transport out of world.ranks[rank] (a Worker owns its transport).
// Records a test failure and runs nothing if the world is incomplete.
void RunRanks(World& world, const std::function<void(int, std::unique_ptr<Transport>&)>& fn);

}  // namespace frugal::comm::testing
