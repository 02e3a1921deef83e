// FakeEnv: an in-memory Env for tests, after leveldb's memenv. Its clock
// moves only when told (Advance, or a SleepFor of the code under test), its
// PATH holds the programs the test adds, and its "processes" run no code:
// each one is recorded and exits when the test scripted it to, or when it is
// signalled. So a supervisor's timeouts, restarts and kills can be tested
// without starting a process or sleeping.
//
// Thread safety: every method takes the one mutex, so the code under test
// may run on another thread than the test (SleepFor then moves time for both).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/common/env.h"

namespace frugal {

class FakeEnv final : public Env {
 public:
  // What the code under test started.
  struct SpawnRecord {
    Pid pid = 0;
    SpawnOptions options;
    time_point started;
    std::vector<int> signals;  // Sent to it (Signal or SignalGroup), in order.
  };

  // Clock: steady time starts at an arbitrary fixed point, wall time at
  // ManualClock::kDefaultWallStart; Advance and SleepFor move both.
  time_point Now() const override;
  double WallSeconds() const override;
  void SleepFor(duration d) override { Advance(d); }
  void Advance(duration d);

  // Puts `path` (e.g. "/usr/bin/frugal") on the fake PATH: FindProgram finds
  // it by that path or by its last component.
  void AddProgram(const std::string& path);

  // The next process started with argv[0] == `program` exits with `exit`
  // `after` it was started (on this clock). Scripts of one program are used
  // in the order given; a process without one runs until it is signalled.
  void ScriptExit(const std::string& program, ProcessExit exit, duration after = duration::zero());

  std::vector<SpawnRecord> spawns() const;
  std::vector<std::string> log() const;

  Result<std::string> FindProgram(const std::string& name) const override;
  Result<Pid> Spawn(const SpawnOptions& options) override;
  std::optional<ProcessExit> Poll(Pid pid) override;
  // SIGTERM, SIGINT and SIGKILL end a running fake process with that signal;
  // other signals are only recorded.
  void Signal(Pid pid, int signal) override;
  void SignalGroup(Pid pid, int signal) override { Signal(pid, signal); }
  void Log(std::string_view line) override;

 private:
  struct Script {
    ProcessExit exit;
    duration after;
  };
  struct Process {
    SpawnRecord record;
    std::optional<time_point> exits_at;  // From its script; nullopt: runs until signalled.
    std::optional<ProcessExit> exit;     // Set once it has ended.
    bool reaped = false;
  };

  mutable std::mutex mu_;
  ManualClock clock_;                                    // Atomic by itself.
  std::vector<std::string> programs_;                    // GUARDED_BY(mu_)
  std::map<std::string, std::vector<Script>> scripts_;   // GUARDED_BY(mu_): by argv[0], next first.
  std::map<Pid, Process> processes_;                     // GUARDED_BY(mu_)
  std::vector<std::string> log_;                         // GUARDED_BY(mu_)
  Pid next_pid_ = 1000;                                  // GUARDED_BY(mu_)
};

}  // namespace frugal
