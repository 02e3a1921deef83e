// The local launcher's supervision, over a scripted process launcher and a
// manual clock: no processes, no sleeps.
#include "frugal/engine/launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <map>
#include <set>

#include "frugal/common/fake_env.h"

namespace frugal::engine {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Processes that exit when the script says, on the manual clock.
class FakeLauncher final : public ProcessLauncher {
 public:
  struct Started {
    std::string executable;
    std::vector<std::string> args;
  };
  struct Killed {
    Id id;
    Clock::time_point at;
  };

  explicit FakeLauncher(ManualClock& clock) : clock_(clock) {}

  // The n-th process started (0-based) exits `after` its start with `code`.
  // Unscripted processes run until killed.
  void ExitAfter(int n, milliseconds after, int code) {
    script_[n] = {after, code == 0, "exit code " + std::to_string(code)};
  }
  // The n-th process is killed by a signal from outside `after` its start.
  void KilledAfter(int n, milliseconds after) { script_[n] = {after, false, "signal Killed"}; }
  // Starting the n-th process fails.
  void FailSpawn(int n) { failing_spawn_ = n; }

  Result<Id> Spawn(const std::string& executable, const std::vector<std::string>& args,
                   const std::vector<std::string>& /*env*/) override {
    Id id = static_cast<Id>(started_.size());
    if (id == failing_spawn_) return Status::IOError("cannot start worker " + executable + ": No such file");
    started_.push_back({executable, args});
    Process p;
    if (auto it = script_.find(static_cast<int>(id)); it != script_.end()) {
      p = Process{clock_.Now() + it->second.after, it->second.success, it->second.description};
    }
    running_[id] = p;
    return id;
  }

  std::optional<Exit> PollExit() override {
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      if (it->second.exit_at > clock_.Now()) continue;
      Exit exit{it->first, it->second.success, it->second.description};
      running_.erase(it);
      return exit;
    }
    return std::nullopt;
  }

  void Kill(Id id) override {
    kills_.push_back({id, clock_.Now()});
    auto it = running_.find(id);
    ASSERT_NE(it, running_.end()) << "killed process " << id << " that was not running";
    it->second = Process{clock_.Now(), false, "signal Killed"};
  }

  // SIGTERM: the process exits 100 ms later, unless it ignores it.
  void Terminate(Id id) override {
    terms_.push_back(id);
    auto it = running_.find(id);
    ASSERT_NE(it, running_.end()) << "terminated process " << id << " that was not running";
    if (ignores_term_.count(static_cast<int>(id)) == 0) {
      it->second = Process{clock_.Now() + milliseconds(100), false, "signal Terminated"};
    }
  }
  void IgnoresTerm(int n) { ignores_term_.insert(n); }

  const std::vector<Started>& started() const { return started_; }
  const std::vector<Killed>& kills() const { return kills_; }
  const std::vector<Id>& terms() const { return terms_; }

 private:
  struct Process {
    Clock::time_point exit_at = Clock::time_point::max();
    bool success = false;
    std::string description;
  };

  struct Scripted {
    milliseconds after;
    bool success;
    std::string description;
  };

  ManualClock& clock_;
  std::map<int, Scripted> script_;
  Id failing_spawn_ = -1;
  std::vector<Started> started_;
  std::map<Id, Process> running_;
  std::vector<Killed> kills_;
  std::vector<Id> terms_;
  std::set<int> ignores_term_;
};

LocalLaunchOptions Options(int workers) {
  LocalLaunchOptions o;
  o.workers = workers;
  o.executable = "/opt/frugal";
  o.worker_args = {"--model", "mlp"};
  o.timeout = milliseconds(3000);
  o.kill_grace = milliseconds(1000);
  return o;
}

std::vector<Clock::time_point> KillTimes(const FakeLauncher& launcher) {
  std::vector<Clock::time_point> out;
  for (const auto& k : launcher.kills()) out.push_back(k.at);
  return out;
}

class LauncherTest : public ::testing::Test {
 protected:
  Status Supervise(const LocalLaunchOptions& options) {
    return StartAndSuperviseWorkers(options, "tcp://h:1", launcher, clock);
  }

