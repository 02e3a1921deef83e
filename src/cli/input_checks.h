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

}  // namespace frugal::cli
