// BandwidthController: picks the gradient density and each worker's batch
// size from measured bandwidth and compute speed (StellaTrain's controller).
// Runs on rank 0 behind engine::AdaptationPolicy. Torch-free; asks the
// planner (src/sim, PredictFrugalIteration) for iteration times.
//
// Rules, in order (Note [Controller] in bandwidth_controller.cc):
//  1. Bandwidth: per worker, bytes sent on its limiting link over the time a
//     message was in flight (idle time excluded); the slowest worker's
//     estimate is the run's; smoothed (EWMA), except that a sample below
//     half the estimate replaces it at once (fast decrease) and two
//     consecutive samples above twice the estimate do (slow increase).
//     Per worker, a LinkModel (link_model.h) fits busy time = messages *
//     alpha + bytes / beta over recent windows; where it has a fit, the
//     time prediction of a candidate density uses it (per-message latency
//     is not counted as lack of bandwidth), else the smoothed estimate.
//  2. Batch balance: batch sizes proportional to measured speed
//     (samples per compute second, smoothed), the global batch kept; only
//     when some worker's share moves by more than rebalance_threshold.
//  3. Density: the one maximising density^density_exponent / predicted
//     iteration time. With staleness 1 that is the highest density whose
//     exchange stays hidden behind compute; with staleness 0, where exposed
//     communication costs exponent / (1 - exponent) of compute. The
//     prediction prices the CPU stages (sparsify, decode + optimizer) at
//     rates calibrated from the slowest worker's measured seconds, so a
//     denser exchange is not free on a fast link
//     (Note [CPU stages priced]).
//  4. Floor: if that density is below `density_floor`, grow the global batch
//     (up to max_batch_growth) so compute time covers the floor density's
//     communication; the learning rate scales linearly with the batch
//     (Goyal et al. 2017).
//  5. Hysteresis: keep the current density unless the new one differs by
//     more than `change_ratio`; a change of the bandwidth estimate by more
//     than 2x since the last change acts at once; no increase within
//     `increase_cooldown` iterations of a decrease unless the link reads
//     3x faster than it did then (or a link model now separates latency
//     from bandwidth and the decrease was made without one).
//
// Thread safety: not thread-safe; used by one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/control/link_model.h"
#include "frugal/engine/adaptation.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::control {

struct ControllerOptions {
  std::string model = "mlp";          // zoo model, for the planner's workload
  std::vector<int> cluster_sizes;     // workers per cluster (rank order); empty = one cluster of all
  int64_t batch_per_worker = 64;      // the configured (initial) batch
  double bytes_per_value = 2.25;      // wire bytes per selected value (fp16 + block id / 16)
  double merged_bytes_per_value = 0;  // the same in merged updates (engine::MergedWireBytesPerValue); 0 = bytes_per_value
  int staleness = 0;                  // as the engine's default (docs/architecture.md)
  int pipeline_threads = 1;           // the workers' CPU pipeline threads (engine::ResolveCpuThreads)
  double min_density = 0.001;
  double max_density = 0.1;
  double density_floor = 0.002;       // below this, grow the batch instead
  double max_batch_growth = 4.0;      // global batch at most this times the configured one
  double hidden_tolerance = 0.05;     // floor rule: "covered" = within 5% of the compute-bound iteration
  // Statistical model: progress per iteration grows as density^exponent
  // (Note [Density objective] in bandwidth_controller.cc); the controller
  // maximises density^exponent / predicted iteration time. frugal train:
  // --adapt-density-exponent.
  double density_exponent = 0.5;
  double change_ratio = 1.6;          // hysteresis on density changes (the grid step is 1.155x)
  double smoothing = 0.5;             // weight of the newest bandwidth sample (below the estimate)
  double smoothing_up = 0.25;         // ... and above it (slow increase)
  double min_busy_s = 0.01;           // a worker's window with less link busy time ...
  double min_bytes = 64 * 1024;       // ... or fewer acknowledged bytes is not a bandwidth sample
  bool balance_batches = true;
  bool adapt_density = true;          // false: keep the density, balance batches only
  double rebalance_threshold = 0.2;   // change batches only if one moves by more than 20%
  int64_t increase_cooldown = 100;    // iterations after a decrease without an increase (unless the link reads 3x)
  int density_candidates = 33;        // geometric grid between min and max density
};

