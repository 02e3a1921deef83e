// SparseExchange tests, run over every backend with N ranks as threads.
#include "frugal/comm/algorithms/sparse_exchange.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "testing/test_combine.h"
#include "testing/test_world.h"

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;
using testing::Backend;
using testing::MakeWorld;
using testing::World;

Bytes Text(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string Str(const Bytes& b) { return std::string(b.begin(), b.end()); }

// Order-revealing combine: "(a,b,c)". Shows exactly which parts were
// combined in which order and nesting.
Result<Bytes> Parenthesize(std::vector<Bytes> parts) {
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + Str(parts[i]);
  return Text(out + ")");
}

using testing::SumU32;
using testing::U32s;

// Runs one exchange on every rank and returns each rank's result.
std::vector<Result<Bytes>> ExchangeAll(World& w, CombineFn combine, MessageExchangeOptions opts,
                                       const std::function<Bytes(int)>& contribution, Tag tag = 1) {
  int n = static_cast<int>(w.ranks.size());
  std::vector<Result<Bytes>> results(n, Status::Internal("not run"));
  testing::RunRanks(n, [&](int r) {
    SparseExchange ex(w.ranks[r].get(), combine, opts);
    results[r] = ex.Run(tag, contribution(r));
  });
  return results;
}

class SparseExchangeTest : public ::testing::TestWithParam<Backend> {};

TEST_P(SparseExchangeTest, FlatCombinesAllRanksInRankOrder) {
  World w = MakeWorld(GetParam(), {"x", "x", "x", "x"});
  auto results = ExchangeAll(w, Parenthesize, {}, [](int r) { return Text(std::string(1, 'a' + r)); });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
    EXPECT_EQ(Str(*results[r]), "(a,b,c,d)") << "rank " << r;
  }
  // Allgather: each rank sends its 1-byte message to 3 peers.
  EXPECT_EQ(w.ranks[2]->stats().intra_cluster.bytes_sent, 3u);
  EXPECT_EQ(w.ranks[2]->stats().inter_cluster.bytes_sent, 0u);
}

TEST_P(SparseExchangeTest, HierarchicalNestsClustersInClusterIdOrder) {
  // Cluster ids: p=0 {0,2,5}, q=1 {1}, r=2 {3,4}.
  World w = MakeWorld(GetParam(), {"p", "q", "p", "r", "r", "p"});
  auto results = ExchangeAll(w, Parenthesize, {}, [](int r) { return Text(std::string(1, 'a' + r)); });
  for (int r = 0; r < 6; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
    EXPECT_EQ(Str(*results[r]), "((a,c,f),b,(d,e))") << "rank " << r;
  }
}

// RunUncombined hands back what Run would combine last: every rank's part in
// rank order (flat), or the one result (hierarchical).
TEST_P(SparseExchangeTest, UncombinedReturnsThePartsOfTheFinalCombine) {
  for (const std::vector<std::string>& clusters :
       {std::vector<std::string>{"x", "x", "x"}, std::vector<std::string>{"p", "q", "p", "q"}}) {
    World w = MakeWorld(GetParam(), clusters);
    const int n = static_cast<int>(clusters.size());
    std::vector<Result<std::vector<Bytes>>> results(n, Status::Internal("not run"));
    testing::RunRanks(n, [&](int r) {
      SparseExchange ex(w.ranks[r].get(), Parenthesize, {});
      results[r] = ex.RunUncombined(7, Text(std::string(1, 'a' + r)));
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
      std::string got;
      for (const Bytes& part : *results[r]) got += Str(part) + ";";
      EXPECT_EQ(got, n == 3 ? "a;b;c;" : "((a,c),(b,d));") << "rank " << r;
    }
  }
}

TEST_P(SparseExchangeTest, ForcedHierarchicalOnOneClusterGathersAtRankZero) {
  World w = MakeWorld(GetParam(), {"x", "x", "x"});
  MessageExchangeOptions opts;
  opts.algorithm = MessageAlgorithm::kHierarchical;
  auto results = ExchangeAll(w, Parenthesize, opts, [](int r) { return Text(std::string(1, 'a' + r)); });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
    EXPECT_EQ(Str(*results[r]), "(a,b,c)");
  }
  // Members send 1 byte to the leader and get the 7-byte result back.
  EXPECT_EQ(w.ranks[1]->stats().per_peer[0].bytes_sent, 1u);
  EXPECT_EQ(w.ranks[1]->stats().per_peer[0].bytes_received, 7u);
  EXPECT_EQ(w.ranks[1]->stats().per_peer[2].bytes_sent, 0u);
}

TEST_P(SparseExchangeTest, ForcedFlatOnTwoClustersStillAgrees) {
  World w = MakeWorld(GetParam(), {"p", "q", "p", "q"});
  MessageExchangeOptions opts;
  opts.algorithm = MessageAlgorithm::kFlat;
  auto results = ExchangeAll(w, Parenthesize, opts, [](int r) { return Text(std::string(1, 'a' + r)); });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
    EXPECT_EQ(Str(*results[r]), "(a,b,c,d)");
  }
}

