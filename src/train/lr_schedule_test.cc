#include "frugal/train/lr_schedule.h"

#include <gtest/gtest.h>

namespace frugal::train {
namespace {

TEST(LrScheduleTest, WarmupThenCosineToFloor) {
  LrScheduleOptions o;
  o.base_lr = 1.0;
  o.kind = LrScheduleKind::kCosine;
  o.warmup_steps = 10;
  o.total_steps = 110;
  auto s = LrSchedule::Create(o);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->At(0), 0.1);
  EXPECT_DOUBLE_EQ(s->At(9), 1.0);
  EXPECT_DOUBLE_EQ(s->At(10), 1.0);
  EXPECT_NEAR(s->At(60), 0.5, 1e-12);
  EXPECT_NEAR(s->At(110), 0.0, 1e-12);
  EXPECT_NEAR(s->At(500), 0.0, 1e-12);
}

TEST(LrScheduleTest, StepDecay) {
  LrScheduleOptions o;
  o.base_lr = 2.0;
  o.kind = LrScheduleKind::kStep;
  o.warmup_steps = 0;
  o.step_size = 5;
  o.gamma = 0.5;
  auto s = LrSchedule::Create(o);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->At(4), 2.0);
  EXPECT_DOUBLE_EQ(s->At(5), 1.0);
  EXPECT_DOUBLE_EQ(s->At(12), 0.5);
}

TEST(LrScheduleTest, RejectsBadOptions) {
  LrScheduleOptions o;
  o.kind = LrScheduleKind::kStep;
  o.step_size = 0;
  EXPECT_FALSE(LrSchedule::Create(o).ok());
  o.step_size = 10;
  o.kind = LrScheduleKind::kConstant;
  o.base_lr = -1;
  EXPECT_FALSE(LrSchedule::Create(o).ok());
}

}  // namespace
}  // namespace frugal::train
