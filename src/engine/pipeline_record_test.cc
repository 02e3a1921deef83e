#include "frugal/engine/pipeline_record.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

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
  const PipelineWindow w = MeasureWindow(now, before, t1, t0, /*steps=*/10, /*span_s=*/2.0, /*compute_s=*/0.1);
  nlohmann::json r = WindowJson(w);
  EXPECT_DOUBLE_EQ(r["wait_s"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(r["exchange_s"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(r["bytes_sent_inter"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(r["bytes_sent_intra"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(r["bytes_received_inter"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(r["bytes_received_intra"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(r["density"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(r["merged_density"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(r["iter_s"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(r["compute_s"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(w.sent_mbit_per_s(), 15000.0 * 8 / 2.0 / 1e6);  // both link classes, over the window's span
  EXPECT_EQ(ProgressText(w, DensityText(w.density)), "0.1 Mbit/s sent  density 25%");
}

TEST(PipelineRecordTest, TheRecordsKeysAreTheFieldList) {
  PipelineWindow w;
  w.staleness = 1;
  w.workers = 3;
  const nlohmann::json r = WindowJson(w);
  std::vector<std::string> keys;
  for (const auto& [k, v] : r.items()) keys.push_back(k);
  std::vector<std::string> expected = StatKeys<PipelineWindow>();
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(keys, expected);  // nlohmann::json keeps its keys sorted
  EXPECT_TRUE(r["staleness"].is_number_integer());  // as before: whole numbers stay integers
  EXPECT_EQ(r["workers"].get<int>(), 3);
}

// Over an elastic run's generations the counters add up, every one of them.
TEST(PipelineRecordTest, AccumulatedStatsAddEveryCounter) {
  PipelineStats total, d;
  int i = 0;
  PipelineStats::VisitStats([&](const Stat&, auto member) {
    using T = std::remove_reference_t<decltype(d.*member)>;
    d.*member = static_cast<T>(++i);
  });
  AccumulateStats(&total, d);
  AccumulateStats(&total, d);
  i = 0;
  PipelineStats::VisitStats([&](const Stat& st, auto member) {
    EXPECT_EQ(static_cast<double>(total.*member), 2.0 * ++i) << st.key;
  });
}

}  // namespace
}  // namespace frugal::engine