// The acceptance test for the byte counters: 2 clusters x 2 ranks, messages
// of M bytes, combine keeps the size. Design: exactly one M-byte message per
// ordered cluster pair crosses the slow link, so 2*M bytes in total, M sent
// and M received by each leader, nothing by the members.
TEST_P(SparseExchangeTest, InterClusterTrafficIsOneMessagePerClusterPair) {
  constexpr size_t kWords = 1000;
  constexpr uint64_t kM = kWords * 4;
  World w = MakeWorld(GetParam(), {"onprem", "onprem", "cloud", "cloud"});
  auto results = ExchangeAll(w, SumU32, {}, [](int r) { return U32s(std::vector<uint32_t>(kWords, 1u << r)); });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
    EXPECT_EQ(*results[r], U32s(std::vector<uint32_t>(kWords, 15u)));
  }
  LinkCounters inter_total, intra_total;
  for (auto& t : w.ranks) {
    inter_total += t->stats().inter_cluster;
    intra_total += t->stats().intra_cluster;
  }
  EXPECT_EQ(inter_total.bytes_sent, 2 * kM);
  EXPECT_EQ(inter_total.bytes_received, 2 * kM);
  EXPECT_EQ(inter_total.messages_sent, 2u);
  // Leaders (ranks 0 and 2) carry all of it; members none.
  for (int leader : {0, 2}) {
    TransportStats s = w.ranks[leader]->stats();
    EXPECT_EQ(s.inter_cluster.bytes_sent, kM) << "leader " << leader;
    EXPECT_EQ(s.inter_cluster.bytes_received, kM) << "leader " << leader;
    EXPECT_EQ(s.per_peer[2 - leader].bytes_sent, kM);
  }
  for (int member : {1, 3}) EXPECT_EQ(w.ranks[member]->stats().inter_cluster.bytes_sent, 0u);
  // Intra: each member sends M to its leader and gets M back.
  EXPECT_EQ(intra_total.bytes_sent, 4 * kM);
  EXPECT_EQ(intra_total.bytes_received, 4 * kM);
}

TEST_P(SparseExchangeTest, ConcurrentExchangesWithDifferentTagsDoNotMix) {
  constexpr int kBuckets = 6;
  World w = MakeWorld(GetParam(), {"p", "p", "q", "q"});
  std::mutex mu;
  std::vector<std::string> failures;
  testing::RunRanks(4, [&](int r) {
    SparseExchange ex(w.ranks[r].get(), Parenthesize);
    std::vector<std::thread> buckets;
    for (int b = 0; b < kBuckets; ++b) {
      buckets.emplace_back([&, b] {
        auto out = ex.Run(100 + b, Text(std::to_string(b) + std::string(1, 'a' + r)));
        std::string want = "((" + std::to_string(b) + "a," + std::to_string(b) + "b),(" + std::to_string(b) +
                           "c," + std::to_string(b) + "d))";
        if (!out.ok() || Str(*out) != want) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("rank " + std::to_string(r) + " bucket " + std::to_string(b) + ": " +
                             (out.ok() ? Str(*out) : out.status().ToString()));
        }
      });
    }
    for (auto& t : buckets) t.join();
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST_P(SparseExchangeTest, ManyIterationsReuseNothingAndStayConsistent) {
  World w = MakeWorld(GetParam(), {"p", "q", "q"});
  testing::RunRanks(3, [&](int r) {
    SparseExchange ex(w.ranks[r].get(), SumU32);
    for (uint32_t it = 0; it < 50; ++it) {
      auto out = ex.Run(it, U32s({it, static_cast<uint32_t>(r)}));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(*out, U32s({3 * it, 3u}));
    }
  });
}

TEST_P(SparseExchangeTest, CombineErrorIsReported) {
  World w = MakeWorld(GetParam(), {"p", "p"});
  MessageExchangeOptions opts;
  opts.timeout = milliseconds(200);
  auto results = ExchangeAll(w, SumU32, opts, [](int r) { return Bytes(r == 0 ? 4 : 8); });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_NE(results[r].status().message().find("size mismatch"), std::string::npos)
        << results[r].status().ToString();
  }
}

// The sharded exchange: rank j receives every rank's shard j in rank order
// and every rank gets the owners' messages in rank order; a shard marked
// inactive sends nothing and comes back empty. It is no message algorithm:
// RunSharded gives the same on an exchange built with any of them.
TEST_P(SparseExchangeTest, ShardedGivesEveryRankTheOwnersMessagesInRankOrder) {
  for (MessageAlgorithm algorithm : {MessageAlgorithm::kAuto, MessageAlgorithm::kFlat, MessageAlgorithm::kHierarchical}) {
    World w = MakeWorld(GetParam(), {"p", "p", "q"});
    MessageExchangeOptions opts;
    opts.algorithm = algorithm;
    std::vector<Result<std::vector<Bytes>>> results(3, Status::Internal("not run"));
    const std::vector<bool> active = {true, false, true};
    testing::RunRanks(3, [&](int r) {
      SparseExchange ex(w.ranks[r].get(), Parenthesize, opts);
      std::vector<Bytes> shards;
      for (int j = 0; j < 3; ++j) shards.push_back(Text(std::string(1, 'a' + r) + std::to_string(j)));
      results[r] = ex.RunSharded(4, 5, std::move(shards), active, Parenthesize);
    });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
      ASSERT_EQ(results[r]->size(), 3u);
      EXPECT_EQ(Str((*results[r])[0]), "(a0,b0,c0)") << "rank " << r;
      EXPECT_EQ(Str((*results[r])[1]), "") << "rank " << r;
      EXPECT_EQ(Str((*results[r])[2]), "(a2,b2,c2)") << "rank " << r;
    }
  }
}

