// Child processes of the agent (internal): each task runs in its own process
// group so that stopping it also stops the workers `frugal train` started.
// The direct child gets PR_SET_PDEATHSIG(SIGTERM), so a killed agent does not
// leave a training process behind (its workers then exit on their own
// network timeout, --timeout-s).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::cluster {

// Starts `argv` (argv[0] a path, or a name on PATH) in directory `cwd` with stdout and stderr
// appended to `log_path`, in this process's environment with `env`
// ("NAME=VALUE" each) replacing or adding variables. Returns the pid, or
// IOError naming the program.
Result<pid_t> SpawnProcessGroup(const std::vector<std::string>& argv, const std::string& cwd,
                                const std::string& log_path, const std::vector<std::string>& env = {});
// The exit code if `pid` has exited (128 + signal if killed), else nullopt. Reaps it.
std::optional<int> PollExit(pid_t pid);
// Sends `signal` to the process group of `pid`.
void SignalGroup(pid_t pid, int signal);

// What a short command printed and how it ended.
struct CommandResult {
  int exit_code = 0;   // 128 + signal for a signalled process.
  std::string out;     // stdout
  std::string err;     // stderr
};
// Runs `argv` (argv[0] looked up in PATH) to completion, stdin from
// /dev/null. IOError if it cannot start, Timeout (after killing it) if it
// runs past timeout_s.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s);

}  // namespace frugal::cluster
