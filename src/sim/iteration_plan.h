// The facts of one parallel strategy that memory estimation and the
// iteration's task graph share (internal to src/sim; built by PlanBuilder in
// simulator.cc).
#pragma once

#include <vector>

#include "frugal/sim/pipeline_schedule.h"
#include "frugal/sim/workload.h"

namespace frugal::sim::internal {

// Everything one model chunk (virtual pipeline stage) needs per micro-batch.
struct ChunkCost {
  double fwd = 0;        // Task duration of a forward (compute + TP comm).
  double bwd = 0;        // Task duration of a backward (incl. recomputation).
  double tp_comm = 0;    // TP all-reduce share of fwd + bwd.
  double flops = 0;      // Executed FLOPs per micro-batch.
  double model_flops = 0;
  double params = 0;
  double activation = 0;     // Saved activation bytes per micro-batch.
  double working_set = 0;    // Extra bytes while one block is recomputed.
};

// The per-strategy facts shared by memory estimation and simulation.
struct Plan {
  Workload workload;
  int t = 1, p = 1, d = 1, v = 1, m = 1;
  std::vector<ChunkCost> chunks;  // By virtual stage, chunk * p + stage.
  std::vector<std::vector<PipelineStep>> steps;
};

// Bytes of optimizer state per parameter.
inline int OptimizerStateBytes(const ModelSpec& model) {
  // Mixed precision keeps fp32 master weights + Adam m and v (12 bytes);
  // fp32 training keeps m and v (8 bytes).
  return model.bytes_per_value <= 2 ? 12 : 8;
}

}  // namespace frugal::sim::internal
