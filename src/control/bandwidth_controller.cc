#include "frugal/control/bandwidth_controller.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>

#include "frugal/sim/frugal_pipeline.h"

namespace frugal::control {

// Note [Controller]
// Why "highest hidden density" (staleness 1): with staleness 1 an iteration costs
// max(compute, CPU stages + exchange); while the exchange fits behind
// compute, a higher density is free in wall time and sends more of each
// gradient now instead of leaving it in the error-feedback residual (which
// costs iterations: sparse updates slow convergence). Beyond that point every
// extra byte lengthens every iteration. So the fastest time to accuracy is
// at (or very near) the largest density the link can hide, which the planner
// predicts from the measured bandwidth and compute time. Below the floor the
// link is too slow to carry even a useful trickle per iteration: a larger
// batch makes each iteration longer and more valuable (fewer iterations for
// the same samples), so the same bytes are amortised over more samples.
//
// Note [Density objective]
// The controller maximises density^a / predicted iteration time: progress
// per second, with progress per iteration modelled as density^a. Measured
// on mlp (4 workers, fluctuating WAN, same data order and schedule, fixed
// densities): steps to 85% test accuracy 700 at 0.25%, 500 at 0.5%, 425 at
// 1%, 350 at 2%, i.e. a = 0.23-0.28 between 0.5% and 2% and more below;
// a = 0.3. With staleness 1 the iteration time is flat while the exchange
// hides behind compute and grows ~linearly beyond, so the optimum is the
// knee, the highest hidden density. With staleness 0 the exchange of the
// last bucket is exposed, and the optimum is where the exposed
// communication costs a/(1-a) of compute.
//
// The default is a = 0.5, because the exponent grows with the target. To
// 85% it is 0.23-0.28 (above); to the benchmarks' high target (DDP's final
// accuracy minus 0.3 points) a fixed 3% never arrives within 3 epochs on mlp
// while 8.7-10% does, at 1.47x the iteration time on the loopback testbed,
// which needs a > log 1.47 / log 3 = 0.35. With the CPU stages priced
// (Note [CPU stages priced]), a = 0.3 settles at about 5.5% at 1 Gbit/s and
// misses the high target; at a = 0.5 the exposed communication may cost as
// much as compute.
//
// The time prediction of a candidate density uses each worker's fitted
// link model (Note [Link model] in link_model.cc) where it has one: bytes
// over busy time counts per-message latency as lack of bandwidth, which on
// cnn (small messages, late acks on busy cores) read 12-50 Mbit/s on a
// 100 Mbit/s link and lowered the density to 0.3% where 4% was best.
//
// Bandwidth is measured as bytes over busy time: a link that is used only
// 20% of the time still reports what it carries while in use, so an increase
// of capacity shows up at the next transfer without a separate probe. When
// a window carries too little to be measured (less than min_busy_s of
// transfers: tiny, latency-bound messages), the density is raised by the
// hysteresis ratio instead, so the next window can be measured.

Result<std::unique_ptr<BandwidthController>> BandwidthController::Create(const ControllerOptions& o) {
  if (!(o.min_density > 0) || o.max_density > 1 || o.min_density > o.max_density) {
    return Status::InvalidArgument("controller densities must satisfy 0 < min <= max <= 1");
  }
  if (o.batch_per_worker <= 0) return Status::InvalidArgument("batch per worker must be positive");
  if (o.max_batch_growth < 1) return Status::InvalidArgument("max batch growth must be >= 1");
  if (o.density_candidates < 2) return Status::InvalidArgument("need at least 2 density candidates");
  FRUGAL_ASSIGN_OR_RETURN(sim::ModelSpec model, sim::BuiltinModel(o.model));
  FRUGAL_ASSIGN_OR_RETURN(sim::HardwareSpec hw, sim::BuiltinHardware("cpu-local"));
  return std::unique_ptr<BandwidthController>(new BandwidthController(o, std::move(model), std::move(hw)));
}

Result<double> BandwidthController::PredictIteration(double density, int64_t batch_per_worker,
                                                     double compute_s_per_sample, double bandwidth_mbit,
                                                     int world) const {
  FRUGAL_ASSIGN_OR_RETURN(sim::FrugalPrediction p,
                          PredictStages(density, batch_per_worker, compute_s_per_sample, bandwidth_mbit, world,
                                        cpu_sparsify_gbs_.value_or(kUnpricedGbs),
                                        cpu_optimizer_gbs_.value_or(kUnpricedGbs)));
  return p.iteration_s;
}

Result<sim::FrugalPrediction> BandwidthController::PredictStages(double density, int64_t batch_per_worker,
                                                                 double compute_s_per_sample, double bandwidth_mbit,
                                                                 int world, double sparsify_gbs,
                                                                 double optimizer_gbs) const {
  sim::FrugalJob job;
  job.model = model_;
  job.batch_per_worker = batch_per_worker;
  job.density = density;
  job.bytes_per_selected = options_.bytes_per_value;
  job.merged_bytes_per_selected = options_.merged_bytes_per_value;
  job.staleness = options_.staleness;
  job.pipeline_threads = std::max(1, options_.pipeline_threads);
  job.compute_s_per_sample = std::max(compute_s_per_sample, 1e-9);
  job.shared_cpu = false;  // measured compute already includes the contention it sees
  const double gbps = std::max(bandwidth_mbit, 1e-3) / 1000.0;
  std::vector<int> sizes = options_.cluster_sizes;
  if (sizes.empty()) sizes = {world};
  job.clusters.clear();
  for (int n : sizes) job.clusters.push_back(sim::ClusterSpec{n, sizes.size() > 1 ? 1e6 : gbps});
  job.inter_cluster_gbps = gbps;
  job.inter_cluster_latency_ms = 0;
  sim::HardwareSpec hw = hw_;
  // The measured compute time already contains whatever contention the
  // worker sees, so the compute stream is modelled as its own resource.
  hw.is_cpu = false;
  hw.efficiency.inter_link = 1.0;  // the estimate is already an achieved rate
  hw.host.cpu_sparsify_gbs = sparsify_gbs;  // measured rates (Note [CPU stages priced])
  hw.host.cpu_optimizer_gbs = optimizer_gbs;
  // The engine's optimizer seconds include decoding and merging the peers'
  // chunks (gradient_pipeline.cc), so the measured optimizer rate already
  // prices the combine; the planner's own combine stage would count it twice.
  hw.host.cpu_combine_gbs = kUnpricedGbs;
  hw.host.pcie_gbs = 1e6;
  return sim::PredictFrugalIteration(job, hw);
}

// Note [CPU stages priced]
// A denser exchange costs CPU time as well as bytes: decoding the peers'
// contributions and the sparse optimizer step grow with the merged density
// (sparsifying is a scan of the whole gradient and does not). With these
// stages unpriced the controller saw a denser exchange as free on a fast
// link: on loopback (mlp, 4 workers on 2 cores) it chose 8.4-10%, where the
// iteration took 0.163 s against 0.110 s at 3%. Each window, the slowest
// worker's sparsify and optimizer seconds per iteration, at the density it
// ran, calibrate the planner's two CPU rates (its stage times are linear in
// 1 / rate, so a prediction at 1 GB/s gives the scale); the candidates are
// then priced with the stage that grows with density.
void BandwidthController::UpdateCpuRates(const std::vector<engine::WorkerTelemetry>& telemetry, double density,
                                         int64_t batch_per_worker, double compute_s_per_sample) {
  double sparsify = 0, optimizer = 0;
  for (const auto& w : telemetry) {
    if (w.iterations <= 0) continue;
    sparsify = std::max(sparsify, w.sparsify_s / static_cast<double>(w.iterations));
    optimizer = std::max(optimizer, w.optimizer_s / static_cast<double>(w.iterations));
  }
  Result<sim::FrugalPrediction> unit =
      PredictStages(density, batch_per_worker, compute_s_per_sample, 1e3, static_cast<int>(telemetry.size()), 1.0, 1.0);
  if (!unit.ok()) return;
  auto fold = [&](std::optional<double>& rate, double unit_s, double measured_s) {
    if (!(measured_s > 0) || !(unit_s > 0)) return;
    const double sample = unit_s / measured_s;  // GB/s that reproduces the measured seconds
    rate = rate ? options_.smoothing * sample + (1 - options_.smoothing) * *rate : sample;
  };
  fold(cpu_sparsify_gbs_, unit->sparsify_s, sparsify);
  fold(cpu_optimizer_gbs_, unit->optimizer_s, optimizer);
}

namespace {

// What one telemetry window says about the links (rule 1).
struct LinkWindow {
  double slowest_mbit = -1;  // the slowest measurable worker's rate; < 0: no worker could be measured
  double busy_fraction = 1;  // the least busy link's share of its window
};

// A window with less than min_busy_s of transfers or min_bytes of data is
// no sample: its busy time is mostly round trips and ack delays of a few
// small messages (a cluster member's only cross-WAN traffic is the
// controller's own telemetry: 500 bytes in 20 ms read as 0.2 Mbit/s on a
// 40-250 Mbit/s link and sent the density to its floor).
LinkWindow MeasureLinks(const std::vector<engine::WorkerTelemetry>& telemetry, const ControllerOptions& o) {
  LinkWindow link;
  for (const auto& w : telemetry) {
    if (w.link_busy_s <= 0 || w.link_bytes <= 0) continue;
    if (w.window_s > 0) link.busy_fraction = std::min(link.busy_fraction, w.link_busy_s / w.window_s);
    if (w.link_busy_s < o.min_busy_s || w.link_bytes < o.min_bytes) continue;
    double mbit = w.link_bytes * 8.0 / w.link_busy_s / 1e6;
    if (link.slowest_mbit < 0 || mbit < link.slowest_mbit) link.slowest_mbit = mbit;
  }
  return link;
}

// Rule 2: batch sizes proportional to speed with the global batch kept
// (largest-remainder rounding, at least 1 sample each). Returns `batches`
// unchanged unless every speed is known and some worker is more than
// `rebalance_threshold` off its current share: small speed differences are
// noise.
std::vector<int64_t> BalanceBatches(const std::vector<int64_t>& batches, const std::vector<double>& speed,
                                    double rebalance_threshold) {
  const int world = static_cast<int>(batches.size());
  double total_speed = 0;
  for (double s : speed) total_speed += s;
  if (!(total_speed > 0) || !std::all_of(speed.begin(), speed.end(), [](double s) { return s > 0; })) return batches;
  const int64_t global = std::accumulate(batches.begin(), batches.end(), int64_t{0});
  std::vector<int64_t> balanced(world);
  std::vector<std::pair<double, int>> remainders;
  int64_t assigned = 0;
  for (int r = 0; r < world; ++r) {
    double exact = static_cast<double>(global) * speed[r] / total_speed;
    balanced[r] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(exact)));
    assigned += balanced[r];
    remainders.push_back({exact - std::floor(exact), -r});
  }
  std::sort(remainders.rbegin(), remainders.rend());
  for (size_t i = 0; assigned < global && i < remainders.size(); ++i, ++assigned) balanced[-remainders[i].second]++;
  bool worth = false;
  for (int r = 0; r < world; ++r) {
    worth = worth || std::abs(static_cast<double>(balanced[r] - batches[r])) >
                         rebalance_threshold * static_cast<double>(batches[r]);
  }
  return worth && assigned == global ? balanced : batches;
}

