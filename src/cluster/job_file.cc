#include "frugal/cluster/job_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include <toml.hpp>

#include "frugal/common/hash.h"
#include "frugal/common/toml_text.h"

namespace frugal::cluster {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxArgs = 1024;
constexpr size_t kMaxCommandBytes = 64 << 10;
constexpr int kMaxGpusPerWorker = 64;

// Keys of a job file that are the cluster's, not `frugal train`'s.
const std::set<std::string> kClusterKeys = {"name", "profile", "min_workers", "max_workers"};
// Keys a command job may have besides kClusterKeys.
const std::set<std::string> kCommandKeys = {"command", "env", "workdir", "gpus_per_worker", "max_steps",
                                            "planned_samples_per_s"};
// Keys of a `frugal train` configuration that the cluster sets itself.
const std::vector<std::string> kOwnedTrainKeys = {"workers", "run_name", "runs_dir", "resume", "resume_from",
                                                  "checkpoint_dir"};
// Variables `frugal run` and the agent give the program (besides FRUGAL_*).
const std::set<std::string> kLauncherEnv = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                            "MASTER_PORT"};

std::string Joined(const std::set<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// A user's text in a message: one line, at most 64 characters.
std::string Shown(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return s.size() > 64 ? out + "..." : out;
}

Status CheckEnvName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 256 && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                  std::all_of(name.begin(), name.end(),
                              [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!ok) {
    return Status::InvalidArgument("env: '" + Shown(name) +
                                   "' is not a variable name (letters, digits and '_', not starting with a digit)");
  }
  if (name.rfind("FRUGAL_", 0) == 0 || kLauncherEnv.count(name)) {
    return Status::InvalidArgument("env: " + name + " is set by the cluster and `frugal run`; remove it");
  }
  return Status::Ok();
}

// The file's table as a TOML value; InvalidArgument naming `source`.
Result<toml::value> ParseToml(const std::string& text, const std::string& source) {
  const std::string problem = TomlTextProblem(text);  // toml11 3.7 misbehaves on some input
  if (!problem.empty()) return Status::InvalidArgument(source + ":" + problem);
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, source);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    return Status::InvalidArgument(source + ": " + msg.substr(0, msg.find('\n')));
  }
  if (!root.is_table()) return Status::InvalidArgument(source + ": not a TOML table");
  return root;
}

// Reads and removes the cluster's keys (both kinds of job).
Status TakeClusterKeys(toml::table& table, const std::string& source, JobSubmission* job) {
  for (auto [key, out] : {std::pair<const char*, int*>{"min_workers", &job->min_workers}, {"max_workers", &job->max_workers}}) {
    auto it = table.find(key);
    if (it == table.end()) {
      return Status::InvalidArgument(source + ": missing '" + key + "' (the range of workers the job may run with)");
    }
    if (!it->second.is_integer()) return Status::InvalidArgument(source + ": '" + key + "' must be an integer");
    const int64_t v = it->second.as_integer();
    *out = v < 0 ? -1 : v > 100000 ? 100000 : static_cast<int>(v);
    table.erase(it);
  }
  for (auto [key, out] : {std::pair<const char*, std::string*>{"name", &job->name}, {"profile", &job->profile}}) {
    auto it = table.find(key);
    if (it == table.end()) continue;
    if (!it->second.is_string()) return Status::InvalidArgument(source + ": '" + key + "' must be a string");
    *out = it->second.as_string();
    table.erase(it);
  }
  if (job->profile.size() > 256) return Status::InvalidArgument(source + ": 'profile' is over 256 characters");
  if (job->min_workers < 1 || job->max_workers < job->min_workers || job->max_workers > 1024) {
    return Status::InvalidArgument(source + ": need 1 <= min_workers <= max_workers <= 1024, got " +
                                   std::to_string(job->min_workers) + " and " + std::to_string(job->max_workers));
  }
  return Status::Ok();
}

