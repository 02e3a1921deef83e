#include "frugal/common/fake_env.h"

#include <signal.h>

#include <algorithm>

namespace frugal {

Env::time_point FakeEnv::Now() const { return clock_.Now(); }
double FakeEnv::WallSeconds() const { return clock_.WallSeconds(); }
void FakeEnv::Advance(duration d) { clock_.Advance(d); }

void FakeEnv::AddProgram(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  programs_.push_back(path);
}

void FakeEnv::ScriptExit(const std::string& program, ProcessExit exit, duration after) {
  std::lock_guard<std::mutex> lock(mu_);
  scripts_[program].push_back({exit, after});
}

std::vector<FakeEnv::SpawnRecord> FakeEnv::spawns() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SpawnRecord> out;
  for (const auto& [pid, p] : processes_) out.push_back(p.record);
  return out;
}

std::vector<std::string> FakeEnv::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

Result<std::string> FakeEnv::FindProgram(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const bool is_path = name.find('/') != std::string::npos;
  for (const std::string& p : programs_) {
    if (p == name || (!is_path && p.substr(p.rfind('/') + 1) == name)) return p;
  }
  if (is_path) return Status::IOError(name + ": not an executable file");
  return Status::IOError(name + ": not found (not installed, or not in PATH)");
}

Result<Env::Pid> FakeEnv::Spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) return Status::InvalidArgument("empty command");
  FRUGAL_RETURN_IF_ERROR(FindProgram(options.argv[0]).status());
  std::lock_guard<std::mutex> lock(mu_);
  Process p;
  p.record = {next_pid_++, options, clock_.Now(), {}};
  std::vector<Script>& scripts = scripts_[options.argv[0]];
  if (!scripts.empty()) {
    p.exits_at = p.record.started + scripts.front().after;
    p.exit = scripts.front().exit;
    scripts.erase(scripts.begin());
  }
  const Pid pid = p.record.pid;
  processes_[pid] = std::move(p);
  return pid;
}

std::optional<ProcessExit> FakeEnv::Poll(Pid pid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = processes_.find(pid);
  if (it == processes_.end() || it->second.reaped) return ProcessExit{255, 0};
  Process& p = it->second;
  const bool ended = p.exit.has_value() && (!p.exits_at || clock_.Now() >= *p.exits_at);
  if (!ended) return std::nullopt;
  p.reaped = true;
  return p.exit;
}

void FakeEnv::Signal(Pid pid, int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = processes_.find(pid);
  if (it == processes_.end() || it->second.reaped) return;
  Process& p = it->second;
  p.record.signals.push_back(signal);
  const bool running = !p.exit || (p.exits_at && clock_.Now() < *p.exits_at);
  if (running && (signal == SIGTERM || signal == SIGINT || signal == SIGKILL)) {
    p.exit = ProcessExit{0, signal};
    p.exits_at.reset();
  }
}

void FakeEnv::Log(std::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  log_.emplace_back(line);
}

}  // namespace frugal
