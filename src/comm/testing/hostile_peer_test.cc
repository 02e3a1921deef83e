// Strangers on the network (Note [Strangers] in zmq/zmq_transport.cc): a
// world of three ranks joins through a rendezvous and runs exchanges while
// another thread sends random bytes, an HTTP request and malformed ZeroMQ
// messages to every listening port: the rendezvous server's during
// registration, then every rank's. The world must finish with correct
// results, and the drops must be logged.
#include "hostile_peer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/algorithms/sparse_exchange.h"
#include "test_combine.h"
#include "test_world.h"

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;

TEST(HostilePeerTest, StrangersDoNotDisturbAWorld) {
  constexpr int kRanks = 3;
  constexpr int kIterations = 40;
  testing::LogCapture server_log, rank_log;
  ZmqOptions server_zmq = testing::FastZmqOptions();
  server_zmq.log = server_log.Sink();
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", kRanks, server_zmq);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string rendezvous = (*server)->endpoint();
  // Garbage first, so the server has it queued before any rank registers.
  testing::Bombard(rendezvous, /*seed=*/1);

  std::vector<PeerInfo> table;
  std::atomic<bool> table_ready{false};
  std::thread serve([&] {
    auto t = (*server)->Serve(milliseconds(20000));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table = *t;
    table_ready = true;
  });
  std::atomic<bool> done{false};
  std::atomic<int> rounds{0};  // Full passes over every rank's port.
  std::thread stranger([&] {
    uint64_t seed = 2;
    while (!table_ready && !done) testing::Bombard(rendezvous, seed++);
    while (!done && table_ready) {
      for (const PeerInfo& p : table) testing::Bombard(p.endpoint, seed++);
      rounds++;
    }
  });
  std::atomic<int> correct{0};
  testing::RunRanks(kRanks, [&](int r) {
    JoinOptions join;
    join.rendezvous = rendezvous;
    join.rank = r;
    join.cluster = r == 2 ? "b" : "a";
    join.timeout = milliseconds(20000);
    join.zmq = testing::FastZmqOptions();
    join.zmq.log = rank_log.Sink();
    auto transport = JoinZmqWorld(join);
    ASSERT_TRUE(transport.ok()) << transport.status().ToString();
    MessageExchangeOptions opts;
    opts.timeout = milliseconds(10000);
    SparseExchange ex(transport->get(), testing::SumU32, opts);
    for (int it = 0; it < kIterations; ++it) {
      // Half the exchanges after the stranger has been at every port once.
      for (int wait = 0; it == kIterations / 2 && rounds == 0 && wait < 1000; ++wait) {
        std::this_thread::sleep_for(milliseconds(10));
      }
      auto out = ex.Run(it, testing::ExchangeInput(it, r));
      ASSERT_TRUE(out.ok()) << "rank " << r << ": " << out.status().ToString();
      if (*out == testing::ExchangeExpected(it, kRanks)) correct++;
      std::this_thread::sleep_for(milliseconds(5));  // Let the stranger in between.
    }
  });
  done = true;
  stranger.join();
  serve.join();
  EXPECT_EQ(correct.load(), kRanks * kIterations);
  EXPECT_GT(server_log.Count("rendezvous at " + rendezvous), 0u);
  // Random bytes arrive as unversioned (ZMTP 1.0) messages, which carry no
  // peer address; the rate limit keeps the first 10 lines per rank.
  for (int r = 0; r < kRanks; ++r) EXPECT_GT(rank_log.Count("rank " + std::to_string(r) + " "), 0u);
  EXPECT_GT(rank_log.Count("dropped a message from "), 0u);
}

// The rendezvous answers malformed registrations with an error and keeps
// serving: one by one they do not count, and a real rank still gets in.
TEST(HostilePeerTest, RendezvousRejectsMalformedRegistrations) {
  testing::LogCapture log;
  ZmqOptions zmq = testing::FastZmqOptions();
  zmq.log = log.Sink();
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 1, zmq);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string ep = (*server)->endpoint();
  const std::vector<std::string> bad = {
      "", "null", "[1,2]", "{\"rank\": \"0\", \"endpoint\": \"e\", \"cluster\": \"c\"}",
      "{\"rank\": 18446744073709551615, \"endpoint\": \"e\", \"cluster\": \"c\"}",
      "{\"rank\": -2, \"endpoint\": \"e\", \"cluster\": \"c\"}",
      "{\"rank\": 0, \"endpoint\": \"\", \"cluster\": \"c\"}",
      "{\"rank\": 0, \"endpoint\": \"" + std::string(300, 'x') + "\", \"cluster\": \"c\"}",
      "{\"rank\": 0, \"endpoint\": 5, \"cluster\": \"c\"}", std::string(2 << 20, '{')};
  std::thread serve([&] {
    auto t = (*server)->Serve(milliseconds(10000));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)[0].endpoint, "tcp://127.0.0.1:7");
  });
  for (const std::string& body : bad) {
    auto answer = testing::SendRendezvousRequest(ep, body, milliseconds(2000));
    if (body.size() > (1u << 20)) {
      EXPECT_FALSE(answer.ok()) << "an oversized message must not be answered";
    } else {
      ASSERT_TRUE(answer.ok()) << body << ": " << answer.status().ToString();
      EXPECT_NE(answer->find("\"error\""), std::string::npos) << *answer;
    }
  }
  auto t = RegisterWithRendezvous(ep, PeerInfo{0, "tcp://127.0.0.1:7", "a", ""}, milliseconds(5000), zmq);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  serve.join();
  EXPECT_GE(log.Count("rejected a registration from 127.0.0.1"), 9u);
}

}  // namespace
}  // namespace frugal::comm
