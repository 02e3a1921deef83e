// Validation and calibration of the simulator against measured iteration
// times (`frugal plan validate`, `frugal plan calibrate`).
//
// Measurement CSV: one header line naming the columns (order free, case and
// surrounding spaces ignored, UTF-8 BOM tolerated, '#'-prefixed comment lines
// allowed before the header only if they are not the header itself):
//   # GPUs,global batch,micro batch,hidden size,attention heads,# layers,
//   sequence length,tensor parallelism,data parallelism,pipeline parallelism,
//   iteration time (ms)
// Optional columns: "Parameters (billion)" (informational) and "schedule"
// (gpipe, 1f1b, interleaved:<chunks>) overriding the default per row.
// Every row describes a GPT decoder; # GPUs must equal TP x DP x PP.
//
// Thread safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/cost_model.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/simulator.h"

namespace frugal::sim {

struct MeasuredRow {
  int line = 0;  // 1-based line in the file.
  double params_billion = 0;
  int gpus = 0;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  int64_t hidden = 0;
  int heads = 0;
  int layers = 0;
  int64_t seq_len = 0;
  int tensor_parallel = 0;
  int data_parallel = 0;
  int pipeline_parallel = 0;
  double iteration_ms = 0;
  bool has_schedule = false;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int chunks = 1;
};

// Corruption errors name the file and line: "t.csv:7: 'micro batch' ...".
Result<std::vector<MeasuredRow>> ParseMeasurementsCsv(const std::string& text, const std::string& source_name);
Result<std::vector<MeasuredRow>> LoadMeasurementsCsv(const std::string& path);

struct ValidationOptions {
  int gpus_per_node = 0;        // 0: keep the hardware description's.
  double inter_node_gbps = 0;   // 0: keep the hardware description's.
  int64_t vocab = 51200;        // Default 51200 (Megatron-LM's padded GPT-2 vocabulary).
  Recompute recompute = Recompute::kFull;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  // Rows without a schedule column.
  int chunks = 1;               // For the interleaved default schedule.
  bool sequence_parallel = false;
  bool fused_softmax_any_batch = false;  // ParallelStrategy's; default false.
  bool overlap_dp = true;
  // Measured operator times used instead of the roofline where they hold an
  // operator (`--profile-db`). Default none.
  std::shared_ptr<const ProfileDatabase> profile_db;
};

struct RowResult {
  MeasuredRow row;
  ParallelStrategy strategy;
  double predicted_ms = 0;
  double error_pct = 0;         // (predicted - measured) / measured x 100.
  double achieved_tflops = 0;   // Predicted, per GPU.
  bool oom = false;
};

struct ValidationReport {
  std::vector<RowResult> rows;
  double mape_pct = 0;
};

// Fails if any row cannot be simulated (message names the row's line).
Result<ValidationReport> Validate(const std::vector<MeasuredRow>& rows, const HardwareSpec& hw,
                                  const ValidationOptions& options);

// MAPE of the rows that share one value of one dimension, so the shape of
// the error is visible: dimension "tp", "pp", "dp", "micro batch"
// or "model" (value "h<hidden> l<layers>").
struct MapeGroup {
  std::string dimension;
  std::string value;
  int rows = 0;
  double mape_pct = 0;
  double mean_error_pct = 0;  // Signed: negative = predicted too fast.
};
// Groups in dimension order (tp, pp, dp, micro batch, model), values ascending.
std::vector<MapeGroup> MapeBreakdown(const ValidationReport& report);

struct CalibrationOptions {
  int max_evaluations = 300;  // Default 300 validation runs.
  // Subset of: matmul_max, matmul_half_dim, memory, intra_link, inter_link,
  // kernel_overhead_us, dispatch_us, collective_latency_us, p2p_latency_us,
  // microbatch_overhead_us, iteration_overhead_us. Default: the first five.
  std::vector<std::string> parameters = {"matmul_max", "matmul_half_dim", "memory", "intra_link", "inter_link"};
  // Ridge penalty keeping parameters near their starting values: added to the
  // MAPE (in percentage points) per squared unit of distance in the search
  // space (logit of the parameter within its bounds). Stops a few rows from
  // pushing parameters they barely exercise to their bounds. Default 0.5; 0
  // fits MAPE alone.
  double prior_weight = 0.5;
};

struct CalibrationResult {
  HardwareSpec hardware;  // With fitted efficiency parameters.
  double mape_before_pct = 0;
  double mape_after_pct = 0;
  int evaluations = 0;
};

// Fits the chosen global efficiency parameters of `hw` to minimise MAPE over
// `rows` plus the prior penalty (Nelder-Mead in a bounded, transformed space).
// mape_after_pct is the MAPE of the returned parameters, without the penalty.
Result<CalibrationResult> Calibrate(const std::vector<MeasuredRow>& rows, const HardwareSpec& hw,
                                    const ValidationOptions& validation, const CalibrationOptions& options);

}  // namespace frugal::sim
