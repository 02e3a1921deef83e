// The `frugal` subcommands. Each Add*Command registers one subcommand on the
// root app. The command is a thin layer: it parses flags (and the TOML config)
// into an options struct of a library class (frugal::Trainer, Planner,
// Scheduler, ...) and calls it; it holds no logic a Python binding would need.
//
// Exit codes: 0 success, 1 runtime failure, 2 user error (bad flag, bad
// value, missing or malformed file). A command reports a user error by
// throwing UsageError; main() prints it as one line.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "frugal/comm/transport/security.h"
#include "frugal/common/status.h"

namespace frugal::cli {

// A mistake by the user: printed as "frugal: error: <message>", exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

// A failure while running (I/O, peer, corrupt data): exit code 1.
class RunError : public std::runtime_error {
 public:
  explicit RunError(const std::string& msg) : std::runtime_error(msg) {}
};

// Throws UsageError for argument/corruption/not-found errors and RunError for
// the rest. No-op for Ok.
void ThrowIfError(const Status& status);

// Adds `--config FILE` and `--print-config` to `cmd`. The config is a TOML
// file whose keys are the command's long option names (snake_case or
// kebab-case). Flags given on the command line win; unknown keys are errors.
void AddConfigOption(CLI::App* cmd);

// Call first in the command's callback: applies the --config file (if any)
// and, with --print-config, prints the resolved options as TOML and returns
// true (the command should then stop).
// `resolved`, when given, produces the TOML to print (commands whose options
// come from a field list print the struct, not the flags).
bool ApplyConfigAndMaybePrint(CLI::App* cmd, const std::function<std::string()>& resolved = nullptr);

// The command's resolved options (defaults, config file, flags) as TOML.
std::string ResolvedConfig(const CLI::App* cmd);

void AddVersionCommand(CLI::App& app);
#ifdef FRUGAL_WITH_TORCH
void AddTrainCommand(CLI::App& app);   // train_command.cc: train, worker
void AddProfileCommand(CLI::App& app); // profile_command.cc
#endif
void AddCoordinatorCommand(CLI::App& app);  // coordinator_command.cc
void AddJobCommand(CLI::App& app);          // job_command.cc: frugal job status|resize|stop
void AddKeysCommand(CLI::App& app);         // keys_command.cc: frugal keys generate
// --key/--authorized-keys/--insecure -> SecurityOptions (keys_command.cc): CURVE with keys; plain TCP with --insecure or on a loopback `address`; otherwise UsageError saying how to make keys.
comm::SecurityOptions ResolveSecurity(const std::string& key_file, const std::string& authorized_keys_file, bool insecure, const std::string& address);
void AddRunCommand(CLI::App& app);          // run_command.cc: frugal run -- PROGRAM (the Python package's launcher)
#ifdef FRUGAL_HAVE_SIM
void AddPlanCommand(CLI::App& app);     // plan_command.cc (planner)
#endif
#ifdef FRUGAL_HAVE_SCHED
void AddClusterCommand(CLI::App& app);  // cluster_command.cc (scheduler)
#endif
#ifdef FRUGAL_HAVE_CLUSTER
// cluster_serve_command.cc: serve, agent, submit, jobs, status, cancel, nodes, events.
void AddClusterServiceCommands(CLI::App* cluster);
#endif

}  // namespace frugal::cli