// Every exchange a run can choose is either a message algorithm, which Run
// runs, or the sharded one, which is none (so Run cannot be asked for it):
// there is no value that comm refuses to run.
TEST_P(SparseExchangeTest, EveryChosenExchangeIsOneThatRuns) {
  EXPECT_FALSE(MessageAlgorithmOf(ExchangeAlgorithm::kSharded).has_value());
  const std::pair<ExchangeAlgorithm, MessageAlgorithm> messages[] = {
      {ExchangeAlgorithm::kAuto, MessageAlgorithm::kAuto},
      {ExchangeAlgorithm::kFlat, MessageAlgorithm::kFlat},
      {ExchangeAlgorithm::kHierarchical, MessageAlgorithm::kHierarchical}};
  for (const auto& [chosen, message] : messages) {
    ASSERT_EQ(MessageAlgorithmOf(chosen), message);
    World w = MakeWorld(GetParam(), {"p", "p", "q"});
    MessageExchangeOptions opts;
    opts.algorithm = message;
    auto results = ExchangeAll(w, SumU32, opts, [](int r) { return U32s({static_cast<uint32_t>(r + 1)}); });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
      EXPECT_EQ(*results[r], U32s({6})) << "rank " << r;
    }
  }
}

// A rank that never contributes must turn into an error, not a hang, on
// every other rank.
TEST_P(SparseExchangeTest, SilentRankGivesTimeoutOnEveryOtherRank) {
  for (auto clusters : {std::vector<std::string>{"p", "p", "p"}, std::vector<std::string>{"p", "p", "q", "q"}}) {
    World w = MakeWorld(GetParam(), clusters);
    int n = static_cast<int>(clusters.size());
    int silent = n - 1;
    MessageExchangeOptions opts;
    opts.timeout = milliseconds(200);
    std::vector<Result<Bytes>> results(n, Status::Internal("not run"));
    testing::RunRanks(n, [&](int r) {
      if (r == silent) return;
      SparseExchange ex(w.ranks[r].get(), Parenthesize, opts);
      results[r] = ex.Run(9, Text("x"));
    });
    for (int r = 0; r < n; ++r) {
      if (r == silent) continue;
      ASSERT_FALSE(results[r].ok()) << "rank " << r;
      EXPECT_EQ(results[r].status().code(), Status::Code::kTimeout) << results[r].status().ToString();
      EXPECT_NE(results[r].status().message().find("exchange tag 9"), std::string::npos);
    }
  }
}

TEST_P(SparseExchangeTest, ClosedRankGivesUnavailableOrTimeout) {
  World w = MakeWorld(GetParam(), {"p", "p", "q", "q"});
  w.ranks[3].reset();
  MessageExchangeOptions opts;
  opts.timeout = milliseconds(300);
  std::vector<Result<Bytes>> results(3, Status::Internal("not run"));
  testing::RunRanks(3, [&](int r) {
    SparseExchange ex(w.ranks[r].get(), Parenthesize, opts);
    results[r] = ex.Run(9, Text("x"));
  });
  // Rank 2 leads cluster q and learns directly that rank 3 is gone; the
  // others notice through the missing messages.
  EXPECT_EQ(results[2].status().code(), Status::Code::kUnavailable) << results[2].status().ToString();
  EXPECT_NE(results[2].status().message().find("rank 3 (cluster q)"), std::string::npos);
  for (int r : {0, 1}) {
    ASSERT_FALSE(results[r].ok());
    EXPECT_EQ(results[r].status().code(), Status::Code::kTimeout) << results[r].status().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SparseExchangeTest, ::testing::Values(Backend::kInProc, Backend::kZmq),
                         [](const auto& info) { return testing::BackendName(info.param); });

}  // namespace
}  // namespace frugal::comm
