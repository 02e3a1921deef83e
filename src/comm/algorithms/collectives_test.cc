#include "frugal/comm/algorithms/collectives.h"

#include <gtest/gtest.h>

#include "testing/test_world.h"

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;
using testing::Backend;
using testing::MakeWorld;
using testing::World;

class CollectivesTest : public ::testing::TestWithParam<Backend> {};

TEST_P(CollectivesTest, AllGatherIndexesByRank) {
  World w = MakeWorld(GetParam(), {"a", "b", "a"});
  std::vector<Result<std::vector<Bytes>>> out(3, Status::Internal("not run"));
  testing::RunRanks(3, [&](int r) {
    out[r] = AllGather(*w.ranks[r], 5, Bytes(r + 1, static_cast<uint8_t>(r)), milliseconds(5000));
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status().ToString();
    ASSERT_EQ(out[r]->size(), 3u);
    for (int j = 0; j < 3; ++j) EXPECT_EQ((*out[r])[j], Bytes(j + 1, static_cast<uint8_t>(j)));
  }
}

TEST_P(CollectivesTest, BroadcastFromAnyRoot) {
  World w = MakeWorld(GetParam(), {"a", "a", "b"});
  std::vector<Result<Bytes>> out(3, Status::Internal("not run"));
  testing::RunRanks(3, [&](int r) {
    out[r] = Broadcast(*w.ranks[r], 6, 2, r == 2 ? Bytes{1, 2, 3} : Bytes{9}, milliseconds(5000));
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status().ToString();
    EXPECT_EQ(*out[r], (Bytes{1, 2, 3}));
  }
  EXPECT_EQ(w.ranks[2]->stats().inter_cluster.bytes_sent, 6u);  // 3 bytes to each of ranks 0 and 1.
  EXPECT_EQ(Broadcast(*w.ranks[0], 7, 3, {}, milliseconds(10)).status().code(), Status::Code::kInvalidArgument);
}

TEST_P(CollectivesTest, BarrierWithAMissingRankTimesOut) {
  World w = MakeWorld(GetParam(), {"a", "a", "a"});
  std::vector<Status> out(2);
  testing::RunRanks(2, [&](int r) { out[r] = Barrier(*w.ranks[r], 8, milliseconds(200)); });
  for (const Status& s : out) {
    EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("rank 2"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectivesTest, ::testing::Values(Backend::kInProc, Backend::kZmq),
                         [](const auto& info) { return testing::BackendName(info.param); });

}  // namespace
}  // namespace frugal::comm
