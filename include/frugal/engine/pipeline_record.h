// PipelineRecord: the per-step pipeline and traffic counters of one metrics
// window, as the fields of a metrics.jsonl record (docs/guide/python.md,
// "Metrics"): the CLI's Worker and frugal.DistributedModel write the same.
// Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include "frugal/comm/transport/transport.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

// `now`/`before`: the pipeline's cumulative counters at the window's end and
// start; `traffic`/`traffic_before` the transport's. `steps` > 0 iterations
// in `span_s` > 0 seconds. Returns per-step seconds (wait_s, sparsify_s,
// exchange_s, optimizer_s), bytes per link class (bytes_sent_intra,
// bytes_sent_inter, bytes_received_intra, bytes_received_inter), density,
// merged_density, deferral_steps and sent_share_l2; sets *sent_mbit_per_s
// (both link classes) and *density.
nlohmann::json PipelineRecord(const PipelineStats& now, const PipelineStats& before, const comm::TransportStats& traffic,
                              const comm::TransportStats& traffic_before, double steps, double* sent_mbit_per_s,
                              double span_s, double* density);

}  // namespace frugal::engine
