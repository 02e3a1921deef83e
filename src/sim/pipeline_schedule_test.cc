#include "frugal/sim/pipeline_schedule.h"

#include <map>
#include <tuple>

#include <gtest/gtest.h>

namespace frugal::sim {
namespace {

class ScheduleTest : public ::testing::TestWithParam<std::tuple<PipelineSchedule, int, int, int>> {};

// Every stage runs each (micro-batch, chunk) forward and backward exactly
// once, the backward after the forward.
TEST_P(ScheduleTest, EachStepOnceForwardBeforeBackward) {
  const auto [schedule, p, m, v] = GetParam();
  Result<std::vector<std::vector<PipelineStep>>> steps = BuildPipelineSchedule(schedule, p, m, v);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  ASSERT_EQ(steps->size(), static_cast<size_t>(p));
  for (const std::vector<PipelineStep>& stage : *steps) {
    EXPECT_EQ(stage.size(), static_cast<size_t>(2 * m * v));
    std::map<std::pair<int, int>, int> seen;  // (mb, chunk) -> 1 after F, 2 after B.
    for (const PipelineStep& st : stage) {
      ASSERT_GE(st.chunk, 0);
      ASSERT_LT(st.chunk, v);
      int& state = seen[{st.microbatch, st.chunk}];
      EXPECT_EQ(state, st.forward ? 0 : 1);
      state = st.forward ? 1 : 2;
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(m * v));
  }
}

INSTANTIATE_TEST_SUITE_P(All, ScheduleTest,
                         ::testing::Values(std::make_tuple(PipelineSchedule::kGPipe, 4, 6, 1),
                                           std::make_tuple(PipelineSchedule::k1F1B, 4, 2, 1),
                                           std::make_tuple(PipelineSchedule::k1F1B, 8, 64, 1),
                                           std::make_tuple(PipelineSchedule::kInterleaved1F1B, 4, 4, 2),
                                           std::make_tuple(PipelineSchedule::kInterleaved1F1B, 4, 16, 3),
                                           std::make_tuple(PipelineSchedule::kInterleaved1F1B, 8, 64, 3)));

TEST(ScheduleTest, InFlightActivations) {
  // 1F1B: stage s holds p - s micro-batches; GPipe holds all m.
  Result<std::vector<std::vector<PipelineStep>>> f1b = BuildPipelineSchedule(PipelineSchedule::k1F1B, 4, 16, 1);
  ASSERT_TRUE(f1b.ok());
  for (int s = 0; s < 4; ++s) EXPECT_EQ(MaxInFlight((*f1b)[s]), 4 - s);
  Result<std::vector<std::vector<PipelineStep>>> gpipe = BuildPipelineSchedule(PipelineSchedule::kGPipe, 4, 16, 1);
  EXPECT_EQ(MaxInFlight((*gpipe)[0]), 16);
}

TEST(ScheduleTest, RejectsBadShapes) {
  EXPECT_FALSE(BuildPipelineSchedule(PipelineSchedule::kInterleaved1F1B, 4, 6, 2).ok());  // m % p != 0
  EXPECT_FALSE(BuildPipelineSchedule(PipelineSchedule::k1F1B, 4, 8, 2).ok());
  EXPECT_FALSE(BuildPipelineSchedule(PipelineSchedule::k1F1B, 0, 8, 1).ok());
  EXPECT_TRUE(ParseSchedule("Interleaved").ok());
  EXPECT_FALSE(ParseSchedule("zigzag").ok());
}

}  // namespace
}  // namespace frugal::sim
