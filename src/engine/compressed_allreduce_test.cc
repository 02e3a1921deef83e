#include "frugal/engine/compressed_allreduce.h"

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "testing/test_world.h"

namespace frugal::engine {
namespace {

using comm::testing::Backend;
using comm::testing::MakeWorld;
using comm::testing::World;

float Grad(int rank, int call, size_t i) {
  return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank) * 1.3f + static_cast<float>(call));
}

// Runs `calls` rounds over `backend`; round c hands every rank
// bucket 0 (n values) and bucket 1 (n/3 + 5 values) with Grad(rank, c, i)
// (or zeros when c >= nonzero_calls). Returns out[rank][bucket] = the sum of
// the outputs over all rounds.
struct Outcome {
  std::vector<std::vector<std::vector<float>>> sums;  // [rank][bucket][i]
  std::vector<Status> statuses;
  std::vector<uint64_t> bytes_sent;        // per rank, over all calls
  std::vector<uint64_t> inter_bytes_sent;  // the part that crossed clusters
  std::vector<CompressedAllReduceStats> stats;
};

// Called on each rank's object before each call (rank, call).
using BeforeCall = std::function<void(CompressedAllReduce&, int, int)>;

Outcome RunOn(Backend backend, const std::vector<std::string>& clusters, CompressedAllReduceOptions options, size_t n,
              int calls, int nonzero_calls, const BeforeCall& before_call) {
  const int world = static_cast<int>(clusters.size());
  World w = MakeWorld(backend, clusters);
  const std::vector<size_t> sizes = {n, n / 3 + 5};
  Outcome out;
  out.sums.assign(world, {std::vector<float>(sizes[0], 0.0f), std::vector<float>(sizes[1], 0.0f)});
  out.statuses.assign(world, Status::Internal("not run"));
  out.bytes_sent.resize(world);
  out.inter_bytes_sent.resize(world);
  out.stats.resize(world);
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    auto ar = CompressedAllReduce::Create(options, transport.get());
    if (!ar.ok()) {
      out.statuses[r] = ar.status();
      return;
    }
    for (int c = 0; c < calls; ++c) {
      if (before_call) before_call(**ar, r, c);
      for (size_t b = 0; b < sizes.size(); ++b) {
        std::vector<float> data(sizes[b]);
        for (size_t i = 0; i < data.size(); ++i) data[i] = c < nonzero_calls ? Grad(r, c, i + 1000 * b) : 0.0f;
        Status s = (*ar)->Run(b, Span<float>(data.data(), data.size()));
        if (!s.ok()) {
          out.statuses[r] = s;
          return;
        }
        for (size_t i = 0; i < data.size(); ++i) out.sums[r][b][i] += data[i];
      }
    }
    out.stats[r] = (*ar)->stats();
    out.statuses[r] = Status::Ok();
    const comm::TransportStats stats = transport->stats();
    out.bytes_sent[r] = stats.intra_cluster.bytes_sent + stats.inter_cluster.bytes_sent;
    out.inter_bytes_sent[r] = stats.inter_cluster.bytes_sent;
  });
  return out;
}

// The multi-rank tests, over each backend (comm/testing/test_world.h).
class CompressedAllReduceTest : public ::testing::TestWithParam<Backend> {
 protected:
  // RunOn this instance's backend. Over ZeroMQ every rank's outputs and
  // byte counts must be the in-process run's, bit for bit.
  Outcome RunWorld(const std::vector<std::string>& clusters, const CompressedAllReduceOptions& options, size_t n,
                   int calls, int nonzero_calls, const BeforeCall& before_call = nullptr) {
    Outcome out = RunOn(GetParam(), clusters, options, n, calls, nonzero_calls, before_call);
    if (GetParam() != Backend::kInProc) {
      Outcome in_proc = RunOn(Backend::kInProc, clusters, options, n, calls, nonzero_calls, before_call);
      EXPECT_EQ(out.sums, in_proc.sums) << "over " << BackendName(GetParam());
      EXPECT_EQ(out.bytes_sent, in_proc.bytes_sent) << "over " << BackendName(GetParam());
    }
    return out;
  }
};

float ExactMeanSum(int world, int nonzero_calls, size_t b, size_t i) {
  double s = 0;
  for (int c = 0; c < nonzero_calls; ++c) {
    for (int r = 0; r < world; ++r) s += Grad(r, c, i + 1000 * b);
  }
  return static_cast<float>(s / world);
}

