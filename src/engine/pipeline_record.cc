#include "frugal/engine/pipeline_record.h"

#include <cstdio>

#include "frugal/common/stat_json.h"

namespace frugal::engine {

PipelineWindow MeasureWindow(const PipelineStats& now, const PipelineStats& before,
                             const comm::TransportStats& traffic, const comm::TransportStats& traffic_before,
                             double steps, double span_s, double compute_s) {
  auto per_step = [&](uint64_t a, uint64_t b) { return static_cast<double>(a - b) / steps; };
  const uint64_t window_values = now.total_values - before.total_values;
  auto share = [&](uint64_t a, uint64_t b) {
    return window_values > 0 ? static_cast<double>(a - b) / static_cast<double>(window_values) : 0.0;
  };
  PipelineWindow w;
  w.wait_s = (now.wait_s - before.wait_s) / steps;
  w.sparsify_s = (now.sparsify_s - before.sparsify_s) / steps;
  w.exchange_s = (now.exchange_s - before.exchange_s) / steps;
  w.optimizer_s = (now.optimizer_s - before.optimizer_s) / steps;
  w.bytes_sent_intra = per_step(traffic.intra_cluster.bytes_sent, traffic_before.intra_cluster.bytes_sent);
  w.bytes_sent_inter = per_step(traffic.inter_cluster.bytes_sent, traffic_before.inter_cluster.bytes_sent);
  w.bytes_received_intra = per_step(traffic.intra_cluster.bytes_received, traffic_before.intra_cluster.bytes_received);
  w.bytes_received_inter = per_step(traffic.inter_cluster.bytes_received, traffic_before.inter_cluster.bytes_received);
  w.density = share(now.sent_values, before.sent_values);
  w.merged_density = share(now.merged_values, before.merged_values);
  // Mean delay of gradient mass in the residual, in steps
  // (Note [Deferred mass]); 0 when nothing was sent (a dense bucket defers nothing either).
  const double sent_mass = now.sent_mass - before.sent_mass;
  w.deferral_steps = sent_mass > 0 ? (now.held_mass - before.held_mass - sent_mass) / sent_mass : 0.0;
  const double held_sq = now.held_sq - before.held_sq;
  w.sent_share_l2 = held_sq > 0 ? (now.sent_sq - before.sent_sq) / held_sq : 0.0;
  w.iter_s = span_s / steps;
  w.compute_s = compute_s;
  return w;
}

nlohmann::json WindowJson(const PipelineWindow& w) { return StatsToJson(w); }

std::string ProgressText(const PipelineWindow& w, const std::string& mode) {
  char line[64];
  std::snprintf(line, sizeof(line), "%.1f Mbit/s sent  ", w.sent_mbit_per_s());
  return line + mode;
}

std::string DensityText(double density) {
  char line[64];
  std::snprintf(line, sizeof(line), "density %.3g%%", 100 * density);
  return line;
}

}  // namespace frugal::engine