Status ReadCommand(const toml::table& table, const std::string& source, const std::string& base_dir,
                   JobSubmission* job) {
  CommandSpec& c = job->command;
  for (const auto& [key, value] : table) {
    if (kCommandKeys.count(key)) continue;
    if (key == "model") {
      return Status::InvalidArgument(source + ": give either 'command' (your own program) or 'model' (a built-in "
                                     "one), not both");
    }
    return Status::InvalidArgument(source + ": '" + Shown(key) + "' is not a key of a command job (known: " +
                                   Joined(kCommandKeys) + ", " + Joined(kClusterKeys) +
                                   "); pass your program's options in 'command'");
  }
  const toml::value& command = table.at("command");
  if (!command.is_array()) return Status::InvalidArgument(source + ": 'command' must be an array of strings");
  for (const toml::value& arg : command.as_array()) {
    if (!arg.is_string()) return Status::InvalidArgument(source + ": 'command' must be an array of strings");
    c.argv.push_back(arg.as_string());
  }
  if (c.argv.empty()) {
    return Status::InvalidArgument(source + ": 'command' is empty; give the program and its arguments, e.g. "
                                   "command = [\"python3\", \"train.py\"]");
  }
  if (auto it = table.find("env"); it != table.end()) {
    if (!it->second.is_table()) return Status::InvalidArgument(source + ": 'env' must be a table of strings");
    for (const auto& [name, value] : it->second.as_table()) {
      if (!value.is_string()) {
        return Status::InvalidArgument(source + ": env." + Shown(name) + " must be a string");
      }
      c.env[name] = value.as_string();
    }
  }
  std::string workdir = ".";
  if (auto it = table.find("workdir"); it != table.end()) {
    if (!it->second.is_string()) return Status::InvalidArgument(source + ": 'workdir' must be a string");
    workdir = it->second.as_string();
  }
  if (!workdir.empty()) c.workdir = (fs::path(base_dir) / workdir).lexically_normal().string();
  if (c.workdir.size() > 1 && c.workdir.back() == '/') c.workdir.pop_back();
  for (auto [key, out] : {std::pair<const char*, int*>{"gpus_per_worker", &c.gpus_per_worker}, {"max_steps", &job->max_steps}}) {
    auto it = table.find(key);
    if (it == table.end()) continue;
    if (!it->second.is_integer() || it->second.as_integer() < 0 || it->second.as_integer() > (1 << 30)) {
      return Status::InvalidArgument(source + ": '" + key + "' must be a non-negative integer");
    }
    *out = static_cast<int>(it->second.as_integer());
  }
  if (auto it = table.find("planned_samples_per_s"); it != table.end()) {
    const char* what = ": 'planned_samples_per_s' must be an array of numbers (samples/s at 1, 2, ... workers)";
    if (!it->second.is_array()) return Status::InvalidArgument(source + what);
    for (const toml::value& rate : it->second.as_array()) {
      if (rate.is_floating()) {
        c.planned_samples_per_s.push_back(rate.as_floating());
      } else if (rate.is_integer()) {
        c.planned_samples_per_s.push_back(static_cast<double>(rate.as_integer()));
      } else {
        return Status::InvalidArgument(source + what);
      }
    }
  }
  if (Status st = CheckSubmission(*job); !st.ok()) return Status::InvalidArgument(source + ": " + st.message());
  if (job->profile.empty()) job->profile = CommandProfile(c);
  return Status::Ok();
}

