// Clock: the time seam. Code that waits, times out or measures takes a
// Clock& instead of calling std::chrono::steady_clock directly, so tests can
// drive time by hand (ManualClock) and check timeouts without sleeping.
//
// Thread safety: SteadyClock is stateless. ManualClock may be read and
// advanced from several threads; SleepFor advances the shared time, so it
// suits single-threaded code under test (a sleeper moves time for everyone).
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace frugal {

// A steady-clock duration in seconds, for metrics and logs.
inline double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;

  // Monotonic time; only differences between two calls mean anything.
  virtual time_point Now() const = 0;

  // Blocks the caller for `d` (a ManualClock advances by `d` instead).
  virtual void SleepFor(duration d) = 0;
};

// std::chrono::steady_clock and std::this_thread::sleep_for.
class SteadyClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
  void SleepFor(duration d) override { std::this_thread::sleep_for(d); }
};

// A clock that moves only when told: Advance(d) or SleepFor(d). Starts at an
// arbitrary fixed time point (not the epoch, so `Now() - x` stays positive).
class ManualClock final : public Clock {
 public:
  ManualClock() = default;
  explicit ManualClock(time_point start) : now_(start.time_since_epoch().count()) {}

  time_point Now() const override { return time_point(duration(now_.load())); }
  void SleepFor(duration d) override { Advance(d); }

  // REQUIRES: d >= 0.
  void Advance(duration d) { now_ += d.count(); }

 private:
  std::atomic<duration::rep> now_{std::chrono::duration_cast<duration>(std::chrono::hours(1)).count()};
};

}  // namespace frugal