// Compute time per iteration at these batch sizes: the slowest worker sets it.
double ComputeIterationSeconds(const std::vector<int64_t>& batches, const std::vector<double>& speed) {
  double compute_iter = 0;
  for (size_t r = 0; r < batches.size(); ++r) {
    if (speed[r] > 0) compute_iter = std::max(compute_iter, static_cast<double>(batches[r]) / speed[r]);
  }
  return compute_iter;
}

// Batch hysteresis: true when some worker's batch moves by more than
// `threshold` of its current one (or the number of workers changed).
bool BatchesMoved(const std::vector<int64_t>& batches, const std::vector<int64_t>& current, double threshold) {
  if (current.size() != batches.size()) return true;
  for (size_t r = 0; r < batches.size(); ++r) {
    if (std::abs(static_cast<double>(batches[r] - current[r])) > threshold * static_cast<double>(current[r])) {
      return true;
    }
  }
  return false;
}

std::string BatchesReason(const std::vector<int64_t>& batches) {
  std::string sizes;
  for (int64_t b : batches) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  return "batches " + sizes + " (proportional to speed)";
}

// Iteration time (s) at a density and per-worker batch; 1e30 when the
// planner cannot predict it.
using IterationPredictor = std::function<double(double density, int64_t batch_per_worker)>;