  ManualClock clock;
  FakeLauncher launcher{clock};
};

TEST_F(LauncherTest, AllWorkersSucceed) {
  for (int r = 0; r < 3; ++r) launcher.ExitAfter(r, milliseconds(500 * (r + 1)), 0);
  const Clock::time_point start = clock.Now();
  Status st = Supervise(Options(3));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(launcher.kills().empty());
  // Returns right after the last exit.
  EXPECT_GE(clock.Now() - start, milliseconds(1500));
  EXPECT_LE(clock.Now() - start, milliseconds(1520));
}

TEST_F(LauncherTest, WorkersGetTheirRankAndTheCoordinator) {
  LocalLaunchOptions o = Options(2);
  o.threads_per_worker = 4;
  o.clusters = {"a", "b"};
  o.slowdowns = {"1", "2.5"};
  for (int r = 0; r < 2; ++r) launcher.ExitAfter(r, milliseconds(10), 0);
  ASSERT_TRUE(Supervise(o).ok());
  ASSERT_EQ(launcher.started().size(), 2u);
  EXPECT_EQ(launcher.started()[0].executable, "/opt/frugal");
  EXPECT_THAT(launcher.started()[0].args,
              ElementsAre("worker", "--model", "mlp", "--coordinator", "tcp://h:1", "--rank", "0", "--threads", "4",
                          "--cluster", "a", "--compute-slowdown", "1"));
  EXPECT_THAT(launcher.started()[1].args,
              ElementsAre("worker", "--model", "mlp", "--coordinator", "tcp://h:1", "--rank", "1", "--threads", "4",
                          "--cluster", "b", "--compute-slowdown", "2.5", "--quiet"));
}

// The others hang: they are killed once the timeout plus the grace period
// after the failure has passed, not before.
TEST_F(LauncherTest, FailedWorkerIsReportedAndTheRestKilledAfterTheGracePeriod) {
  launcher.ExitAfter(1, milliseconds(700), 3);
  const LocalLaunchOptions o = Options(3);
  const Clock::time_point failed_at = clock.Now() + milliseconds(700);
  Status st = Supervise(o);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "worker 1 failed (exit code 3)");
  ASSERT_EQ(launcher.kills().size(), 2u);
  EXPECT_EQ(launcher.kills()[0].id, 0);
  EXPECT_EQ(launcher.kills()[1].id, 2);
  const Clock::time_point deadline = failed_at + o.timeout + o.kill_grace;
  for (Clock::time_point t : KillTimes(launcher)) {
    EXPECT_GT(t, deadline);
    EXPECT_LE(t, deadline + milliseconds(40));
  }
}

// The others notice the lost peer and exit by themselves within the grace
// period: nobody is killed, and the first failure is the one reported.
TEST_F(LauncherTest, OthersExitingByThemselvesAreNotKilled) {
  launcher.ExitAfter(2, milliseconds(100), 1);
  launcher.ExitAfter(0, milliseconds(2000), 4);  // "Unavailable: rank 2 ..."
  launcher.ExitAfter(1, milliseconds(3500), 4);
  Status st = Supervise(Options(3));
  EXPECT_EQ(st.message(), "worker 2 failed (exit code 1)");
  EXPECT_TRUE(launcher.kills().empty());
}

TEST_F(LauncherTest, KilledBySignalIsAFailure) {
  // Killed from outside (the OOM killer, say) while the other one succeeds.
  launcher.ExitAfter(0, milliseconds(50), 0);
  launcher.KilledAfter(1, milliseconds(50));
  Status st = Supervise(Options(2));
  EXPECT_EQ(st.message(), "worker 1 failed (signal Killed)");
  EXPECT_TRUE(launcher.kills().empty());
}

