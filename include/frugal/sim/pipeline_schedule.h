// Pipeline-parallel schedules: the order in which each pipeline stage runs
// the forward and backward passes of its micro-batches.
//
//   kGPipe:            all forwards, then all backwards (Huang et al. 2019).
//   k1F1B:             p-s-1 warm-up forwards, then one forward / one
//                      backward alternately (PipeDream-Flush, Narayanan 2021).
//   kInterleaved1F1B:  each stage holds `chunks` model chunks (virtual
//                      stages), visited in groups of p micro-batches;
//                      needs microbatches % stages == 0 (Narayanan 2021).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::sim {

enum class PipelineSchedule { kGPipe, k1F1B, kInterleaved1F1B };

struct PipelineStep {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;  // Local chunk on the stage, 0..chunks-1; virtual stage = chunk * stages + stage.
};

// Returns one step list per stage. `chunks` must be 1 unless interleaved.
Result<std::vector<std::vector<PipelineStep>>> BuildPipelineSchedule(PipelineSchedule schedule, int stages,
                                                                     int microbatches, int chunks);

// Largest number of (micro-batch, chunk) activations a stage holds at once.
int MaxInFlight(const std::vector<PipelineStep>& steps);

const char* ScheduleName(PipelineSchedule schedule);
// Accepts "gpipe", "1f1b", "interleaved" (case-insensitive).
Result<PipelineSchedule> ParseSchedule(const std::string& text);

}  // namespace frugal::sim