// The candidate densities: a geometric grid between min and max density.
std::vector<double> DensityGrid(const ControllerOptions& o) {
  std::vector<double> grid;
  for (int i = 0; i < o.density_candidates; ++i) {
    double f = static_cast<double>(i) / (o.density_candidates - 1);
    grid.push_back(o.min_density * std::pow(o.max_density / o.min_density, f));
  }
  return grid;
}

// Rule 3: the density with the most progress per second
// (Note [Density objective]).
double MostProgressPerSecond(const std::vector<double>& grid, double exponent, const IterationPredictor& predict,
                             int64_t batch_per_worker) {
  double best = grid.front();
  double best_rate = 0;
  for (double d : grid) {
    const double rate = std::pow(d, exponent) / predict(d, batch_per_worker);
    if (rate > best_rate * (1 + 1e-9)) {
      best_rate = rate;
      best = d;
    }
  }
  return best;
}

// Probe upward when the window had too little traffic to measure the link
// and it was mostly idle: the estimate may be stale and low. (A measured
// window needs no probe: bytes over busy time does not depend on how often
// the link is used.) The probe steps by the hysteresis ratio, so it is not
// held back by it. Returns the density to propose; appends its reason.
double ProbeUpward(double best, const LinkWindow& link, double current_density, const std::vector<double>& grid,
                   const ControllerOptions& o, std::string* why) {
  if (link.slowest_mbit >= 0 || link.busy_fraction >= 0.5 || best > current_density * 1.01 || best >= o.max_density) {
    return best;
  }
  auto it = std::lower_bound(grid.begin(), grid.end(), current_density * o.change_ratio * 1.001);
  if (it == grid.end()) return best;
  *why = "link busy " + std::to_string(static_cast<int>(100 * link.busy_fraction)) + "% of the time: probing upward; ";
  return *it;
}

