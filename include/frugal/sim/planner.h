// Strategy search (`frugal plan search`): enumerate every feasible
// (hardware, GPU count, TP, PP, DP, micro-batch, schedule, recomputation),
// drop the ones that do not fit in device memory, simulate the rest and rank
// them by time and by dollar cost for a token budget.
//
// Thread safety: pure function; uses one Simulator per hardware description.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/simulator.h"
#include "frugal/sim/workload.h"

namespace frugal::sim {

struct SearchOptions {
  int gpus = 8;                    // Largest GPU count (and the only one unless min_gpus is set).
  int min_gpus = 0;                // 0: only `gpus`; else also every power of two in [min_gpus, gpus).
  int64_t global_batch = 1536;     // Samples per iteration; default 1536 (GPT-3).
  double training_tokens = 300e9;  // Token (sample, for zoo models) budget; default 300e9.
  int top = 10;                    // Candidates kept per ranking; default 10.
  std::vector<int64_t> micro_batches = {1, 2, 4, 8};
  std::vector<PipelineSchedule> schedules = {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B,
                                             PipelineSchedule::kInterleaved1F1B};
  std::vector<int> interleave_chunks = {2, 3, 4};
  std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
};

struct Candidate {
  std::string hardware;
  ParallelStrategy strategy;
  IterationPrediction prediction;
  double run_hours = 0;    // Wall-clock time for the token budget.
  double run_dollars = 0;  // GPUs x hours x price per GPU-hour.
};

struct SearchResult {
  std::vector<Candidate> by_time;  // Shortest run first.
  std::vector<Candidate> by_cost;  // Cheapest run first.
  int enumerated = 0;              // Shape-valid strategies considered.
  int out_of_memory = 0;
  int simulated = 0;
};

// InvalidArgument for bad options. Finding nothing feasible is not an error:
// the rankings are empty and out_of_memory tells why.
Result<SearchResult> SearchStrategies(const ModelSpec& model, const std::vector<HardwareSpec>& hardware,
                                      const SearchOptions& options);

// Data-parallel step time for the cluster scheduler (its ThroughputModel
// adapter calls this): `shape` is the GPUs used on each node (e.g. {2, 4}),
// `global_batch` the samples per optimizer step, split evenly over the GPUs
// (rounded up). Picks the largest micro-batch (power of two dividing the
// per-GPU batch, or the whole per-GPU batch) that fits in memory, with
// gradient accumulation, full recomputation for transformers. The gradient
// all-reduce spans shape.size() nodes, modelled with equal GPU shares.
struct DataParallelStep {
  double step_s = 0;         // +inf when no micro-batch fits in memory.
  int64_t micro_batch = 0;   // 0 when nothing fits.
  int64_t per_gpu_batch = 0;
};
Result<DataParallelStep> PredictDataParallelStep(const ModelSpec& model, const HardwareSpec& hw,
                                                 const std::vector<int>& shape, int64_t global_batch);

}  // namespace frugal::sim
