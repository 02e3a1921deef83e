#include "frugal/collective/compressed_collective.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "testing/test_world.h"

namespace frugal::collective {
namespace {

using comm::testing::Backend;

float Grad(int rank, int call, size_t i) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(rank) + static_cast<float>(call));
}

CollectiveOptions Options(comm::ExchangeAlgorithm algorithm, compress::ValueEncoding values, LeaderMode leader) {
  CollectiveOptions o;
  o.sparsifier = compress::SparsifierKind::kTopk;
  o.wire = {values, compress::IndexEncoding::kDeltaVarint};
  o.exchange.algorithm = algorithm;
  o.exchange.timeout = std::chrono::milliseconds(10000);
  o.leader = leader;
  return o;
}

struct World {
  std::vector<std::vector<float>> sums;  // [rank]: the sum of the means over the calls
  std::vector<std::vector<compress::SparseVector>> sparse;  // [rank][call]: Reduce's result
  std::vector<Status> statuses;
  std::vector<uint64_t> sent_bytes;
};

// `calls` calls of ReduceDense (dense) or Reduce (sparse) of an n-value
// buffer on every rank of `clusters`; the gradients of calls from
// nonzero_calls on are zero.
World RunOn(Backend backend, const std::vector<std::string>& clusters, const CollectiveOptions& options, size_t n,
            int calls, double density, bool dense, int nonzero_calls) {
  const int world = static_cast<int>(clusters.size());
  comm::testing::World w = comm::testing::MakeWorld(backend, clusters);
  World out;
  out.sums.assign(world, std::vector<float>(n, 0.0f));
  out.sparse.resize(world);
  out.statuses.assign(world, Status::Internal("not run"));
  out.sent_bytes.resize(world);
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    CompressedCollective collective(options, transport.get());
    BufferState state;
    out.statuses[r] = collective.Prepare(state, "buffer", 1, n);
    for (int c = 0; c < calls && out.statuses[r].ok(); ++c) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = c < nonzero_calls ? Grad(r, c, i) : 0.0f;
      CallTags tags{static_cast<comm::Tag>(2 * c), static_cast<comm::Tag>(2 * c + 1)};
      CallStats stats;
      compress::SparseVector mean;
      const Span<const float> in(data.data(), n);
      out.statuses[r] = dense ? collective.ReduceDense(state, tags, in, density, true, Span<float>(data), &stats)
                              : collective.Reduce(state, tags, in, density, true, &mean, &stats);
      if (!dense) {
        std::fill(data.begin(), data.end(), 0.0f);
        compress::Densify(mean, Span<float>(data));
        out.sparse[r].push_back(std::move(mean));
      }
      for (size_t i = 0; i < n; ++i) out.sums[r][i] += data[i];
      out.sent_bytes[r] += stats.sent_bytes;
    }
  });
  return out;
}

// The multi-rank tests, over each backend (comm/testing/test_world.h).
class CompressedCollectiveTest : public ::testing::TestWithParam<Backend> {
 protected:
  // RunOn this instance's backend. Over ZeroMQ every rank's results and
  // bytes must be the in-process run's, bit for bit.
  World RunWorld(const std::vector<std::string>& clusters, const CollectiveOptions& options, size_t n, int calls,
                 double density, bool dense, int nonzero_calls = 1 << 30) {
    World out = RunOn(GetParam(), clusters, options, n, calls, density, dense, nonzero_calls);
    if (GetParam() != Backend::kInProc) {
      World in_proc = RunOn(Backend::kInProc, clusters, options, n, calls, density, dense, nonzero_calls);
      EXPECT_EQ(out.sums, in_proc.sums) << "over " << BackendName(GetParam());
      EXPECT_EQ(out.sent_bytes, in_proc.sent_bytes) << "over " << BackendName(GetParam());
    }
    return out;
  }
};

void ExpectBitIdentical(const World& w) {
  for (size_t r = 0; r < w.sums.size(); ++r) {
    ASSERT_TRUE(w.statuses[r].ok()) << w.statuses[r].ToString();
    EXPECT_EQ(0, std::memcmp(w.sums[r].data(), w.sums[0].data(), 4 * w.sums[0].size())) << "rank " << r;
  }
}