// Rule 4, for a density below the floor: grows the batches until compute
// covers the floor density's traffic (or max_batch_growth is reached).
// Returns the growth, which is also the learning-rate scale; appends its
// reason.
double GrowBatchesToFloor(const ControllerOptions& o, double lowest_density, int64_t mean_batch,
                          const IterationPredictor& predict, std::vector<int64_t>* batches, std::string* why) {
  int64_t growth_batch = mean_batch;
  double grow = 1.0;
  while (grow < o.max_batch_growth) {
    grow = std::min(o.max_batch_growth, grow * 1.25);
    growth_batch = static_cast<int64_t>(std::llround(mean_batch * grow));
    double hidden = predict(lowest_density, growth_batch) * (1 + o.hidden_tolerance);
    if (predict(o.density_floor, growth_batch) <= hidden) break;
  }
  const double lr_scale = static_cast<double>(growth_batch) / static_cast<double>(mean_batch);
  for (auto& b : *batches) b = std::max<int64_t>(1, static_cast<int64_t>(std::llround(b * lr_scale)));
  *why += "density would fall below the floor: batch x" + std::to_string(lr_scale).substr(0, 4) +
          ", lr scaled linearly; ";
  return lr_scale;
}

// Trims the reason's trailing separators. Only a decision that changes
// something carries a reason (a probe that the hysteresis held back is not
// news).
void FinishReason(const engine::Decision& current, engine::Decision* next) {
  std::string& reason = next->reason;
  while (!reason.empty() && (reason.back() == ' ' || reason.back() == ';')) reason.pop_back();
  if (reason.empty() || (next->density == current.density && next->batch_sizes == current.batch_sizes &&
                         next->lr_scale == current.lr_scale)) {
    reason = "unchanged";
  }
}

}  // namespace

void BandwidthController::UpdateBandwidthEstimate(double sample_mbit) {
  // Smooth noise (EWMA). A sample below half the estimate replaces it at
  // once (fast decrease: a link that slowed down makes every iteration
  // wait until the density follows; the acknowledged-bytes measure is not
  // fooled by the old density's backlog draining through it). A sample
  // above twice the estimate is followed only when the previous one was
  // too (slow increase: one lucky window does not raise the density).
  int side = 0;
  if (bandwidth_mbit_) side = sample_mbit > 2 * *bandwidth_mbit_ ? 1 : sample_mbit < 0.5 * *bandwidth_mbit_ ? -1 : 0;
  if (!bandwidth_mbit_ || side == -1 || (side == 1 && last_off_side_ == 1)) {
    bandwidth_mbit_ = sample_mbit;
    last_off_side_ = 0;
  } else if (side == 1) {
    last_off_side_ = 1;  // held back until the next window confirms it
  } else {
    // Upward samples count less: a shaper's token bucket lets a small
    // transfer through at line rate, so short windows over-read the link
    // (on the testbed at 50 Mbit/s: 62-133 Mbit/s), and an over-read
    // costs every iteration until it is corrected.
    const double w = sample_mbit > *bandwidth_mbit_ ? options_.smoothing_up : options_.smoothing;
    bandwidth_mbit_ = w * sample_mbit + (1 - w) * *bandwidth_mbit_;
    last_off_side_ = 0;
  }
}