// CommandSpec::planned_samples_per_s: a rate for every count the job may
// run at, each finite and > 0.
Status CheckPlannedRates(const std::vector<double>& rates, int max_workers) {
  if (rates.empty()) return Status::Ok();
  if (rates.size() > kMaxArgs || static_cast<int64_t>(rates.size()) < max_workers) {
    return Status::InvalidArgument("planned_samples_per_s has " + std::to_string(rates.size()) +
                                   " rates; give one per worker count from 1 to max_workers (" +
                                   std::to_string(max_workers) + "), at most 1024: frugal.plan's "
                                   "Plan.job_prior(max_workers) writes them");
  }
  for (size_t k = 0; k < rates.size(); ++k) {
    if (!(rates[k] > 0) || !std::isfinite(rates[k])) {
      return Status::InvalidArgument("planned_samples_per_s[" + std::to_string(k) +
                                     "] must be a finite number > 0 (samples/s at " + std::to_string(k + 1) +
                                     " workers)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckSubmission(const JobSubmission& job) {
  if (!job.IsCommand()) return Status::Ok();
  const CommandSpec& c = job.command;
  if (!job.config_toml.empty()) {
    return Status::InvalidArgument("a job is either a command or a frugal train configuration (config_toml), "
                                   "not both");
  }
  size_t bytes = 0;
  for (const std::string& a : c.argv) bytes += a.size() + 1;
  if (c.argv.size() > kMaxArgs || bytes > kMaxCommandBytes) {
    return Status::InvalidArgument("command: at most " + std::to_string(kMaxArgs) + " arguments and 64 KiB");
  }
  if (c.argv[0].empty()) return Status::InvalidArgument("command: the program (its first element) is empty");
  if (std::any_of(c.argv.begin(), c.argv.end(), HasNul)) {
    return Status::InvalidArgument("command: an argument holds a NUL character");
  }
  if (c.env.size() > kMaxArgs) return Status::InvalidArgument("env: at most 1024 variables");
  for (const auto& [name, value] : c.env) {
    FRUGAL_RETURN_IF_ERROR(CheckEnvName(name));
    if (HasNul(value) || value.size() > kMaxCommandBytes) {
      return Status::InvalidArgument("env." + name + ": a NUL character, or over 64 KiB");
    }
  }
  if (!c.workdir.empty() && (c.workdir[0] != '/' || HasNul(c.workdir) || c.workdir.size() > 4096)) {
    return Status::InvalidArgument("workdir must be an absolute path, got '" + Shown(c.workdir) + "'");
  }
  FRUGAL_RETURN_IF_ERROR(CheckPlannedRates(c.planned_samples_per_s, job.max_workers));
  if (c.gpus_per_worker < 1 || c.gpus_per_worker > kMaxGpusPerWorker) {
    return Status::InvalidArgument("gpus_per_worker must be from 1 to " + std::to_string(kMaxGpusPerWorker) +
                                   " (the slots, GPUs on an agent with --gpus, each worker process takes), got " +
                                   std::to_string(c.gpus_per_worker));
  }
  return Status::Ok();
}

std::string CommandProfile(const CommandSpec& c) {
  uint64_t h = kFnv1a64Offset;
  // Lengths first, so that ["a b"] and ["a", "b"] differ.
  for (const std::string& a : c.argv) h = Fnv1a64("a" + std::to_string(a.size()) + ":" + a, h);
  for (const auto& [name, value] : c.env) h = Fnv1a64("e" + name + "=" + std::to_string(value.size()) + ":" + value, h);
  h = Fnv1a64("w" + c.workdir, h);
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(h));
  return std::string("command-") + digest;
}

Result<JobSubmission> ParseJobFile(const std::string& text, const std::string& source, const std::string& base_dir) {
  FRUGAL_ASSIGN_OR_RETURN(toml::value root, ParseToml(text, source));
  toml::table& table = root.as_table();
  JobSubmission job;
  FRUGAL_RETURN_IF_ERROR(TakeClusterKeys(table, source, &job));
  if (table.count("command")) {
    FRUGAL_RETURN_IF_ERROR(ReadCommand(table, source, base_dir, &job));
  } else {
    for (const char* key : {"env", "workdir", "gpus_per_worker", "planned_samples_per_s"}) {
      if (table.count(key)) {
        return Status::InvalidArgument(source + ": '" + key + "' belongs to a command job; add command = [...] or "
                                       "remove it");
      }
    }
    for (const std::string& owned : kOwnedTrainKeys) {
      if (table.count(owned)) {
        return Status::InvalidArgument(source + ": '" + owned + "' is set by the cluster; remove it");
      }
    }
    if (auto it = table.find("max_steps"); it != table.end() && it->second.is_integer()) {
      job.max_steps = static_cast<int>(std::clamp<int64_t>(it->second.as_integer(), 0, 1 << 30));
    }
    std::ostringstream out;
    out << root;
    job.config_toml = out.str();
  }
  if (job.name.empty()) job.name = fs::path(source).filename().string();
  return job;
}

}  // namespace frugal::cluster