// A worker that cannot be started: the spawn error is returned, no later
// worker is started and the ones already running are killed at once.
TEST_F(LauncherTest, SpawnFailureKillsTheStartedWorkersAtOnce) {
  launcher.FailSpawn(2);
  const Clock::time_point start = clock.Now();
  Status st = Supervise(Options(4));
  EXPECT_EQ(st.code(), Status::Code::kIOError);
  EXPECT_THAT(st.message(), HasSubstr("cannot start worker /opt/frugal"));
  EXPECT_EQ(launcher.started().size(), 2u);
  ASSERT_EQ(launcher.kills().size(), 2u);
  for (Clock::time_point t : KillTimes(launcher)) EXPECT_LE(t - start, milliseconds(40));
}

TEST_F(LauncherTest, RejectsInconsistentOptions) {
  LocalLaunchOptions o = Options(0);
  EXPECT_EQ(Supervise(o).message(), "--workers must be >= 1");
  o = Options(3);
  o.clusters = {"a", "b"};
  EXPECT_EQ(Supervise(o).message(), "--local-clusters names 2 clusters for 3 workers");
  o = Options(2);
  o.slowdowns = {"1"};
  EXPECT_EQ(Supervise(o).message(), "--local-slowdowns gives 1 factors for 2 workers");
  EXPECT_TRUE(launcher.started().empty());
  EXPECT_EQ(RunLocalWorkers(Options(0), Env::Default()).message(), "--workers must be >= 1");
}

// The real launcher on real (tiny) processes.
std::optional<ProcessLauncher::Exit> WaitForExit(ProcessLauncher& launcher) {
  SteadyClock clock;
  const Clock::time_point give_up = clock.Now() + std::chrono::seconds(10);
  while (clock.Now() < give_up) {
    if (auto exit = launcher.PollExit()) return exit;
    clock.SleepFor(milliseconds(2));
  }
  return std::nullopt;
}

TEST(PosixProcessLauncherTest, ReportsExitCodesSignalsAndSpawnErrors) {
  std::unique_ptr<ProcessLauncher> launcher = NewProcessLauncher(Env::Default());
  Result<ProcessLauncher::Id> failing = launcher->Spawn("/bin/sh", {"-c", "exit 3"}, {});
  ASSERT_TRUE(failing.ok()) << failing.status().ToString();
  auto exit = WaitForExit(*launcher);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->id, *failing);
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->description, "exit code 3");

  Result<ProcessLauncher::Id> hanging = launcher->Spawn("/bin/sh", {"-c", "sleep 30"}, {});
  ASSERT_TRUE(hanging.ok());
  EXPECT_FALSE(launcher->PollExit().has_value());
  launcher->Kill(*hanging);
  exit = WaitForExit(*launcher);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->id, *hanging);
  EXPECT_EQ(exit->description, "signal Killed");

  Result<ProcessLauncher::Id> ok = launcher->Spawn("/bin/sh", {"-c", "exit 0"}, {});
  ASSERT_TRUE(ok.ok());
  exit = WaitForExit(*launcher);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);

  Result<ProcessLauncher::Id> missing = launcher->Spawn("/nonexistent/frugal", {}, {});
  EXPECT_EQ(missing.status().code(), Status::Code::kIOError);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot start /nonexistent/frugal"));
}

