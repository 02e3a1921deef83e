// What the Slurm backend reads from and writes to Slurm's commands
// (internal; pure functions, unit-tested in slurm_backend_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal::cluster::slurm {

// One line of `sinfo -h -N -o "%N|%o|%c|%G|%T"`.
struct Node {
  std::string name;
  std::string addr;   // NodeAddr: where its processes are reached.
  int cpus = 0;
  int gpus = 0;       // From Gres "gpu[:type]:N[(S:...)]".
  std::string state;  // "idle", "mixed", "allocated", "down*", "drained", ...
};
std::vector<Node> ParseSinfo(const std::string& out);
int GpusOfGres(const std::string& gres);
// True for a node that can run jobs (idle, mixed, allocated, completing),
// false for down, drained or draining, failing, not responding ("*") ones.
bool NodeUsable(const std::string& state);

// One line of `squeue -h -t all -O "JobID:|,Name:300|,State:|,exit_code:|,ReqNodes:300|"`.
struct Job {
  int64_t id = 0;
  std::string name;
  std::string state;  // PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, ...
  int raw_exit = 0;   // A wait(2) status.
  std::string node;   // The node it was pinned to (--nodelist).
};
extern const char* const kSqueueFormat;
std::vector<Job> ParseSqueue(const std::string& out);
// Whether a job in `state` has ended (its processes are gone).
bool JobEnded(const std::string& state);
// The exit code of an ended job: its status decoded (128 + signal if
// killed); never 0 for a job that did not complete (cancelled while pending,
// timed out, its node failed).
int ExitCode(const std::string& state, int raw_exit);

// `argv` as one /bin/sh command line, each word single-quoted.
std::string ShellQuote(const std::vector<std::string>& argv);
// The id `sbatch --parsable` printed ("<id>" or "<id>;<cluster>"); 0 if none.
int64_t ParseSbatchId(const std::string& out);

}  // namespace frugal::cluster::slurm
