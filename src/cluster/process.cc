#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "frugal/common/env.h"

namespace frugal::cluster {

Result<pid_t> SpawnProcessGroup(const std::vector<std::string>& argv, const std::string& cwd,
                                const std::string& log_path, const std::vector<std::string>& env) {
  if (argv.empty()) return Status::InvalidArgument("empty command");
  SpawnOptions o;
  o.argv = argv;
  o.env = env;
  o.cwd = cwd;
  o.output_path = log_path;
  o.stdin_null = true;
  o.own_group = true;
  o.die_with_parent = true;
  FRUGAL_ASSIGN_OR_RETURN(const Env::Pid pid, Env::Default().Spawn(o));
  return static_cast<pid_t>(pid);
}

std::optional<int> PollExit(pid_t pid) {
  std::optional<ProcessExit> exit = Env::Default().Poll(pid);
  if (!exit) return std::nullopt;
  return exit->ShellCode();
}

void SignalGroup(pid_t pid, int signal) { Env::Default().SignalGroup(pid, signal); }

namespace {

// Appends what is readable on `fd` to *out; false at end of file.
bool Drain(int fd, std::string* out) {
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n > 0) out->append(buf, static_cast<size_t>(n));
  return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
}

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s) {
  if (argv.empty()) return Status::InvalidArgument("empty command");
  Env& env = Env::Default();
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  }
  SpawnOptions o;
  o.argv = argv;
  o.stdout_fd = out_pipe[1];
  o.stderr_fd = err_pipe[1];
  o.stdin_null = true;
  o.own_group = true;
  Result<Env::Pid> spawned = env.Spawn(o);
  if (!spawned.ok()) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return spawned.status();
  }
  const pid_t pid = static_cast<pid_t>(*spawned);
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandResult result;
  const auto deadline = env.Now() + std::chrono::duration_cast<Env::duration>(std::chrono::duration<double>(timeout_s));
  bool out_open = true, err_open = true, timed_out = false;
  while (out_open || err_open) {
    const double left = Seconds(deadline - env.Now());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0}, {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(std::min(left, 1.0) * 1000) + 1) < 0 && errno != EINTR) break;
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) out_open = Drain(out_pipe[0], &result.out);
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) err_open = Drain(err_pipe[0], &result.err);
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  if (timed_out) env.SignalGroup(pid, SIGKILL);
  // The pipes are closed: it has exited or is about to, unless it closed
  // them and went on; that one is killed rather than waited for forever.
  Result<ProcessExit> exit = env.Wait(pid, std::chrono::seconds(30));
  if (!exit.ok()) {
    env.SignalGroup(pid, SIGKILL);
    (void)env.Wait(pid, std::chrono::seconds(5));
    return exit.status().WithContext(argv[0]);
  }
  if (timed_out) {
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", timeout_s);
    return Status::Timeout(argv[0] + " did not finish within " + limit + " s");
  }
  result.exit_code = exit->ShellCode();
  return result;
}

}  // namespace frugal::cluster