// Block-sparsified fp32 values with block ids, seed 1.
CompressedAllReduceOptions Fp32(double density) {
  CompressedAllReduceOptions o;
  o.sparsifier = compress::SparsifierKind::kBlock;
  o.density = density;
  o.wire = {compress::ValueEncoding::kFp32, compress::IndexEncoding::kBlockId};
  o.exchange.timeout = std::chrono::milliseconds(10000);
  o.seed = 1;
  return o;
}

void ExpectMean(const Outcome& out, int world, int nonzero_calls, float tol) {
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(out.statuses[r].ok()) << out.statuses[r].ToString();
    for (size_t b = 0; b < out.sums[r].size(); ++b) {
      for (size_t i = 0; i < out.sums[r][b].size(); ++i) {
        ASSERT_NEAR(out.sums[r][b][i], ExactMeanSum(world, nonzero_calls, b, i), tol) << "rank " << r << " b " << b;
        // Every rank decodes the same bytes: bit-identical results.
        ASSERT_EQ(out.sums[r][b][i], out.sums[0][b][i]);
      }
    }
  }
}

TEST_P(CompressedAllReduceTest, DensityOneIsTheMean) {
  ExpectMean(RunWorld({"local", "local", "local"}, Fp32(1.0), 200, 3, 3), 3, 3, 1e-5f);
}

TEST_P(CompressedAllReduceTest, HierarchicalExchangeGivesTheSameMean) {
  ExpectMean(RunWorld({"a", "a", "b", "b"}, Fp32(1.0), 200, 2, 2), 4, 2, 1e-5f);
}

// Note [Leader residual]: a leader compresses its cluster's sum with a
// residual of its own, so what it leaves out at density 0.25, and int4's
// rounding of the sum, go out in later calls: after enough calls of zero
// gradients every rank holds the mean. Clusters of two and of one.
TEST_P(CompressedAllReduceTest, LeadersFeedBackWhatTheirClusterMessagesLeaveOut) {
  for (const std::vector<std::string>& clusters :
       {std::vector<std::string>{"a", "a", "b", "b"}, std::vector<std::string>{"a", "a", "a", "b"}}) {
    ExpectMean(RunWorld(clusters, Fp32(0.25), 256, 16, 1), 4, 1, 1e-5f);
    CompressedAllReduceOptions int4 = Fp32(1.0);
    int4.wire.values = compress::ValueEncoding::kInt4;
    ExpectMean(RunWorld(clusters, int4, 256, 16, 1), 4, 1, 1e-4f);
  }
}

// The cluster message keeps the contributions' wire format: at density 1 in
// int4 a leader sends about 0.504 bytes per value across clusters, where a
// merge re-encoded as int8 would send 1.004.
TEST_P(CompressedAllReduceTest, LeadersSendInt4AcrossClusters) {
  CompressedAllReduceOptions int4 = Fp32(1.0);
  int4.wire.values = compress::ValueEncoding::kInt4;
  const size_t n = 4000;
  const Outcome out = RunWorld({"a", "a", "b", "b"}, int4, n, 2, 2);
  const double values = 2.0 * static_cast<double>(n + n / 3 + 5);  // two calls of both buckets
  for (int leader : {0, 2}) {
    ASSERT_TRUE(out.statuses[leader].ok()) << out.statuses[leader].ToString();
    EXPECT_LT(static_cast<double>(out.inter_bytes_sent[leader]), 0.55 * values) << "rank " << leader;
    EXPECT_GT(static_cast<double>(out.inter_bytes_sent[leader]), 0.50 * values) << "rank " << leader;
  }
}

// Error feedback: what is not sent stays in the residual and goes out later,
// so after enough rounds of zero gradients the outputs add up to the mean.
TEST_P(CompressedAllReduceTest, ErrorFeedbackEventuallySendsEverything) {
  ExpectMean(RunWorld({"local", "local"}, Fp32(0.25), 256, 12, 1), 2, 1, 1e-5f);
}

CompressedAllReduceOptions Sharded(CompressedAllReduceOptions o) {
  o.exchange.algorithm = comm::ExchangeAlgorithm::kSharded;
  return o;
}

// Note [Sharded exchange]: at density 1 in fp32 the owners' means are the flat
// exchange's sums, scaled the same way, bit for bit; the bucket sizes (200
// and 71 values over 4 ranks; 20 and 11, where some shards are empty) cover
// uneven and empty shards.
TEST_P(CompressedAllReduceTest, ShardedAtDensityOneEqualsTheFlatExchangeBitForBit) {
  const std::vector<std::string> four = {"local", "local", "local", "local"};
  for (size_t n : {size_t{200}, size_t{20}}) {
    const Outcome flat = RunWorld(four, Fp32(1.0), n, 3, 3);
    const Outcome sharded = RunWorld(four, Sharded(Fp32(1.0)), n, 3, 3);
    ExpectMean(sharded, 4, 3, 1e-5f);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(sharded.sums[r], flat.sums[r]) << "rank " << r << ", n " << n;
  }
}

