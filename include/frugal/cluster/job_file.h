// Job files and their checks: what `frugal cluster submit` reads, and the
// rules every submission meets, whichever front end (the CLI, the HTTP API)
// it came through.
//
// A job file is TOML. Either a `frugal train` configuration plus the
// cluster's keys (min_workers, max_workers; optional name, profile), or a
// command job (Note [Command jobs] in src/cluster/command_controller.cc):
//
//   name = "my-script"
//   command = ["python3", "train.py", "--epochs", "3"]
//   env = { PYTHONPATH = "/opt/frugal/python" }   # optional
//   workdir = "."               # optional; relative to the job file; default: its directory
//   min_workers = 1
//   max_workers = 4
//   gpus_per_worker = 1         # optional; slots (GPUs) per worker process, 1 to 64
//   planned_samples_per_s = [...]  # optional; frugal.plan's Plan.job_prior(max_workers)
//   max_steps = 300             # optional; the steps the script runs, for progress
//
// Thread safety: free functions.
#pragma once

#include <string>

#include "frugal/cluster/types.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

// Parses a job file's text. `source` names it in messages; `base_dir`
// (absolute) is what a relative workdir is resolved against, and a command
// job's workdir when it gives none. A `frugal train` job's config_toml is
// the file without the cluster's keys; its profile is left as given (the
// CLI derives one from the configuration). A command job's profile, unless
// given, is CommandProfile. InvalidArgument, one line starting with
// `source`, for a file that is not TOML, a key of the wrong type, a command
// job with train keys (model, lr, ...), and whatever CheckSubmission refuses.
Result<JobSubmission> ParseJobFile(const std::string& text, const std::string& source, const std::string& base_dir);

// The rules of a command job, checked by the server on submit (and by
// ParseJobFile): a non-empty argv of at most 1024 arguments and 64 KiB, no
// NUL characters, environment names of letters, digits and '_' (not
// starting with a digit) other than those the cluster and `frugal run` set
// (FRUGAL_*, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), an absolute workdir, gpus_per_worker from 1 to 64, a
// planned rate (> 0) for every count up to max_workers if any, and no
// config_toml.
// Ok for a `frugal train` job.
Status CheckSubmission(const JobSubmission& job);

// "command-<16 hex digits>": a 64-bit FNV-1a digest of the command's argv,
// environment and workdir, so that submissions of the same script with the
// same arguments share measured speeds, and never with a `frugal train`
// job (whose profiles start with the model's name).
std::string CommandProfile(const CommandSpec& command);

// The environment variable through which a command job's program finds its
// run directory (<runs>/job-<id>): metrics.jsonl there is what the agent
// reads and forwards, checkpoints there are what a restart resumes from.
inline constexpr const char* kRunDirEnv = "FRUGAL_RUN_DIR";

}  // namespace frugal::cluster
