#include "frugal/sim/planner.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace frugal::sim {
namespace {

std::vector<int> GpuCounts(const SearchOptions& o) {
  std::vector<int> counts;
  if (o.min_gpus > 0) {
    for (int n = 1; n < o.gpus; n *= 2) {
      if (n >= o.min_gpus) counts.push_back(n);
    }
  }
  counts.push_back(o.gpus);
  return counts;
}

// The strategy variants for one (tp, pp, dp, micro-batch) shape.
std::vector<ParallelStrategy> Variants(const ParallelStrategy& base, int64_t microbatches, int layers,
                                       bool is_transformer, const SearchOptions& o) {
  std::vector<ParallelStrategy> out;
  for (PipelineSchedule sched : o.schedules) {
    std::vector<int> chunk_options = {1};
    if (sched == PipelineSchedule::kInterleaved1F1B) {
      if (base.pipeline_parallel == 1 || microbatches % base.pipeline_parallel != 0) continue;
      chunk_options.clear();
      for (int c : o.interleave_chunks) {
        if (c > 1 && (layers / base.pipeline_parallel) % c == 0) chunk_options.push_back(c);
      }
    } else if (sched == PipelineSchedule::kGPipe && base.pipeline_parallel == 1) {
      continue;  // Same as 1F1B without a pipeline.
    }
    for (int chunks : chunk_options) {
      for (Recompute r : o.recomputes) {
        if (!is_transformer && r != o.recomputes.front()) break;  // Recomputation only matters for transformers.
        ParallelStrategy s = base;
        s.schedule = sched;
        s.chunks = chunks;
        s.recompute = r;
        s.sequence_parallel = s.tensor_parallel > 1;
        out.push_back(s);
      }
    }
  }
  return out;
}

}  // namespace

Result<SearchResult> SearchStrategies(const ModelSpec& model, const std::vector<HardwareSpec>& hardware,
                                      const SearchOptions& o) {
  if (o.gpus <= 0 || o.global_batch <= 0 || o.top <= 0 || o.training_tokens <= 0) {
    return Status::InvalidArgument("GPUs, global batch, top and training tokens must be positive");
  }
  if (hardware.empty()) return Status::InvalidArgument("no hardware to search");
  SearchResult result;
  std::vector<Candidate> all;
  const int layers = model.is_transformer ? model.transformer.layers : 1;
  const int heads = model.is_transformer ? model.transformer.heads : 1;
  const double samples = model.is_transformer ? o.training_tokens / model.transformer.seq_len : o.training_tokens;
  const double iterations = samples / static_cast<double>(o.global_batch);
  for (const HardwareSpec& hw : hardware) {
    Simulator sim(hw);
    for (int n : GpuCounts(o)) {
      for (int tp = 1; tp <= std::min(hw.gpus_per_node, heads); tp *= 2) {
        if (heads % tp != 0 || n % tp != 0) continue;
        for (int pp = 1; pp <= layers; ++pp) {
          if (layers % pp != 0 || n % (tp * pp) != 0) continue;
          if (!model.is_transformer && pp > 1) break;
          const int dp = n / (tp * pp);
          if (o.global_batch % dp != 0) continue;
          std::vector<int64_t> micro_batches = o.micro_batches;
          // Small models need no gradient accumulation: try the whole per-replica batch.
          if (!model.is_transformer) micro_batches.push_back(o.global_batch / dp);
          std::sort(micro_batches.begin(), micro_batches.end());
          micro_batches.erase(std::unique(micro_batches.begin(), micro_batches.end()), micro_batches.end());
          for (int64_t mb : micro_batches) {
            if ((o.global_batch / dp) % mb != 0) continue;
            ParallelStrategy base;
            base.tensor_parallel = tp;
            base.pipeline_parallel = pp;
            base.data_parallel = dp;
            base.micro_batch = mb;
            base.global_batch = o.global_batch;
            const int64_t microbatches = o.global_batch / dp / mb;
            for (const ParallelStrategy& s : Variants(base, microbatches, layers, model.is_transformer, o)) {
              ++result.enumerated;
              Result<MemoryEstimate> mem = sim.EstimateMemory(model, s);
              if (!mem.ok()) continue;
              if (mem->oom()) {
                ++result.out_of_memory;
                continue;
              }
              Result<IterationPrediction> pred = sim.Predict(model, s);
              if (!pred.ok()) continue;
              ++result.simulated;
              Candidate c;
              c.hardware = hw.name;
              c.strategy = s;
              c.prediction = *pred;
              c.run_hours = iterations * pred->iteration_s / 3600.0;
              c.run_dollars = c.run_hours * n * hw.price_per_gpu_hour;
              all.push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  auto keep = [&o](std::vector<Candidate> v, auto less) {
    std::stable_sort(v.begin(), v.end(), less);
    if (v.size() > static_cast<size_t>(o.top)) v.resize(o.top);
    return v;
  };
  result.by_time = keep(all, [](const Candidate& a, const Candidate& b) { return a.run_hours < b.run_hours; });
  result.by_cost = keep(all, [](const Candidate& a, const Candidate& b) { return a.run_dollars < b.run_dollars; });
  return result;
}

Result<DataParallelStep> PredictDataParallelStep(const ModelSpec& model, const HardwareSpec& hw,
                                                 const std::vector<int>& shape, int64_t global_batch) {
  if (shape.empty() || global_batch <= 0) return Status::InvalidArgument("shape must be non-empty and batch positive");
  for (int g : shape) {
    if (g <= 0) return Status::InvalidArgument("every node in the shape needs at least one GPU");
  }
  const int gpus = std::accumulate(shape.begin(), shape.end(), 0);
  HardwareSpec placed = hw;
  // The all-reduce crosses shape.size() nodes with gpus / nodes GPUs each on
  // average (the analytic network model assumes equal shares per node).
  placed.gpus_per_node = std::max(1, gpus / static_cast<int>(shape.size()));
  DataParallelStep out;
  out.per_gpu_batch = (global_batch + gpus - 1) / gpus;
  std::vector<int64_t> candidates = {out.per_gpu_batch};
  for (int64_t mb = 1; mb < out.per_gpu_batch; mb *= 2) {
    if (out.per_gpu_batch % mb == 0) candidates.push_back(mb);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  Simulator sim(placed);
  for (int64_t mb : candidates) {
    ParallelStrategy s;
    s.data_parallel = gpus;
    s.micro_batch = mb;
    s.global_batch = out.per_gpu_batch * gpus;
    s.recompute = model.is_transformer ? Recompute::kFull : Recompute::kNone;
    FRUGAL_ASSIGN_OR_RETURN(MemoryEstimate mem, sim.EstimateMemory(model, s));
    if (mem.oom()) continue;
    FRUGAL_ASSIGN_OR_RETURN(IterationPrediction p, sim.Predict(model, s));
    out.step_s = p.iteration_s;
    out.micro_batch = mb;
    return out;
  }
  out.step_s = std::numeric_limits<double>::infinity();
  return out;
}

}  // namespace frugal::sim
