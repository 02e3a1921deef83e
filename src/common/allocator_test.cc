#include "frugal/common/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace frugal {
namespace {

// The opt-outs leave glibc alone; otherwise (on glibc) the thresholds are set.
TEST(AllocatorTest, HeapRetentionHonoursItsOptOuts) {
  ASSERT_EQ(setenv("FRUGAL_HEAP_RETENTION", "0", 1), 0);
  EXPECT_EQ(RetainHeapBetweenSteps(), "");
  ASSERT_EQ(unsetenv("FRUGAL_HEAP_RETENTION"), 0);
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=4096", 1), 0);
  EXPECT_EQ(RetainHeapBetweenSteps(), "");
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
#if defined(__GLIBC__)
  EXPECT_NE(RetainHeapBetweenSteps().find("heap retention on"), std::string::npos);
#endif
}

}  // namespace
}  // namespace frugal
