// Where the sched tests find the measured traces and workloads: outside the
// repository, in FRUGAL_SCHEDULER_DATA_DIR (a CMake option). A test that
// needs them skips, saying where it looked, when they are absent. Test-only.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "frugal/build_config.h"

namespace frugal::sched {

inline std::string SchedulerDataDir() { return FRUGAL_SCHEDULER_DATA_DIR; }
inline bool HaveSchedulerData() { return std::filesystem::is_directory(SchedulerDataDir() + "/pollux-traces"); }

}  // namespace frugal::sched

#define FRUGAL_SKIP_WITHOUT_SCHEDULER_DATA()                                                            \
  if (!::frugal::sched::HaveSchedulerData())                                                            \
  GTEST_SKIP() << "no scheduler data in " << ::frugal::sched::SchedulerDataDir()                        \
               << " (configure with -DFRUGAL_SCHEDULER_DATA_DIR=DIR)"
