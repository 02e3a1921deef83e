#include "frugal/engine/adaptation.h"

#include <string>

#include <gtest/gtest.h>

namespace frugal::engine {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::string TelemetryWith(const std::string& rank, const std::string& iterations) {
  return "{\"rank\":" + rank + ",\"iterations\":" + iterations +
         ",\"window_s\":1.0,\"samples\":640,\"compute_s\":0.5,\"wait_s\":0.1,\"sparsify_s\":0.02,"
         "\"optimizer_s\":0.01,\"link_bytes\":1.5e6,\"link_busy_s\":0.25}";
}

std::string DecisionWith(const std::string& effective, const std::string& batches) {
  return "{\"effective_iteration\":" + effective + ",\"density\":0.5,\"batch_sizes\":" + batches +
         ",\"lr_scale\":1.0,\"bandwidth_mbit\":100,\"predicted_iteration_s\":0.2,\"reason\":\"x\"}";
}

TEST(ControlMessagesTest, RoundTrip) {
  WorkerTelemetry t;
  t.rank = 3;
  t.iterations = 12;
  t.samples = 1 << 20;
  t.link_bytes = 1.5e9;
  t.link_messages = 42;
  auto back = WorkerTelemetry::Deserialize(t.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->samples, 1 << 20);
  EXPECT_EQ(back->link_bytes, 1.5e9);
  EXPECT_EQ(back->link_messages, 42);
  Decision d;
  d.effective_iteration = 40;
  d.batch_sizes = {32, 64};
  auto dback = Decision::Deserialize(d.Serialize());
  ASSERT_TRUE(dback.ok()) << dback.status().ToString();
  EXPECT_EQ(dback->batch_sizes, d.batch_sizes);
  EXPECT_EQ(dback->effective_iteration, 40);
}

// Found by fuzz/control_fuzz.cc: a float where an integer belongs (1e300 as
// a rank) was converted anyway, which is undefined behaviour.
TEST(ControlMessagesTest, NonIntegersAndOutOfRangeIntegersAreCorruption) {
  ASSERT_TRUE(WorkerTelemetry::Deserialize(Bytes(TelemetryWith("1", "10"))).ok());
  for (const auto& [rank, iterations] : std::vector<std::pair<std::string, std::string>>{
           {"1e300", "10"}, {"2.5", "10"}, {"4294967296", "10"}, {"1", "1e30"}, {"1", "18446744073709551615"}}) {
    auto t = WorkerTelemetry::Deserialize(Bytes(TelemetryWith(rank, iterations)));
    EXPECT_EQ(t.status().code(), Status::Code::kCorruption) << rank << " " << iterations;
  }
  ASSERT_TRUE(Decision::Deserialize(Bytes(DecisionWith("7", "[32, 64]"))).ok());
  for (const auto& [effective, batches] : std::vector<std::pair<std::string, std::string>>{
           {"1e30", "[32]"}, {"7", "[1e20]"}, {"7", "[32.5]"}, {"7", "[\"32\"]"}, {"7", "[0]"}}) {
    auto d = Decision::Deserialize(Bytes(DecisionWith(effective, batches)));
    EXPECT_EQ(d.status().code(), Status::Code::kCorruption) << effective << " " << batches;
  }
}

}  // namespace
}  // namespace frugal::engine