void BandwidthController::UpdateLinkModels(const std::vector<engine::WorkerTelemetry>& telemetry, double density) {
  if (link_models_.size() != telemetry.size()) {
    link_models_.assign(telemetry.size(), LinkModel());
    last_traffic_.assign(telemetry.size(), Traffic());
  }
  for (size_t r = 0; r < telemetry.size(); ++r) {
    const auto& w = telemetry[r];
    // The same gate as the bandwidth sample (MeasureLinks): a window of a
    // few small messages is mostly round trips, not a point on the line.
    if (w.link_messages <= 0 || w.iterations <= 0 || w.link_busy_s < options_.min_busy_s ||
        w.link_bytes < options_.min_bytes) {
      continue;
    }
    link_models_[r].Add(LinkWindowSample{w.link_messages, w.link_bytes, w.link_busy_s});
    const double iters = static_cast<double>(w.iterations);
    last_traffic_[r] = Traffic{w.link_messages / iters, w.link_bytes / iters, density};
  }
}

bool BandwidthController::HasSeparatedLinkModel() const {
  for (const LinkModel& m : link_models_) {
    const std::optional<LinkFit> fit = m.Fit();
    if (fit && fit->separated && fit->alpha_s > 0) return true;
  }
  return false;
}

std::optional<LinkFit> BandwidthController::link_fit(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(link_models_.size())) return std::nullopt;
  return link_models_[rank].Fit();
}

double BandwidthController::LinkRateMbit(double density, double fallback) const {
  double slowest = -1;
  for (size_t r = 0; r < link_models_.size(); ++r) {
    const Traffic& traffic = last_traffic_[r];
    if (traffic.density <= 0) continue;
    const std::optional<LinkFit> fit = link_models_[r].Fit();
    // alpha = 0 (clamped: small transfers over-read, a shaper's burst) is
    // bytes over busy time again; the smoothed estimate, with its
    // asymmetric weights tuned for that case, stays in charge.
    if (!fit || !(fit->alpha_s > 0)) continue;
    const double bytes = traffic.bytes * density / traffic.density;
    const double mbit = bytes * 8 / fit->Seconds(traffic.messages, bytes) / 1e6;
    if (slowest < 0 || mbit < slowest) slowest = mbit;
  }
  return slowest > 0 ? slowest : fallback;
}

std::vector<double> BandwidthController::UpdateSpeeds(const std::vector<engine::WorkerTelemetry>& telemetry) {
  const size_t world = telemetry.size();
  if (speed_ewma_.size() != world) speed_ewma_.assign(world, 0.0);
  for (size_t r = 0; r < world; ++r) {
    const auto& w = telemetry[r];
    double sample = (w.compute_s > 0 && w.samples > 0) ? w.samples / w.compute_s : 0;
    // Compute speed is noisy on shared cores: smooth it like the bandwidth.
    if (sample > 0) {
      speed_ewma_[r] = speed_ewma_[r] > 0 ? options_.smoothing * sample + (1 - options_.smoothing) * speed_ewma_[r]
                                          : sample;
    }
  }
  return speed_ewma_;
}

bool BandwidthController::DensityMayChange(int64_t t, double best, double bw, double lr_scale,
                                           const engine::Decision& current) const {
  const bool big_bw_change = bandwidth_at_last_change_ > 0 &&
                             (bw > 2 * bandwidth_at_last_change_ || bw < 0.5 * bandwidth_at_last_change_);
  const double ratio = best / current.density;
  // No increase within increase_cooldown iterations of a decrease unless
  // the link reads 3x as fast as it did then: small transfers over-read a
  // token-bucket shaper (2.2x measured at 50 Mbit/s), so without this the
  // density cycles between the level that reads slow and the one below it
  // that reads fast.
  // A decrease made on bytes over busy time alone is superseded, not
  // cycled back on, once a link model separates latency from bandwidth:
  // the cnn case (latency read as a slow link) would otherwise wait out the
  // cooldown at the floor.
  const bool superseded = !decrease_used_link_model_ && HasSeparatedLinkModel();
  const bool held = best > current.density && t - last_decrease_t_ < options_.increase_cooldown &&
                    bw < 3 * bandwidth_at_last_decrease_ && !superseded;
  return !held && (ratio > options_.change_ratio || ratio < 1 / options_.change_ratio || big_bw_change ||
                   lr_scale != current.lr_scale);
}

