#include "frugal/engine/deflate_trial.h"

#include <functional>

#include <gtest/gtest.h>

namespace frugal::engine {
namespace {

// Runs `syncs` fragment syncs where a period under mode m lasts cost(i, m)
// seconds (i: the sync); returns the number of periods run deflated.
int RunSyncs(DeflateTrial& trial, int syncs, const std::function<double(int, bool)>& cost, int first = 0) {
  int deflated = 0;
  double period = 0;
  for (int i = first; i < first + syncs; ++i) {
    const bool mode = trial.Next(period);
    deflated += mode ? 1 : 0;
    period = cost(i, mode);
  }
  return deflated;
}

// Note [Deflate by trial]: where raw rounds train faster (deflate's CPU
// taken from compute), the first trial switches deflate off for good.
TEST(DeflateTrialTest, KeepsRawRoundsWhereTheyAreFaster) {
  DeflateTrial trial;
  const int deflated = RunSyncs(trial, 200, [](int, bool on) { return on ? 0.130 : 0.100; });
  EXPECT_FALSE(trial.chosen());
  // Rounds start deflated and the trial after kFirstHold periods wins; the
  // later trials of deflate (after 8, 16, 32 and 64 raw periods) end after
  // one period each, 1.3 times the raw one.
  EXPECT_EQ(deflated, DeflateTrial::kFirstHold + 4);
}

// Where deflate is worth it (a slow link), each trial of raw rounds ends
// after one period, and the trials come ever more rarely.
TEST(DeflateTrialTest, AClearlyWorseTrialCostsOnePeriod) {
  DeflateTrial trial;
  const int deflated = RunSyncs(trial, 300, [](int, bool on) { return on ? 0.185 : 0.318; });
  EXPECT_TRUE(trial.chosen());
  // Trials after 8, 16, 32, 64 and 128 held periods: 5 raw periods.
  EXPECT_EQ(300 - deflated, 5);
}

// A trial within the margin keeps the mode, whatever the noise order.
TEST(DeflateTrialTest, KeepsTheModeWhenTheTrialIsNotClearlyBetter) {
  DeflateTrial trial;
  RunSyncs(trial, 300, [](int i, bool on) { return (on ? 0.100 : 0.099) * (i % 2 == 0 ? 1.01 : 0.99); });
  EXPECT_TRUE(trial.chosen());
}

// One slow period (an evaluation) in the chosen mode does not start a
// trial or change the choice.
TEST(DeflateTrialTest, OneSlowPeriodIsIgnored) {
  DeflateTrial trial;
  RunSyncs(trial, 40, [](int i, bool on) { return i == 30 ? 1.0 : (on ? 0.1 : 0.2); });
  EXPECT_TRUE(trial.chosen());
  EXPECT_FALSE(trial.trying());
}

// When the chosen mode's periods move (here deflate becomes the
// bottleneck), a trial starts at once instead of after the long hold.
TEST(DeflateTrialTest, AShiftStartsATrialAtOnce) {
  DeflateTrial trial;
  const auto cost = [](int i, bool on) {
    if (i < 100) return on ? 0.100 : 0.170;
    return on ? 0.200 : 0.120;
  };
  RunSyncs(trial, 100, cost);
  ASSERT_TRUE(trial.chosen());
  // The hold after the trial at about period 60 is 32 periods; the shift
  // is seen 3 periods after the change, and the trial takes 3 more.
  RunSyncs(trial, 8, cost, 100);
  EXPECT_FALSE(trial.chosen());
}

}  // namespace
}  // namespace frugal::engine