TEST(PosixProcessLauncherTest, SearchesPathAndOverridesTheEnvironment) {
  std::unique_ptr<ProcessLauncher> launcher = NewProcessLauncher(Env::Default());
  // "sh" has no '/': found on PATH. FRUGAL_TEST_A is added, HOME replaced.
  const std::string check = "test \"$FRUGAL_TEST_A\" = 7 && test \"$HOME\" = /x && test -n \"$PATH\"";
  Result<ProcessLauncher::Id> ok = launcher->Spawn("sh", {"-c", check}, {"FRUGAL_TEST_A=7", "HOME=/x"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto exit = WaitForExit(*launcher);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->description;
  Result<ProcessLauncher::Id> wrong = launcher->Spawn("sh", {"-c", check}, {"FRUGAL_TEST_A=8"});
  ASSERT_TRUE(wrong.ok());
  exit = WaitForExit(*launcher);
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(launcher->Spawn("no-such-program-frugal", {}, {}).status().code(), Status::Code::kIOError);
}

// The Env launcher over a FakeEnv: the scripted exit of one worker, seen on
// the fake clock, gets the others killed once the grace has passed; no
// process is started and nothing sleeps.
TEST(EnvProcessLauncherTest, FailedWorkerGetsTheOthersKilledAfterTheGrace) {
  FakeEnv env;
  env.AddProgram("/opt/frugal");
  env.ScriptExit("/opt/frugal", {0, 0}, milliseconds(200));
  env.ScriptExit("/opt/frugal", {3, 0}, milliseconds(500));
  std::unique_ptr<ProcessLauncher> launcher = NewProcessLauncher(env);
  const Clock::time_point start = env.Now();
  Status st = StartAndSuperviseWorkers(Options(3), "tcp://h:1", *launcher, env);
  EXPECT_EQ(st.message(), "worker 1 failed (exit code 3)");
  const std::vector<FakeEnv::SpawnRecord> spawns = env.spawns();
  ASSERT_EQ(spawns.size(), 3u);
  EXPECT_THAT(spawns[2].options.argv, ElementsAre("/opt/frugal", "worker", "--model", "mlp", "--coordinator",
                                                  "tcp://h:1", "--rank", "2", "--threads", "1", "--quiet"));
  EXPECT_TRUE(spawns[0].signals.empty());
  EXPECT_TRUE(spawns[1].signals.empty());
  EXPECT_THAT(spawns[2].signals, ElementsAre(SIGKILL));
  // Killed once the grace (timeout + kill_grace = 4 s) after the failure had passed.
  EXPECT_GE(env.Now() - start, milliseconds(4500));
  EXPECT_LE(env.Now() - start, milliseconds(4600));
}

TEST(EnvProcessLauncherTest, MissingProgramIsASpawnError) {
  FakeEnv env;
  std::unique_ptr<ProcessLauncher> launcher = NewProcessLauncher(env);
  Status st = StartAndSuperviseWorkers(Options(2), "tcp://h:1", *launcher, env);
  EXPECT_EQ(st.code(), Status::Code::kIOError);
  EXPECT_EQ(st.message(), "cannot start /opt/frugal: not an executable file");
  EXPECT_TRUE(env.spawns().empty());
}

TEST(ManualClockTest, MovesOnlyWhenTold) {
  ManualClock clock;
  const Clock::time_point t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(milliseconds(5));
  clock.SleepFor(milliseconds(7));
  EXPECT_EQ(clock.Now() - t0, milliseconds(12));
}

}  // namespace
}  // namespace frugal::engine

namespace frugal::engine {
namespace {

// SIGINT or SIGTERM to the launcher (the stop flag): every worker still
// running is asked to stop, the run reports the interruption, and one that
// ignores the request is killed kInterruptGrace later.
TEST_F(LauncherTest, AStopRequestStopsTheWorkersAndKillsTheStubbornOnes) {
  std::atomic<bool> stop{true};
  LocalLaunchOptions o = Options(3);
  o.stop = &stop;
  launcher.IgnoresTerm(2);
  const Clock::time_point start = clock.Now();
  Status st = Supervise(o);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("interrupted"));
  EXPECT_THAT(launcher.terms(), ElementsAre(0, 1, 2));
  ASSERT_EQ(launcher.kills().size(), 1u);
  EXPECT_EQ(launcher.kills()[0].id, 2);
  EXPECT_GE(launcher.kills()[0].at - start, kInterruptGrace);
  EXPECT_LE(launcher.kills()[0].at - start, kInterruptGrace + milliseconds(40));
}

// Without a stop request the flag changes nothing.
TEST_F(LauncherTest, AnUnsetStopFlagChangesNothing) {
  std::atomic<bool> stop{false};
  LocalLaunchOptions o = Options(2);
  o.stop = &stop;
  for (int r = 0; r < 2; ++r) launcher.ExitAfter(r, milliseconds(300), 0);
  EXPECT_TRUE(Supervise(o).ok());
  EXPECT_TRUE(launcher.terms().empty());
  EXPECT_TRUE(launcher.kills().empty());
}

}  // namespace
}  // namespace frugal::engine
