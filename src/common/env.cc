#include "frugal/common/env.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

extern char** environ;

namespace frugal {

std::string ProcessExit::Describe() const {
  if (signal != 0) return std::string("signal ") + strsignal(signal);
  return "exit code " + std::to_string(code);
}

Result<ProcessExit> Env::Wait(Pid pid, duration timeout) {
  constexpr std::chrono::milliseconds kPollInterval{5};
  const time_point deadline = Now() + timeout;
  while (true) {
    if (std::optional<ProcessExit> exit = Poll(pid)) return *exit;
    if (Now() >= deadline) {
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%g", std::chrono::duration<double>(timeout).count());
      return Status::Timeout("process " + std::to_string(pid) + " still running after " + limit + " s");
    }
    SleepFor(kPollInterval);
  }
}

namespace {

// The child's environment, built before fork (the child may only make
// async-signal-safe calls): ours, less the variables `overrides` replaces.
std::vector<char*> ChildEnvironment(const std::vector<std::string>& overrides) {
  auto replaced = [&](const char* entry) {
    for (const std::string& e : overrides) {
      const size_t eq = e.find('=');
      if (std::strncmp(entry, e.c_str(), eq + 1) == 0) return true;
    }
    return false;
  };
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!replaced(*e)) envp.push_back(*e);
  }
  for (const std::string& e : overrides) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  return envp;
}

// The child's side of Spawn: only async-signal-safe calls until execve.
[[noreturn]] void ExecChild(const SpawnOptions& o, const char* program, char* const* argv, char* const* envp,
                            pid_t parent) {
  if (o.own_group) setpgid(0, 0);
  if (o.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // The parent died before prctl.
  }
  if (!o.output_path.empty()) {
    const int fd = open(o.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
  }
  if (o.stdout_fd >= 0) dup2(o.stdout_fd, STDOUT_FILENO);
  if (o.stderr_fd >= 0) dup2(o.stderr_fd, STDERR_FILENO);
  if (o.stdin_null) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  }
  if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) _exit(126);
  execve(program, argv, envp);
  _exit(127);
}

class PosixEnv final : public Env {
 public:
  time_point Now() const override { return clock_.Now(); }
  double WallSeconds() const override { return clock_.WallSeconds(); }
  void SleepFor(duration d) override { clock_.SleepFor(d); }

  Result<std::string> FindProgram(const std::string& name) const override {
    if (name.find('/') != std::string::npos) {
      if (access(name.c_str(), X_OK) == 0) return name;
      return Status::IOError(name + ": not an executable file");
    }
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
    for (std::string dir; std::getline(dirs, dir, ':');) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return Status::IOError(name + ": not found (not installed, or not in PATH)");
  }

  Result<Pid> Spawn(const SpawnOptions& o) override {
    if (o.argv.empty() || o.argv[0].empty()) return Status::InvalidArgument("empty command");
    FRUGAL_ASSIGN_OR_RETURN(const std::string program, FindProgram(o.argv[0]));
    std::vector<char*> argv;
    for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp = ChildEnvironment(o.env);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return Status::IOError("cannot start " + program + ": fork: " + std::strerror(errno));
    if (pid == 0) ExecChild(o, program.c_str(), argv.data(), envp.data(), parent);
    // Also in the parent: no window where a signal to the group misses the child.
    if (o.own_group) setpgid(pid, pid);
    return Pid{pid};
  }

  std::optional<ProcessExit> Poll(Pid pid) override {
    int status = 0;
    const pid_t r = waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
    if (r == 0) return std::nullopt;
    if (r < 0) return ProcessExit{255, 0};  // Not our child (reaped elsewhere): report it gone.
    if (WIFSIGNALED(status)) return ProcessExit{0, WTERMSIG(status)};
    return ProcessExit{WIFEXITED(status) ? WEXITSTATUS(status) : 255, 0};
  }

  void Signal(Pid pid, int signal) override {
    if (pid > 0) kill(static_cast<pid_t>(pid), signal);
  }
  void SignalGroup(Pid pid, int signal) override {
    if (pid > 0) kill(-static_cast<pid_t>(pid), signal);
  }

  void Log(std::string_view line) override {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  }

 private:
  SteadyClock clock_;
};

}  // namespace

Env& Env::Default() {
  static PosixEnv* env = new PosixEnv;  // Never destroyed: children may outlive static destruction.
  return *env;
}

}  // namespace frugal
