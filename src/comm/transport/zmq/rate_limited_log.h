// RateLimitedLog: reports what the backend drops or refuses (malformed
// messages, strangers, rejected keys) without letting a flood of garbage
// flood the log too: the first `burst` lines are written as they come, then
// at most one summary per `interval` counting what was suppressed.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>

#include "frugal/common/clock.h"
#include "frugal/common/env.h"

namespace frugal::comm {

using LogSink = std::function<void(const std::string& line)>;

class RateLimitedLog {
 public:
  // `sink` empty: stderr, each line prefixed "frugal: comm: ". The
  // interval runs on `clock`, which outlives the log.
  explicit RateLimitedLog(LogSink sink, const Clock& clock = Env::Default(), int burst = 10,
                          std::chrono::milliseconds interval = std::chrono::milliseconds(10000));

  void Report(const std::string& line);
  // Lines reported so far, written or not.
  uint64_t reported() const;

 private:
  void Write(const std::string& line);

  LogSink sink_;
  const Clock& clock_;
  const int burst_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  uint64_t reported_ = 0;                              // GUARDED_BY(mu_)
  uint64_t suppressed_ = 0;                            // GUARDED_BY(mu_)
  Clock::time_point window_start_;                     // GUARDED_BY(mu_)
  int written_in_window_ = 0;                          // GUARDED_BY(mu_)
};

}  // namespace frugal::comm
