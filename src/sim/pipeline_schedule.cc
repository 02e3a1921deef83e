#include "frugal/sim/pipeline_schedule.h"

#include <algorithm>
#include <cctype>

namespace frugal::sim {

Result<std::vector<std::vector<PipelineStep>>> BuildPipelineSchedule(PipelineSchedule schedule, int p, int m,
                                                                     int v) {
  if (p <= 0 || m <= 0 || v <= 0) {
    return Status::InvalidArgument("pipeline stages, micro-batches and chunks must be positive");
  }
  if (schedule != PipelineSchedule::kInterleaved1F1B && v != 1) {
    return Status::InvalidArgument("only the interleaved schedule has more than one chunk per stage");
  }
  if (schedule == PipelineSchedule::kInterleaved1F1B && m % p != 0) {
    return Status::InvalidArgument("the interleaved schedule needs the number of micro-batches (" + std::to_string(m) +
                                   ") to be a multiple of the pipeline stages (" + std::to_string(p) + ")");
  }
  std::vector<std::vector<PipelineStep>> stages(p);
  for (int s = 0; s < p; ++s) {
    std::vector<PipelineStep>& out = stages[s];
    out.reserve(2 * static_cast<size_t>(m) * v);
    switch (schedule) {
      case PipelineSchedule::kGPipe:
        for (int i = 0; i < m; ++i) out.push_back({true, i, 0});
        for (int i = 0; i < m; ++i) out.push_back({false, i, 0});
        break;
      case PipelineSchedule::k1F1B: {
        const int warmup = std::min(p - s - 1, m);
        for (int i = 0; i < warmup; ++i) out.push_back({true, i, 0});
        for (int i = 0; i < m - warmup; ++i) {
          out.push_back({true, warmup + i, 0});
          out.push_back({false, i, 0});
        }
        for (int i = m - warmup; i < m; ++i) out.push_back({false, i, 0});
        break;
      }
      case PipelineSchedule::kInterleaved1F1B: {
        // Step k of a stage maps to micro-batch and chunk in groups of p
        // micro-batches; backwards visit the chunks in reverse.
        const int total = m * v;
        auto step = [p, v](int k, bool forward) {
          const int group = k / (p * v);
          int chunk = (k / p) % v;
          if (!forward) chunk = v - 1 - chunk;
          return PipelineStep{forward, group * p + k % p, chunk};
        };
        int warmup = (m == p) ? total : std::min(total, (p - s - 1) * 2 + (v - 1) * p);
        for (int k = 0; k < warmup; ++k) out.push_back(step(k, true));
        for (int i = 0; i < total - warmup; ++i) {
          out.push_back(step(warmup + i, true));
          out.push_back(step(i, false));
        }
        for (int k = total - warmup; k < total; ++k) out.push_back(step(k, false));
        break;
      }
    }
  }
  return stages;
}

int MaxInFlight(const std::vector<PipelineStep>& steps) {
  int live = 0, peak = 0;
  for (const PipelineStep& st : steps) {
    live += st.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

const char* ScheduleName(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved1F1B:
      return "interleaved";
  }
  return "?";
}

Result<PipelineSchedule> ParseSchedule(const std::string& text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "gpipe") return PipelineSchedule::kGPipe;
  if (t == "1f1b") return PipelineSchedule::k1F1B;
  if (t == "interleaved" || t == "interleaved-1f1b" || t == "interleaved1f1b") return PipelineSchedule::kInterleaved1F1B;
  return Status::InvalidArgument("unknown pipeline schedule '" + text + "' (expected gpipe, 1f1b or interleaved)");
}

}  // namespace frugal::sim
