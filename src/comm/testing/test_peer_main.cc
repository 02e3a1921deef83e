// frugal_comm_test_peer: one rank of a ZeroMQ world in its own process, for
// process_test.cc. Joins through the rendezvous, runs --iterations
// exchanges of a u32 sum and checks every result. With --die-before K it
// kills itself with SIGKILL (no goodbye, like a crashed worker) just before
// exchange K.
//
// Exit codes: 0 all results correct, 1 an exchange failed (message on
// stderr), 2 a wrong result, 64 bad arguments.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/algorithms/sparse_exchange.h"
#include "test_combine.h"

int main(int argc, char** argv) {
  using namespace frugal::comm;  // NOLINT: a test program's main.
  JoinOptions join;
  int iterations = 1;
  int die_before = -1;
  int timeout_ms = 1000;
  int grace_ms = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--rendezvous") join.rendezvous = value;
    else if (flag == "--rank") join.rank = std::atoi(value);
    else if (flag == "--cluster") join.cluster = value;
    else if (flag == "--iterations") iterations = std::atoi(value);
    else if (flag == "--die-before") die_before = std::atoi(value);
    else if (flag == "--timeout-ms") timeout_ms = std::atoi(value);
    else if (flag == "--grace-ms") grace_ms = std::atoi(value);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 64;
    }
  }
  join.timeout = std::chrono::milliseconds(10000);
  join.zmq.linger = std::chrono::milliseconds(500);
  join.zmq.peer_lost_grace = std::chrono::milliseconds(grace_ms);
  auto transport = JoinZmqWorld(join);
  if (!transport.ok()) {
    std::fprintf(stderr, "join: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  MessageExchangeOptions opts;
  opts.timeout = std::chrono::milliseconds(timeout_ms);
  SparseExchange exchange(transport->get(), testing::SumU32, opts);
  const int n = (*transport)->world_size();
  for (int it = 0; it < iterations; ++it) {
    if (it == die_before) std::raise(SIGKILL);
    auto out = exchange.Run(it, testing::ExchangeInput(it, (*transport)->rank()));
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      return 1;
    }
    if (*out != testing::ExchangeExpected(it, n)) {
      std::fprintf(stderr, "rank %d: wrong result in iteration %d\n", (*transport)->rank(), it);
      return 2;
    }
  }
  return 0;
}
