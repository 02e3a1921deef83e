#include "frugal/comm/transport/topology.h"

#include <gtest/gtest.h>

namespace frugal::comm {
namespace {

TEST(TopologyTest, AssignsClusterIdsInOrderOfFirstAppearance) {
  auto t = Topology::FromClusterNames({"cloud", "onprem", "cloud", "edge", "onprem"});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->world_size(), 5);
  EXPECT_EQ(t->num_clusters(), 3);
  EXPECT_EQ(t->cluster_id(0), 0);
  EXPECT_EQ(t->cluster_id(1), 1);
  EXPECT_EQ(t->cluster_id(2), 0);
  EXPECT_EQ(t->cluster_id(3), 2);
  EXPECT_EQ(t->cluster_name(1), "onprem");
  EXPECT_EQ(t->members(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(t->leader(0), 0);
  EXPECT_EQ(t->leader(1), 1);
  EXPECT_EQ(t->leader(2), 3);
  EXPECT_TRUE(t->is_leader(3));
  EXPECT_FALSE(t->is_leader(4));
  EXPECT_EQ(t->LinkBetween(0, 2), LinkClass::kIntraCluster);
  EXPECT_EQ(t->LinkBetween(0, 1), LinkClass::kInterCluster);
  EXPECT_EQ(t->DescribeRank(4), "rank 4 (cluster onprem)");
}

TEST(TopologyTest, RejectsEmptyWorldAndEmptyNames) {
  EXPECT_EQ(Topology::FromClusterNames({}).status().code(), Status::Code::kInvalidArgument);
  auto bad = Topology::FromClusterNames({"a", ""});
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("rank 1"), std::string::npos);
}

TEST(TopologyTest, SingleCluster) {
  Topology t = Topology::SingleCluster(3);
  EXPECT_EQ(t.num_clusters(), 1);
  EXPECT_EQ(t.members(0), (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace frugal::comm
