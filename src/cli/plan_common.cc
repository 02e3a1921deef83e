#include "plan_common.h"

#include <sstream>

#include "frugal/compress/codec.h"
#include "input_checks.h"

namespace frugal::cli {

void AddSelectionOverlapOption(CLI::App* cmd, double* overlap) {
  cmd->add_option("--selection-overlap", *overlap,
                  "How much the workers' sparse selections coincide, 0-1 (0: independent, an upper bound on the "
                  "merged volume; a run's metrics.jsonl reports the measured merged_density; docs/design/planner.md)")
      ->capture_default_str()
      ->check(Bounded(0, 1));
}

void WireBytesFlags::Add(CLI::App* cmd) {
  cmd->add_option("--bytes-per-value", chunk,
                  "Wire bytes per selected value (0: Frugal's default, int4 codes with varint block ids, about "
                  "0.57; fp16 with block ids: 2.25)")
      ->capture_default_str()
      ->check(Bounded(0, 64));
  cmd->add_option("--merged-bytes-per-value", merged,
                  "Wire bytes per value of merged updates (0: int8 codes for Frugal's default wire, about 1.07, "
                  "or --bytes-per-value when that is given)")
      ->capture_default_str()
      ->check(Bounded(0, 64));
}

void WireBytesFlags::Apply(sim::FrugalJob* job) const {
  job->bytes_per_selected = chunk > 0 ? chunk : compress::DefaultChunkBytesPerValue(job->density);
  if (merged > 0) {
    job->merged_bytes_per_selected = merged;
  } else {
    job->merged_bytes_per_selected = chunk > 0 ? chunk : compress::DefaultMergedBytesPerValue(job->density);
  }
}

void SyncFlags::Add(CLI::App* cmd) {
  cmd->add_option("--sync", sync,
                  "Mode, as frugal train's: local (its default: a round of parameter changes every "
                  "--local-steps steps), site (local with one replica per cluster, whose members average "
                  "gradients every step) or step (a sparse gradient exchange every step)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "site", "step"}));
  cmd->add_option("--local-steps", local_steps, "--sync local: inner steps per round")
      ->capture_default_str()
      ->check(Bounded(1, sim::kMaxLocalSteps));
  cmd->add_option("--local-fragments", local_fragments,
                  "--sync local: fragments per round (0: frugal train's, the largest divisor of --local-steps up to 4)")
      ->capture_default_str()
      ->check(Bounded(0, sim::kMaxLocalSteps));
  cmd->add_option("--site-values", site_values,
                  "--sync site: gradient values a cluster's members send each other every step (bf16 or fp32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->add_option("--density", density,
                  "Fraction of values exchanged (0: the mode's default, 1 for local, 0.01 for step)")
      ->capture_default_str()
      ->check(Bounded(0, 1));
}

void SyncFlags::Apply(sim::FrugalJob* job) const {
  ThrowIfError(sim::SetFrugalMode(job, sync, local_steps, local_fragments, density, site_values));
}

void ModelFlags::Add(CLI::App* cmd) {
  // Bounds far above the largest published models (GPT-1T: 128 layers,
  // hidden 25600, 160 heads), so that a typo is named, not simulated.
  cmd->add_option("--model", name, "Built-in model (gpt-125m ... gpt-1t, mlp, cnn, resnet18)")->capture_default_str();
  cmd->add_option("--layers", layers, "Custom GPT: number of layers (overrides the model's)")
      ->capture_default_str()
      ->check(Bounded(0, 10000));
  cmd->add_option("--hidden", hidden, "Custom GPT: hidden size")->capture_default_str()->check(Bounded(0, 1 << 20));
  cmd->add_option("--heads", heads, "Custom GPT: attention heads")->capture_default_str()->check(Bounded(0, 10000));
  cmd->add_option("--seq-len", seq_len, "Sequence length (default 2048)")
      ->capture_default_str()
      ->check(Bounded(0, 1 << 24));
  cmd->add_option("--vocab", vocab, "Vocabulary size (default 51200)")
      ->capture_default_str()
      ->check(Bounded(0, 1 << 24));
}

sim::ModelSpec ModelFlags::Resolve() const {
  sim::ModelSpec m = OrThrow(sim::BuiltinModel(name));
  if (!m.is_transformer) {
    if (layers || hidden || heads || seq_len || vocab) {
      throw UsageError("--layers/--hidden/--heads/--seq-len/--vocab apply to GPT models only");
    }
    return m;
  }
  if (layers > 0) m.transformer.layers = layers;
  if (hidden > 0) m.transformer.hidden = hidden;
  if (heads > 0) m.transformer.heads = heads;
  if (seq_len > 0) m.transformer.seq_len = seq_len;
  if (vocab > 0) m.transformer.vocab = vocab;
  return m;
}

nlohmann::json ToJson(const sim::ParallelStrategy& s, const sim::IterationPrediction& p) {
  nlohmann::json mem = {{"total_bytes", p.memory.total_bytes},
                        {"capacity_bytes", p.memory.capacity_bytes},
                        {"weights_bytes", p.memory.weights_bytes},
                        {"gradients_bytes", p.memory.gradients_bytes},
                        {"optimizer_bytes", p.memory.optimizer_bytes},
                        {"activation_bytes", p.memory.activation_bytes},
                        {"reserved_bytes", p.memory.reserved_bytes},
                        {"max_in_flight", p.memory.max_in_flight},
                        {"worst_stage", p.memory.worst_stage},
                        {"oom", p.memory.oom()}};
  nlohmann::json resources = nlohmann::json::object();
  for (const auto& [name, busy] : p.resource_busy) resources[name] = busy;
  return {{"strategy", s.ToString()},
          {"tp", s.tensor_parallel},
          {"pp", s.pipeline_parallel},
          {"dp", s.data_parallel},
          {"micro_batch", s.micro_batch},
          {"global_batch", s.global_batch},
          {"schedule", sim::ScheduleName(s.schedule)},
          {"chunks", s.chunks},
          {"recompute", sim::RecomputeName(s.recompute)},
          {"iteration_s", p.iteration_s},
          {"compute_s", p.compute_s},
          {"tp_comm_s", p.tp_comm_s},
          {"pp_comm_s", p.pp_comm_s},
          {"dp_comm_s", p.dp_comm_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"bubble_fraction", p.bubble_fraction},
          {"achieved_tflops_per_gpu", p.achieved_tflops_per_gpu},
          {"model_tflops_per_gpu", p.model_tflops_per_gpu},
          {"memory", mem},
          {"resource_busy_s", resources}};
}

std::vector<std::string> SplitList(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  if (out.empty()) throw UsageError(flag + ": give at least one name, got '" + text + "'");
  return out;
}

}  // namespace frugal::cli
