#include "frugal/common/env.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "frugal/common/fake_env.h"

namespace frugal {
namespace {

using std::chrono::seconds;

ProcessExit RunToEnd(Env& env, std::vector<std::string> argv) {
  SpawnOptions o;
  o.argv = std::move(argv);
  Result<Env::Pid> pid = env.Spawn(o);
  EXPECT_TRUE(pid.ok()) << pid.status().message();
  if (!pid.ok()) return {255, 0};
  Result<ProcessExit> exit = env.Wait(*pid, seconds(30));
  EXPECT_TRUE(exit.ok()) << exit.status().message();
  return exit.ok() ? *exit : ProcessExit{255, 0};
}

TEST(DefaultEnvTest, SpawnsAndReportsExitCodes) {
  Env& env = Env::Default();
  EXPECT_TRUE(RunToEnd(env, {"/bin/true"}).success());
  const ProcessExit three = RunToEnd(env, {"/bin/sh", "-c", "exit 3"});
  EXPECT_FALSE(three.success());
  EXPECT_EQ(three.code, 3);
  EXPECT_EQ(three.Describe(), "exit code 3");
  EXPECT_EQ(RunToEnd(env, {"sh", "-c", "exit 4"}).code, 4);  // Found on PATH.
}

TEST(DefaultEnvTest, PollKillAndWaitTimeout) {
  Env& env = Env::Default();
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 30"};
  o.own_group = true;
  Result<Env::Pid> pid = env.Spawn(o);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  EXPECT_FALSE(env.Poll(*pid).has_value());
  Result<ProcessExit> early = env.Wait(*pid, std::chrono::milliseconds(50));
  EXPECT_EQ(early.status().code(), Status::Code::kTimeout);
  env.SignalGroup(*pid, SIGKILL);  // The shell and its sleep.
  Result<ProcessExit> exit = env.Wait(*pid, seconds(30));
  ASSERT_TRUE(exit.ok()) << exit.status().message();
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->ShellCode(), 128 + SIGKILL);
  EXPECT_EQ(env.Poll(*pid)->code, 255);  // Reaped: no longer a child.
}

TEST(DefaultEnvTest, EnvironmentDirectoryAndOutputFile) {
  Env& env = Env::Default();
  const std::string log = testing::TempDir() + "env_test_output.log";
  std::remove(log.c_str());
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"$FRUGAL_ENV_TEST $(pwd)\"; echo err >&2"};
  o.env = {"FRUGAL_ENV_TEST=yes"};
  o.cwd = "/";
  o.output_path = log;
  o.stdin_null = true;
  Result<Env::Pid> pid = env.Spawn(o);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  ASSERT_TRUE(env.Wait(*pid, seconds(30)).ok());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "yes /\nerr\n");
}

TEST(DefaultEnvTest, FindProgramFoundAndNotFound) {
  Env& env = Env::Default();
  Result<std::string> sh = env.FindProgram("sh");
  ASSERT_TRUE(sh.ok()) << sh.status().message();
  EXPECT_EQ(sh->back(), 'h');
  EXPECT_NE(sh->find('/'), std::string::npos);
  EXPECT_EQ(*env.FindProgram("/bin/sh"), "/bin/sh");

  Result<std::string> missing = env.FindProgram("frugal-no-such-program");
  EXPECT_EQ(missing.status().code(), Status::Code::kIOError);
  EXPECT_EQ(missing.status().message(), "frugal-no-such-program: not found (not installed, or not in PATH)");
  EXPECT_EQ(env.FindProgram("/etc/passwd").status().message(), "/etc/passwd: not an executable file");

  SpawnOptions o;
  o.argv = {"frugal-no-such-program"};
  EXPECT_EQ(env.Spawn(o).status().code(), Status::Code::kIOError);
  EXPECT_EQ(env.Spawn(SpawnOptions{}).status().code(), Status::Code::kInvalidArgument);
}

TEST(DefaultEnvTest, ClocksMove) {
  Env& env = Env::Default();
  const auto t0 = env.Now();
  env.SleepFor(std::chrono::milliseconds(2));
  EXPECT_GE(env.Now() - t0, std::chrono::milliseconds(2));
  EXPECT_GT(env.WallSeconds(), 1.5e9);  // After 2017: a Unix time, not a steady one.
}

TEST(FakeEnvTest, ScriptedExitsHappenOnTheFakeClock) {
  FakeEnv env;
  env.AddProgram("/usr/bin/frugal");
  env.ScriptExit("frugal", {3, 0}, seconds(10));
  SpawnOptions o;
  o.argv = {"frugal", "worker"};
  o.env = {"A=1"};
  Result<Env::Pid> pid = env.Spawn(o);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  EXPECT_FALSE(env.Poll(*pid).has_value());
  env.Advance(seconds(9));
  EXPECT_FALSE(env.Poll(*pid).has_value());
  env.Advance(seconds(1));
  std::optional<ProcessExit> exit = env.Poll(*pid);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->code, 3);
  ASSERT_EQ(env.spawns().size(), 1u);
  EXPECT_EQ(env.spawns()[0].options.argv, (std::vector<std::string>{"frugal", "worker"}));
  EXPECT_EQ(env.spawns()[0].options.env, (std::vector<std::string>{"A=1"}));
}

TEST(FakeEnvTest, UnscriptedProcessRunsUntilSignalledAndWaitTimesOut) {
  FakeEnv env;
  env.AddProgram("/bin/sleep");
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  Result<Env::Pid> pid = env.Spawn(o);
  ASSERT_TRUE(pid.ok());
  const auto t0 = env.Now();
  EXPECT_EQ(env.Wait(*pid, seconds(5)).status().code(), Status::Code::kTimeout);
  EXPECT_GE(env.Now() - t0, seconds(5));  // Wait slept on the fake clock.
  env.Signal(*pid, SIGHUP);  // Recorded only.
  EXPECT_FALSE(env.Poll(*pid).has_value());
  env.Signal(*pid, SIGTERM);
  EXPECT_EQ(env.Poll(*pid)->signal, SIGTERM);
  EXPECT_EQ(env.spawns()[0].signals, (std::vector<int>{SIGHUP, SIGTERM}));
  EXPECT_EQ(env.FindProgram("sleep").value(), "/bin/sleep");
  EXPECT_EQ(env.FindProgram("true").status().code(), Status::Code::kIOError);
}

TEST(FakeEnvTest, WallAndSteadyTimeMoveTogetherAndLogIsKept) {
  FakeEnv env;
  const double wall = env.WallSeconds();
  env.Advance(std::chrono::milliseconds(1500));
  EXPECT_DOUBLE_EQ(env.WallSeconds() - wall, 1.5);
  env.Log("one line");
  EXPECT_EQ(env.log(), std::vector<std::string>{"one line"});
}

}  // namespace
}  // namespace frugal