// A rank sends its shards once and its mean to every peer: 2 (N-1)/N of a
// contribution instead of the flat all-gather's N-1 copies (at 4 ranks, half
// the bytes, plus headers).
TEST_P(CompressedAllReduceTest, ShardedSendsAboutHalfTheFlatBytesAtFourRanks) {
  const std::vector<std::string> four = {"local", "local", "local", "local"};
  const Outcome flat = RunWorld(four, Fp32(1.0), 4000, 2, 2);
  const Outcome sharded = RunWorld(four, Sharded(Fp32(1.0)), 4000, 2, 2);
  for (int r = 0; r < 4; ++r) {
    EXPECT_LT(sharded.bytes_sent[r], flat.bytes_sent[r] * 0.52) << "rank " << r;
    EXPECT_GT(sharded.bytes_sent[r], flat.bytes_sent[r] * 0.48) << "rank " << r;
  }
}

// Both stages feed back what they do not send: the senders' unsent shares and
// the owners' unsent means go out in later calls, and int4's rounding too.
TEST_P(CompressedAllReduceTest, ShardedErrorFeedbackEventuallySendsEverything) {
  const std::vector<std::string> four = {"local", "local", "local", "local"};
  ExpectMean(RunWorld(four, Sharded(Fp32(0.25)), 256, 16, 1), 4, 1, 1e-5f);
  CompressedAllReduceOptions int4 = Sharded(Fp32(1.0));
  int4.wire.values = compress::ValueEncoding::kInt4;
  ExpectMean(RunWorld(four, int4, 256, 16, 1), 4, 1, 1e-4f);
}

// Deflate is lossless and flagged per message: ranks that switch it on and
// off alone, call by call, get the values of ranks that always deflate, bit
// for bit, and send more bytes; raw_bytes counts the bytes without deflate.
TEST_P(CompressedAllReduceTest, RanksSwitchDeflateAloneWithoutChangingAValue) {
  const std::vector<std::string> four = {"local", "local", "local", "local"};
  CompressedAllReduceOptions o = Sharded(Fp32(1.0));
  o.wire.values = compress::ValueEncoding::kInt4;
  o.wire.deflate = true;
  const Outcome always = RunWorld(four, o, 4000, 6, 2);
  const Outcome mixed = RunWorld(four, o, 4000, 6, 2, [](CompressedAllReduce& ar, int r, int c) {
    ar.SetDeflate((r + c) % 2 == 0);
    EXPECT_EQ(ar.deflating(), (r + c) % 2 == 0);
  });
  const Outcome never = RunWorld(four, o, 4000, 6, 2, [](CompressedAllReduce& ar, int, int) { ar.SetDeflate(false); });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(mixed.statuses[r].ok()) << mixed.statuses[r].ToString();
    EXPECT_EQ(mixed.sums[r], always.sums[r]) << "rank " << r;
    EXPECT_EQ(never.sums[r], always.sums[r]) << "rank " << r;
    EXPECT_LT(always.stats[r].sent_bytes, always.stats[r].raw_bytes) << "rank " << r;
    EXPECT_LT(always.bytes_sent[r], mixed.bytes_sent[r]) << "rank " << r;
    EXPECT_LT(mixed.bytes_sent[r], never.bytes_sent[r]) << "rank " << r;
    EXPECT_EQ(never.stats[r].sent_bytes, never.stats[r].raw_bytes) << "rank " << r;
    EXPECT_EQ(never.stats[r].raw_bytes, always.stats[r].raw_bytes) << "rank " << r;
  }
}

// Two objects on one transport (two DDP models) keep their messages apart.
TEST_P(CompressedAllReduceTest, InstancesShareATransport) {
  World w = MakeWorld(GetParam(), {"local", "local"});
  std::vector<std::vector<float>> got(2);
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    CompressedAllReduceOptions a = Fp32(1.0), b = Fp32(1.0);
    b.instance = 1;
    auto x = CompressedAllReduce::Create(a, transport.get());
    auto y = CompressedAllReduce::Create(b, transport.get());
    ASSERT_TRUE(x.ok() && y.ok());
    // Rank 0 runs x then y, rank 1 y then x: with one tag space they would cross.
    std::vector<float> dx(16, 1.0f + r), dy(16, 10.0f + r);
    if (r == 0) {
      std::thread other([&] { ASSERT_TRUE((*y)->Run(0, Span<float>(dy.data(), dy.size())).ok()); });
      ASSERT_TRUE((*x)->Run(0, Span<float>(dx.data(), dx.size())).ok());
      other.join();
    } else {
      ASSERT_TRUE((*y)->Run(0, Span<float>(dy.data(), dy.size())).ok());
      ASSERT_TRUE((*x)->Run(0, Span<float>(dx.data(), dx.size())).ok());
    }
    got[r] = {dx[0], dy[0]};
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].size(), 2u) << "rank " << r;
    EXPECT_EQ(got[r][0], 1.5f);
    EXPECT_EQ(got[r][1], 10.5f);
  }
}

