// Checks for flags and paths that the torch-free commands (plan, cluster,
// profile) apply at the edge, so that a bad value is named by its flag:
// "--tp: must be a finite number in [1, 1024], got 0". CLI11's own Range
// lets NaN through (every comparison with NaN is false); these do not.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace frugal::cli {

// A CLI11 check: the value (each element of a vector option) parses as a
// finite number in [lo, hi]. `why`, when given, is appended to the message:
// it is the reason for the bound ("one simulated round per interval").
CLI::Validator Bounded(double lo, double hi, const std::string& why = "");

// Throws UsageError naming `flag` when `path` cannot be written: its folder
// is missing or it is a directory. Called before the work whose result goes
// there, so that a typo does not cost the run.
void CheckWritable(const std::string& path, const std::string& flag);

// "" when `endpoint` is tcp://HOST:PORT with PORT in [1, 65535] (or '*', an
// ephemeral port, when `listening`; a listener's HOST may be '*' too), else
// what is wrong with it. HOST is a name, an IPv4 address, a bracketed IPv6
// address or (listening) an interface name: ZeroMQ resolves it later.
std::string EndpointProblem(const std::string& endpoint, bool listening);
// A CLI11 check of the same.
CLI::Validator TcpEndpoint(bool listening);

// The flags of `frugal worker` that say who it is, checked before it waits
// for a coordinator: --coordinator and --listen are TCP endpoints, and
// --rank is inside the world when --workers was given (on the command line
// or in --config; without it the world size comes from the coordinator).
// Throws UsageError naming the flag.
void CheckWorkerFlags(const CLI::App* cmd, const std::string& coordinator, const std::string& listen, int rank,
                      int workers);

}  // namespace frugal::cli
