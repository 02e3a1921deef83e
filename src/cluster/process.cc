#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace frugal::cluster {

Result<pid_t> SpawnProcessGroup(const std::vector<std::string>& argv, const std::string& cwd,
                                const std::string& log_path, const std::vector<std::string>& env) {
  if (argv.empty()) return Status::InvalidArgument("empty command");
  if (access(argv[0].c_str(), X_OK) != 0) return Status::IOError(argv[0] + ": not an executable file");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child's environment, built before fork (the child may only make
  // async-signal-safe calls): ours, less the variables `env` replaces.
  std::vector<char*> envp;
  auto replaced = [&](const char* entry) {
    for (const std::string& e : env) {
      const size_t eq = e.find('=');
      if (std::strncmp(entry, e.c_str(), eq + 1) == 0) return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    if (!replaced(*e)) envp.push_back(*e);
  }
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::IOError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // The agent died before prctl.
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  setpgid(pid, pid);  // Also in the parent: no window where a signal to the group misses the child.
  return pid;
}

std::optional<int> PollExit(pid_t pid) {
  int status = 0;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0) return 255;  // Not our child any more (reaped elsewhere): report it gone.
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

void SignalGroup(pid_t pid, int signal) {
  if (pid > 0) kill(-pid, signal);
}


namespace {

// `name` as an executable path: itself if it has a '/', else the first match
// in PATH; "" if none. Resolved before fork: the child of a threaded
// process may only make async-signal-safe calls, which a PATH search is not.
std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t from = 0;
  while (from <= dirs.size()) {
    const size_t to = std::min(dirs.find(':', from), dirs.size());
    const std::string candidate = (to > from ? dirs.substr(from, to - from) : ".") + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    from = to + 1;
  }
  return "";
}

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
  const std::string program = FindProgram(argv[0]);
  if (program.empty()) return Status::IOError(argv[0] + ": not found (not installed, or not in PATH)");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return Status::IOError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execv(program.c_str(), args.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool out_open = true, err_open = true, timed_out = false;
  while (out_open || err_open) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
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
  if (timed_out) SignalGroup(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", timeout_s);
    return Status::Timeout(argv[0] + " did not finish within " + limit + " s");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
  return result;
}

}  // namespace frugal::cluster
