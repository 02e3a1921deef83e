#include "frugal/train/progress.h"

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace frugal::train {
namespace {

std::string Capture(bool interactive, int steps) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  {
    ProgressReporter p(f, /*log_every=*/10, interactive ? 1 : 0);
    for (int i = 1; i <= steps; ++i) {
      ProgressState s;
      s.step = i;
      s.total_steps = steps;
      s.loss = 1.0 / i;
      s.elapsed_s = i;
      p.Update(s);
    }
    p.Finish();
  }
  std::fclose(f);
  std::string out(buf, size);
  free(buf);
  return out;
}

TEST(ProgressTest, PlainModePrintsEveryLogEveryStepsWithoutCarriageReturns) {
  std::string out = Capture(false, 25);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  int lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 3);  // steps 10, 20 and the last one
  EXPECT_NE(out.find("step 25/25"), std::string::npos);
}

TEST(ProgressTest, TerminalModeRedrawsInPlace) {
  std::string out = Capture(true, 5);
  EXPECT_NE(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("ETA"), std::string::npos);
}

TEST(ProgressTest, FormatsDurations) {
  EXPECT_EQ(ProgressReporter::FormatDuration(65), "01:05");
  EXPECT_EQ(ProgressReporter::FormatDuration(3725), "1:02:05");
  EXPECT_EQ(ProgressReporter::FormatDuration(-1), "--:--");
}

}  // namespace
}  // namespace frugal::train
