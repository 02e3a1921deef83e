// Clock: the time part of the environment seam (common/env.h, whose Env is
// a Clock). Code that waits, times out or measures takes a Clock& (or an
// Env&) instead of calling std::chrono::steady_clock or system_clock
// directly, so tests can drive time by hand (ManualClock, FakeEnv) and check
// timeouts without sleeping.
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

  // Wall-clock time in Unix seconds, for timestamps that outlive the
  // process (the cluster's state, event logs). Not monotonic.
  virtual double WallSeconds() const = 0;

  // Blocks the caller for `d` (a ManualClock advances by `d` instead).
  virtual void SleepFor(duration d) = 0;
};

// std::chrono::steady_clock and std::this_thread::sleep_for.
class SteadyClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
  double WallSeconds() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  void SleepFor(duration d) override { std::this_thread::sleep_for(d); }
};

// A clock that moves only when told: Advance(d) or SleepFor(d), which move
// the steady and the wall time together. The steady time starts at an
// arbitrary fixed point (not the epoch, so `Now() - x` stays positive), the
// wall time at `wall_start` Unix seconds.
class ManualClock final : public Clock {
 public:
  static constexpr double kDefaultWallStart = 1.7e9;
  ManualClock() = default;
  explicit ManualClock(time_point start) : now_(start.time_since_epoch().count()) {}
  explicit ManualClock(double wall_start) : wall_start_(wall_start) {}

  time_point Now() const override { return time_point(duration(now_.load())); }
  double WallSeconds() const override {
    return wall_start_ + std::chrono::duration<double>(duration(now_.load() - kStart)).count();
  }
  void SleepFor(duration d) override { Advance(d); }

  // REQUIRES: d >= 0.
  void Advance(duration d) { now_ += d.count(); }
  // REQUIRES: seconds >= 0.
  void AdvanceSeconds(double seconds) {
    Advance(std::chrono::duration_cast<duration>(std::chrono::duration<double>(seconds)));
  }

 private:
  static constexpr duration::rep kStart = std::chrono::duration_cast<duration>(std::chrono::hours(1)).count();
  std::atomic<duration::rep> now_{kStart};
  double wall_start_ = kDefaultWallStart;
};

}  // namespace frugal
