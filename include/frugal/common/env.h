// Env: the one seam between Frugal and the operating system, after leveldb's
// Env. It is a Clock (steady and wall time, sleeping) and it starts, polls,
// signals and waits for child processes, looks programs up on PATH and
// takes log lines. Code that talks to the OS takes an Env& through its
// constructor; Env::Default() is the real one, FakeEnv (common/fake_env.h)
// an in-memory one for tests: its clocks move when the test says so and its
// "processes" exit as the test scripted.
//
// Thread safety: the default Env is stateless and may be used from several
// threads at once; a FakeEnv guards its state with one mutex.
// A process is polled, waited for and signalled by one owner; once Poll or
// Wait has reported its exit it is reaped and its pid must not be used again.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/common/clock.h"
#include "frugal/common/status.h"

namespace frugal {

// How a child process ended.
struct ProcessExit {
  int code = 0;     // The exit code; 0 when signalled.
  int signal = 0;   // The signal that killed it; 0 when it exited by itself.

  bool success() const { return signal == 0 && code == 0; }
  // The shell's convention: the exit code, or 128 + the signal.
  int ShellCode() const { return signal != 0 ? 128 + signal : code; }
  // "exit code 3" or "signal Killed".
  std::string Describe() const;
};

// What to start and how. Defaults: inherit this process's stdin, stdout,
// stderr, directory and environment; same process group.
struct SpawnOptions {
  // argv[0] is the program: a path, or a name looked up with FindProgram.
  std::vector<std::string> argv;
  // "NAME=VALUE" entries replacing or adding variables of this process's
  // environment; empty: the environment unchanged.
  std::vector<std::string> env;
  std::string cwd;          // Empty: this process's directory.
  std::string output_path;  // Non-empty: stdout and stderr appended to this file.
  // Descriptors that become the child's stdout and stderr (-1: inherit, or
  // output_path). The caller keeps ownership; they are not closed.
  int stdout_fd = -1;
  int stderr_fd = -1;
  bool stdin_null = false;     // stdin from /dev/null.
  bool own_group = false;      // The child leads a new process group (see SignalGroup).
  // The child gets SIGTERM when this thread's process dies (Linux
  // PR_SET_PDEATHSIG), so a killed parent leaves no child behind.
  bool die_with_parent = false;
};

class Env : public Clock {
 public:
  using Pid = int64_t;

  // The real environment: the steady and system clocks, fork/execve,
  // waitpid, kill, $PATH, stderr. Stateless; never destroyed.
  static Env& Default();

  // The path `name` is started from: `name` itself if it contains a '/' (and
  // is executable), else the first executable match in $PATH ("/usr/bin:/bin"
  // when unset). IOError "NAME: not found (not installed, or not in PATH)"
  // or "PATH: not an executable file" otherwise.
  virtual Result<std::string> FindProgram(const std::string& name) const = 0;

  // Starts a child process. The program is resolved with FindProgram first,
  // so a missing program is an error here, not an exit code 127 later.
  // Errors: InvalidArgument for an empty argv, FindProgram's IOError, or
  // IOError naming the program and the reason it could not start.
  virtual Result<Pid> Spawn(const SpawnOptions& options) = 0;

  // The exit of `pid` if it has ended (reaping it), else nullopt. Does not
  // block. A pid that is not a child of this Env reads as exited with 255.
  virtual std::optional<ProcessExit> Poll(Pid pid) = 0;

  // Sends `signal` (SIGTERM, SIGKILL, ...) to `pid`; its exit is still
  // reported by Poll. SignalGroup sends it to the process group that `pid`
  // leads (started with own_group), which may outlive `pid` itself.
  virtual void Signal(Pid pid, int signal) = 0;
  virtual void SignalGroup(Pid pid, int signal) = 0;

  // Blocks until `pid` exits (reaping it) or `timeout` has passed on this
  // Env's clock: Timeout "process P still running after S s" then, the
  // process left running.
  virtual Result<ProcessExit> Wait(Pid pid, duration timeout);

  // One line of diagnostics (no trailing newline needed). The default Env
  // writes it to stderr.
  virtual void Log(std::string_view line) = 0;
};

}  // namespace frugal