class BandwidthController : public engine::AdaptationPolicy {
 public:
  static Result<std::unique_ptr<BandwidthController>> Create(const ControllerOptions& options);

  engine::Decision Decide(int64_t t, const std::vector<engine::WorkerTelemetry>& telemetry,
                          const engine::Decision& current) override;

  // Smoothed estimate of the limiting link, Mbit/s (0 before any sample).
  double bandwidth_mbit() const { return bandwidth_mbit_.value_or(0.0); }

  // Rank r's fitted link model (nullopt: no fit yet); for tests and logs.
  std::optional<LinkFit> link_fit(int rank) const;

  // The rate (Mbit/s) the limiting link is predicted to achieve over one
  // iteration's exchange at density d: the slowest worker's bytes per
  // iteration at d (its last window's, scaled by d / that window's density)
  // over its fitted time for them. `fallback` when no worker has a fit
  // with a per-message cost (alpha > 0).
  double LinkRateMbit(double density, double fallback) const;

  // Predicted iteration time (s) at density d with the given telemetry-fed
  // compute time per sample and bandwidth, for `world` workers (split into
  // options.cluster_sizes when given); exposed for tests and plots.
  Result<double> PredictIteration(double density, int64_t batch_per_worker, double compute_s_per_sample,
                                  double bandwidth_mbit, int world) const;

 private:
  BandwidthController(ControllerOptions options, sim::ModelSpec model, sim::HardwareSpec hw)
      : options_(std::move(options)), model_(std::move(model)), hw_(std::move(hw)) {}

  // The planner's prediction with the given CPU stage rates (GB/s).
  Result<sim::FrugalPrediction> PredictStages(double density, int64_t batch_per_worker, double compute_s_per_sample,
                                              double bandwidth_mbit, int world, double sparsify_gbs,
                                              double optimizer_gbs) const;
  // Rule 3: calibrates the CPU stage rates from the slowest worker's
  // sparsify and optimizer seconds per iteration at `density`
  // (Note [CPU stages priced] in bandwidth_controller.cc).
  void UpdateCpuRates(const std::vector<engine::WorkerTelemetry>& telemetry, double density,
                      int64_t batch_per_worker, double compute_s_per_sample);
  // Rule 1: folds the slowest worker's sample (Mbit/s) into the estimate.
  void UpdateBandwidthEstimate(double sample_mbit);
  // Per-rank compute speed (samples per compute second), smoothed.
  std::vector<double> UpdateSpeeds(const std::vector<engine::WorkerTelemetry>& telemetry);
  // Rule 5: whether the proposed density (with its lr scale) may replace
  // the current one at iteration t, the link reading `bw` Mbit/s.
  bool DensityMayChange(int64_t t, double best, double bw, double lr_scale, const engine::Decision& current) const;
  void RecordDensityChange(int64_t t, double from, double to, double bw);
  // Whether some worker's link model has a separated fit with alpha > 0.
  bool HasSeparatedLinkModel() const;
  // Rule 1, per worker: adds the measurable windows to the link models.
  void UpdateLinkModels(const std::vector<engine::WorkerTelemetry>& telemetry, double density);

  // A worker's traffic per iteration in its last measured window.
  struct Traffic {
    double messages = 0;
    double bytes = 0;
    double density = 0;  // the density that window ran at
  };

  ControllerOptions options_;
  sim::ModelSpec model_;
  sim::HardwareSpec hw_;
  std::optional<double> bandwidth_mbit_;
  double bandwidth_at_last_change_ = 0;
  int64_t last_decrease_t_ = -(int64_t{1} << 40);  // iteration of the last density decrease
  double bandwidth_at_last_decrease_ = 0;
  bool decrease_used_link_model_ = false;  // the last decrease was predicted with a separated link model
  std::vector<double> speed_ewma_;  // samples per compute second, per rank
  int last_off_side_ = 0;           // +1/-1: the last sample was > 2x above/below the estimate
  std::vector<LinkModel> link_models_;  // per rank
  std::vector<Traffic> last_traffic_;   // per rank
  // CPU stage rates calibrated from telemetry (GB/s); unset: unpriced.
  static constexpr double kUnpricedGbs = 1e6;
  std::optional<double> cpu_sparsify_gbs_;
  std::optional<double> cpu_optimizer_gbs_;
};

}  // namespace frugal::control
