#include "frugal/engine/pipeline_record.h"

namespace frugal::engine {

nlohmann::json PipelineRecord(const PipelineStats& now, const PipelineStats& before, const comm::TransportStats& traffic,
                              const comm::TransportStats& traffic_before, double steps, double* sent_mbit_per_s,
                              double span_s, double* density) {
  auto per_step = [&](uint64_t a, uint64_t b) { return static_cast<double>(a - b) / steps; };
  const uint64_t window_values = now.total_values - before.total_values;
  const double inter = per_step(traffic.inter_cluster.bytes_sent, traffic_before.inter_cluster.bytes_sent);
  const double intra = per_step(traffic.intra_cluster.bytes_sent, traffic_before.intra_cluster.bytes_sent);
  *sent_mbit_per_s = (inter + intra) * steps * 8 / span_s / 1e6;
  auto share = [&](uint64_t a, uint64_t b) {
    return window_values > 0 ? static_cast<double>(a - b) / static_cast<double>(window_values) : 0.0;
  };
  *density = share(now.sent_values, before.sent_values);
  // Mean delay of gradient mass in the residual, in steps
  // (Note [Deferred mass]); 0 when nothing was sent (a dense bucket defers nothing either).
  const double sent_mass = now.sent_mass - before.sent_mass;
  const double deferral = sent_mass > 0 ? (now.held_mass - before.held_mass - sent_mass) / sent_mass : 0.0;
  const double held_sq = now.held_sq - before.held_sq;  // share of the squared L2 norm sent
  return {{"wait_s", (now.wait_s - before.wait_s) / steps},
          {"sparsify_s", (now.sparsify_s - before.sparsify_s) / steps},
          {"exchange_s", (now.exchange_s - before.exchange_s) / steps},
          {"optimizer_s", (now.optimizer_s - before.optimizer_s) / steps},
          {"bytes_sent_intra", intra},
          {"bytes_sent_inter", inter},
          {"bytes_received_intra",
           per_step(traffic.intra_cluster.bytes_received, traffic_before.intra_cluster.bytes_received)},
          {"bytes_received_inter",
           per_step(traffic.inter_cluster.bytes_received, traffic_before.inter_cluster.bytes_received)},
          {"density", *density},
          {"merged_density", share(now.merged_values, before.merged_values)},
          {"deferral_steps", deferral},
          {"sent_share_l2", held_sq > 0 ? (now.sent_sq - before.sent_sq) / held_sq : 0.0}};
}

}  // namespace frugal::engine
