// Parts shared by the `frugal plan` subcommands (plan_command.cc,
// plan_search_command.cc): model flags, JSON output, list parsing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/simulator.h"
#include "frugal/sim/workload.h"

namespace frugal::cli {

template <typename T>
T OrThrow(Result<T> r) {
  ThrowIfError(r.status());
  return std::move(r).value();
}

// Model flags shared by run, search, frugal and ops: a built-in name, or a custom GPT.
struct ModelFlags {
  std::string name = "gpt-1.3b";
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int64_t seq_len = 0;
  int64_t vocab = 0;

  void Add(CLI::App* cmd);
  sim::ModelSpec Resolve() const;
};

nlohmann::json ToJson(const sim::ParallelStrategy& s, const sim::IterationPrediction& p);

// --selection-overlap for the Frugal-pipeline commands (FrugalJob::selection_overlap).
void AddSelectionOverlapOption(CLI::App* cmd, double* overlap);

// --bytes-per-value and --merged-bytes-per-value for the Frugal-pipeline
// commands. 0 (default) is Frugal's default wire at the job's density: int4
// codes with varint block ids, merged updates as int8. A chunk figure given
// alone is used for merged updates too (fp16 or fp32 wires merge unchanged).
struct WireBytesFlags {
  double chunk = 0;
  double merged = 0;

  void Add(CLI::App* cmd);
  // Sets job->bytes_per_selected and merged_bytes_per_selected for job->density.
  void Apply(sim::FrugalJob* job) const;
};

// --sync, --local-steps, --local-fragments and --density for the
// Frugal-pipeline predictions (plan frugal, plan hybrid), with frugal train's
// defaults: the local mode, a round every 16 steps, every value of a round
// (density 1; 0.01 in the step mode).
struct SyncFlags {
  std::string sync = "local";
  int local_steps = 16;
  int local_fragments = 0;  // 0: frugal train's (sim::DefaultLocalFragments)
  double density = 0;       // 0: the mode's default
  std::string site_values = "bf16";  // --sync site: the gradient values a cluster's members send each other

  void Add(CLI::App* cmd);
  bool local() const { return sync == "local" || sync == "site"; }  // local-update rounds
  // Sets job->local_steps, local_fragments, density and the site replicas'
  // fields; UsageError on a
  // fragment count above the round's steps.
  void Apply(sim::FrugalJob* job) const;
};

// "a,b,,c" -> {a, b, c}; UsageError naming `flag` when nothing is left.
std::vector<std::string> SplitList(const std::string& text, const std::string& flag);

void AddSearch(CLI::App* plan);          // plan_search_command.cc
void AddFrugal(CLI::App* plan);          // plan_search_command.cc
void AddFrugalValidate(CLI::App* plan);  // plan_search_command.cc
void AddHybrid(CLI::App* plan);          // plan_hybrid_command.cc

}  // namespace frugal::cli
