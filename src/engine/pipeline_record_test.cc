#include "frugal/engine/pipeline_record.h"

#include <gtest/gtest.h>

namespace frugal::engine {
namespace {

TEST(PipelineRecordTest, PerStepCountersOfTheWindow) {
  PipelineStats before, now;
  before.wait_s = 1.0;
  now.wait_s = 3.0;
  now.exchange_s = 0.5;
  before.total_values = 100;
  now.total_values = 1100;
  now.sent_values = 250;
  now.merged_values = 400;
  comm::TransportStats t0, t1;
  t0.inter_cluster.bytes_sent = 1000;
  t1.inter_cluster.bytes_sent = 11000;
  t1.intra_cluster.bytes_sent = 5000;
  t1.inter_cluster.bytes_received = 2000;
  double mbit = 0, density = 0;
  nlohmann::json r = PipelineRecord(now, before, t1, t0, /*steps=*/10, &mbit, /*span_s=*/2.0, &density);
  EXPECT_DOUBLE_EQ(r["wait_s"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(r["exchange_s"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(r["bytes_sent_inter"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(r["bytes_sent_intra"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(r["bytes_received_inter"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(r["bytes_received_intra"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(density, 0.25);
  EXPECT_DOUBLE_EQ(r["density"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(r["merged_density"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(mbit, 15000.0 * 8 / 2.0 / 1e6);  // both link classes, over the window's span
}

}  // namespace
}  // namespace frugal::engine