void BandwidthController::RecordDensityChange(int64_t t, double from, double to, double bw) {
  bandwidth_at_last_change_ = bw;
  if (to < from) {
    last_decrease_t_ = t;
    bandwidth_at_last_decrease_ = bw;
    decrease_used_link_model_ = HasSeparatedLinkModel();
  }
}

engine::Decision BandwidthController::Decide(int64_t t, const std::vector<engine::WorkerTelemetry>& telemetry,
                                             const engine::Decision& current) {
  engine::Decision next = current;
  next.reason.clear();
  const int world = static_cast<int>(telemetry.size());
  if (world == 0) return next;
  // 1. Bandwidth of the slowest worker's limiting link, and how busy it was.
  const LinkWindow link = MeasureLinks(telemetry, options_);
  if (link.slowest_mbit > 0) UpdateBandwidthEstimate(link.slowest_mbit);
  UpdateLinkModels(telemetry, current.density);
  // 2. Batch sizes, always derived from the configured global batch (then
  // balanced, then grown), never from the previous decision, so growth
  // does not compound.
  const std::vector<double> speed = UpdateSpeeds(telemetry);
  std::vector<int64_t> batches(world, options_.batch_per_worker);
  const int64_t global = std::accumulate(batches.begin(), batches.end(), int64_t{0});
  if (options_.balance_batches) batches = BalanceBatches(batches, speed, options_.rebalance_threshold);
  const double compute_iter = ComputeIterationSeconds(batches, speed);
  const int64_t mean_batch = std::max<int64_t>(1, global / world);
  if (!bandwidth_mbit_ || !options_.adapt_density) {
    // No transfer was timed yet, or only batches are adapted (or the
    // transport has no busy clock): balance batches, keep the density.
    const bool change = BatchesMoved(batches, current.batch_sizes, options_.rebalance_threshold);
    if (change) next.batch_sizes = batches;
    next.reason = change ? BatchesReason(batches) : "unchanged";
    return next;
  }
  const double bw = *bandwidth_mbit_;
  next.bandwidth_mbit = bw;
  const double s_per_sample = compute_iter / static_cast<double>(mean_batch);
  UpdateCpuRates(telemetry, current.density, mean_batch, s_per_sample);
  const IterationPredictor predict = [&](double d, int64_t batch) {
    Result<double> r = PredictIteration(d, batch, s_per_sample, LinkRateMbit(d, bw), world);
    return r.ok() ? *r : 1e30;
  };
  // 3. The density with the most progress per second (or a probe above it).
  const std::vector<double> grid = DensityGrid(options_);
  std::string why;
  double best = MostProgressPerSecond(grid, options_.density_exponent, predict, mean_batch);
  best = ProbeUpward(best, link, current.density, grid, options_, &why);
  // 4. Below the floor: grow the batch so compute covers the floor's traffic.
  double lr_scale = 1.0;
  if (best < options_.density_floor) {
    lr_scale = GrowBatchesToFloor(options_, grid.front(), mean_batch, predict, &batches, &why);
    best = options_.density_floor;
  }
  // 5. Hysteresis.
  if (DensityMayChange(t, best, bw, lr_scale, current)) {
    if (best != current.density) {
      char buf[224];
      std::snprintf(buf, sizeof(buf),
                    "density %.4g -> %.4g: most progress per second at %.1f Mbit/s (%.1f Mbit/s predicted at this "
                    "density), compute %.3f s/iter",
                    current.density, best, bw, LinkRateMbit(best, bw), compute_iter);
      why += buf;
      RecordDensityChange(t, current.density, best, bw);
    }
    next.density = best;
  }
  if (bandwidth_at_last_change_ == 0) bandwidth_at_last_change_ = bw;
  if (BatchesMoved(batches, current.batch_sizes, options_.rebalance_threshold)) {
    next.reason += BatchesReason(batches) + "; ";
    next.batch_sizes = batches;
  }
  next.lr_scale = lr_scale;
  next.predicted_iteration_s = predict(next.density, mean_batch);
  next.reason += why;
  FinishReason(current, &next);
  return next;
}

}  // namespace frugal::control