TEST(CompressedAllReduceOneRankTest, SparseCallSendsAboutTheDensity) {
  World w = MakeWorld(Backend::kInProc, {"local"});
  ASSERT_EQ(w.ranks.size(), 1u);
  comm::Transport* transport = w.ranks[0].get();
  auto ar = CompressedAllReduce::Create(Fp32(0.1), transport);
  ASSERT_TRUE(ar.ok());
  std::vector<float> data(1600);
  for (size_t i = 0; i < data.size(); ++i) data[i] = Grad(0, 0, i);
  ASSERT_TRUE((*ar)->Run(7, Span<float>(data.data(), data.size())).ok());
  size_t nonzero = 0;
  for (float v : data) nonzero += v != 0.0f;
  EXPECT_EQ(nonzero, 160u);
  // A new size under the same index (DDP's bucket rebuild) starts afresh.
  std::vector<float> other(48, 1.0f);
  ASSERT_TRUE((*ar)->Run(7, Span<float>(other.data(), other.size())).ok());
  EXPECT_EQ((*ar)->stats().calls, 2u);
}

TEST(CompressedAllReduceOneRankTest, RejectsBadOptions) {
  World w = MakeWorld(Backend::kInProc, {"local"});
  ASSERT_EQ(w.ranks.size(), 1u);
  comm::Transport* transport = w.ranks[0].get();
  CompressedAllReduceOptions o;  // value-initialised: density 0
  auto ar = CompressedAllReduce::Create(o, transport);
  ASSERT_FALSE(ar.ok());
  EXPECT_NE(ar.status().message().find("density must be in (0, 1]"), std::string::npos);
  o = Fp32(0.1);
  o.sparsifier = compress::SparsifierKind::kTopk;  // block ids need whole blocks
  ar = CompressedAllReduce::Create(o, transport);
  ASSERT_FALSE(ar.ok());
  EXPECT_NE(ar.status().message().find("need the block sparsifier, not 'topk'"), std::string::npos);
  o.wire.indices = compress::IndexEncoding::kDeltaVarint;
  EXPECT_TRUE(CompressedAllReduce::Create(o, transport).ok());
}

TEST(CompressedAllReduceOneRankTest, NonFiniteGradientIsAnErrorAndLeavesDataAlone) {
  World w = MakeWorld(Backend::kInProc, {"local"});
  ASSERT_EQ(w.ranks.size(), 1u);
  comm::Transport* transport = w.ranks[0].get();
  auto ar = CompressedAllReduce::Create(Fp32(1.0), transport);
  ASSERT_TRUE(ar.ok());
  std::vector<float> data(32, 1.0f);
  data[5] = std::nanf("");
  Status s = (*ar)->Run(0, Span<float>(data.data(), data.size()));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("bucket 0"), std::string::npos);
  EXPECT_EQ(data[0], 1.0f);
}

TEST_P(CompressedAllReduceTest, SilentPeerTimesOut) {
  World w = MakeWorld(GetParam(), {"local", "local"});  // rank 1 never calls Run
  ASSERT_EQ(w.ranks.size(), 2u);
  CompressedAllReduceOptions o = Fp32(1.0);
  o.exchange.timeout = std::chrono::milliseconds(200);
  auto ar = CompressedAllReduce::Create(o, w.ranks[0].get());
  ASSERT_TRUE(ar.ok());
  std::vector<float> data(32, 1.0f);
  Status s = (*ar)->Run(0, Span<float>(data.data(), data.size()));
  EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.ToString();
}

}  // namespace
}  // namespace frugal::engine