TEST_P(CompressedCollectiveTest, ShardedAtDensityOneEqualsTheFlatExchangeBitForBit) {
  const std::vector<std::string> clusters = {"a", "a", "a", "a"};
  const size_t n = 1000;
  World flat = RunWorld(clusters, Options(comm::ExchangeAlgorithm::kFlat, compress::ValueEncoding::kFp32,
                                     LeaderMode::kMerge), n, 3, 1.0, true);
  World sharded = RunWorld(clusters, Options(comm::ExchangeAlgorithm::kSharded, compress::ValueEncoding::kFp32,
                                        LeaderMode::kMerge), n, 3, 1.0, true);
  ExpectBitIdentical(flat);
  ExpectBitIdentical(sharded);
  EXPECT_EQ(0, std::memcmp(flat.sums[0].data(), sharded.sums[0].data(), 4 * n));
}

TEST_P(CompressedCollectiveTest, SparseAndDenseResultsAgree) {
  const std::vector<std::string> clusters = {"a", "a", "b"};
  for (auto algorithm : {comm::ExchangeAlgorithm::kFlat, comm::ExchangeAlgorithm::kHierarchical,
                         comm::ExchangeAlgorithm::kSharded}) {
    CollectiveOptions o = Options(algorithm, compress::ValueEncoding::kInt4, LeaderMode::kResidual);
    World dense = RunWorld(clusters, o, 777, 4, 0.1, true);
    World sparse = RunWorld(clusters, o, 777, 4, 0.1, false);
    ExpectBitIdentical(dense);
    ExpectBitIdentical(sparse);
    EXPECT_EQ(0, std::memcmp(dense.sums[0].data(), sparse.sums[0].data(), 4 * 777)) << static_cast<int>(algorithm);
    for (const compress::SparseVector& v : sparse.sparse[0]) {
      ASSERT_TRUE(compress::ValidateSparseVector(v).ok()) << static_cast<int>(algorithm);
      EXPECT_LT(v.nnz(), 777u);  // a sparse round merges sparse selections
    }
  }
}

// The leaders' residual keeps what their cluster messages leave out: over
// many calls of the same gradient the mean converges to the exact mean.
TEST_P(CompressedCollectiveTest, LeaderResidualEventuallySendsEverything) {
  const std::vector<std::string> clusters = {"a", "a", "b", "b"};
  const size_t n = 64;
  for (LeaderMode leader : {LeaderMode::kMerge, LeaderMode::kResidual}) {
    CollectiveOptions o = Options(comm::ExchangeAlgorithm::kHierarchical, compress::ValueEncoding::kFp32, leader);
    World w = RunWorld(clusters, o, n, 1, 0.25, true);
    ExpectBitIdentical(w);
  }
  // Calls with zero gradient after the first flush what is held back.
  CollectiveOptions o = Options(comm::ExchangeAlgorithm::kHierarchical, compress::ValueEncoding::kFp32,
                                LeaderMode::kResidual);
  World w = RunWorld(clusters, o, n, 40, 0.25, true, /*nonzero_calls=*/1);
  ExpectBitIdentical(w);
  const int world = 4;
  const std::vector<std::vector<float>>& sums = w.sums;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (int r = 0; r < world; ++r) exact += Grad(r, 0, i);
    EXPECT_NEAR(sums[0][i], exact / world, 1e-5) << i;
  }
}

TEST(ShardRangeTest, ShardRangesCoverTheBufferInWholeBlocks) {
  for (size_t n : {0, 1, 15, 16, 17, 100, 1000}) {
    for (int world : {1, 2, 3, 7}) {
      size_t next = 0;
      for (int j = 0; j < world; ++j) {
        auto [begin, end] = ShardRange(n, world, j);
        EXPECT_EQ(begin, next);
        EXPECT_LE(begin, end);
        if (j + 1 < world) {
          EXPECT_EQ(end % 16 == 0 || end == n, true);
        }
        next = end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CompressedCollectiveTest, comm::testing::AllBackends(),
                         comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::collective
