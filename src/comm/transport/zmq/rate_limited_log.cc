#include "rate_limited_log.h"

#include <cstdio>

namespace frugal::comm {

RateLimitedLog::RateLimitedLog(LogSink sink, const Clock& clock, int burst, std::chrono::milliseconds interval)
    : sink_(std::move(sink)), clock_(clock), burst_(burst), interval_(interval), window_start_(clock_.Now()) {}

void RateLimitedLog::Report(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  ++reported_;
  const auto now = clock_.Now();
  if (now - window_start_ >= interval_) {
    if (suppressed_ > 0) {
      Write("(" + std::to_string(suppressed_) + " similar lines suppressed in the last " +
            std::to_string(interval_.count() / 1000) + " s)");
    }
    suppressed_ = 0;
    written_in_window_ = 0;
    window_start_ = now;
  }
  if (written_in_window_ >= burst_) {
    ++suppressed_;
    return;
  }
  ++written_in_window_;
  Write(line);
}

uint64_t RateLimitedLog::reported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reported_;
}

// REQUIRES: mu_ held (keeps lines whole and in order).
void RateLimitedLog::Write(const std::string& line) {
  if (sink_) {
    sink_(line);
  } else {
    std::fprintf(stderr, "frugal: comm: %s\n", line.c_str());
  }
}

}  // namespace frugal::comm