namespace frugal::engine {
namespace {

// The residuals and sparsifier states survive SaveState/LoadState: a copy
// restored from the bytes continues exactly as the original (one rank, so
// the exchange passes the contribution through).
TEST(CompressedAllReduceOneRankTest, StateRoundTripsThroughBytes) {
  World w = MakeWorld(Backend::kInProc, {"local"});
  ASSERT_EQ(w.ranks.size(), 1u);
  comm::Transport* t0 = w.ranks[0].get();
  CompressedAllReduceOptions o = Fp32(0.1);
  o.sparsifier = compress::SparsifierKind::kTopk;
  o.wire = {compress::ValueEncoding::kFp32, compress::IndexEncoding::kDeltaVarint};
  auto run = [](CompressedAllReduce& ar, int call) {
    std::vector<float> data(200);
    for (size_t i = 0; i < data.size(); ++i) data[i] = Grad(0, call, i);
    EXPECT_TRUE(ar.Run(3, Span<float>(data.data(), data.size())).ok());
    return data;
  };
  auto original = CompressedAllReduce::Create(o, t0);
  ASSERT_TRUE(original.ok());
  for (int c = 0; c < 3; ++c) run(**original, c);
  const std::vector<uint8_t> state = (*original)->SaveState();
  EXPECT_EQ((*original)->StateBytes(), state.size());
  auto restored = CompressedAllReduce::Create(o, t0);
  auto fresh = CompressedAllReduce::Create(o, t0);
  ASSERT_TRUE(restored.ok() && fresh.ok());
  ASSERT_TRUE((*restored)->LoadState(state).ok());
  const std::vector<float> want = run(**original, 3);
  EXPECT_EQ(run(**restored, 3), want);
  EXPECT_NE(run(**fresh, 3), want);  // the residual matters
  std::vector<uint8_t> cut(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(state.size() / 2));
  EXPECT_EQ((*fresh)->LoadState(cut).code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace frugal::engine

namespace frugal::engine {
namespace {

// On `clusters`, objects restored from the saved bytes continue exactly as
// the originals, and fresh objects do not.
void ExpectStateRoundTrips(Backend backend, const std::vector<std::string>& clusters, CompressedAllReduceOptions o) {
  const int world = static_cast<int>(clusters.size());
  World w = MakeWorld(backend, clusters);
  std::vector<std::vector<float>> want(world), restored(world), fresh(world);
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    auto run = [&](CompressedAllReduce& ar, int call) {
      std::vector<float> data(300);
      for (size_t i = 0; i < data.size(); ++i) data[i] = Grad(r, call, i);
      EXPECT_TRUE(ar.Run(3, Span<float>(data.data(), data.size())).ok());
      return data;
    };
    auto make = [&](uint32_t instance) {
      CompressedAllReduceOptions mine = o;
      mine.instance = instance;
      auto ar = CompressedAllReduce::Create(mine, transport.get());
      EXPECT_TRUE(ar.ok());
      return std::move(ar).value();
    };
    auto original = make(0);
    for (int c = 0; c < 3; ++c) run(*original, c);
    const std::vector<uint8_t> state = original->SaveState();
    EXPECT_EQ(original->StateBytes(), state.size());  // what a section built in place reserves
    auto copy = make(1);
    ASSERT_TRUE(copy->LoadState(state).ok());
    auto empty = make(2);
    want[r] = run(*original, 3);
    restored[r] = run(*copy, 3);
    fresh[r] = run(*empty, 3);
    std::vector<uint8_t> cut(state.begin(), state.end() - 3);
    EXPECT_EQ(empty->LoadState(cut).code(), Status::Code::kCorruption);
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_FALSE(want[r].empty()) << "rank " << r;
    EXPECT_EQ(restored[r], want[r]) << "rank " << r;
    EXPECT_NE(fresh[r], want[r]) << "rank " << r;
  }
}

CompressedAllReduceOptions SparseInt4(double density) {
  CompressedAllReduceOptions o = Fp32(density);
  o.sparsifier = compress::SparsifierKind::kTopk;
  o.wire = {compress::ValueEncoding::kInt4, compress::IndexEncoding::kDeltaVarint};
  return o;
}

// The sharded exchange's state (every shard's residual and the owner's).
TEST_P(CompressedAllReduceTest, ShardedStateRoundTripsThroughBytes) {
  ExpectStateRoundTrips(GetParam(), {"local", "local"}, Sharded(SparseInt4(0.2)));
}

// The leaders' residuals (Note [Leader residual]) are part of the state:
// without them the leaders' next cluster messages, and so every rank's
// result, would differ.
TEST_P(CompressedAllReduceTest, LeaderStateRoundTripsThroughBytes) {
  ExpectStateRoundTrips(GetParam(), {"a", "a", "b", "b"}, SparseInt4(0.2));
}

INSTANTIATE_TEST_SUITE_P(Backends, CompressedAllReduceTest, comm::testing::AllBackends(),
                         comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::engine
