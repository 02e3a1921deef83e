#include "adaptation_protocol.h"

#include <algorithm>

#include "control_kinds.h"
#include "frugal/comm/algorithms/collectives.h"
#include "frugal/common/clock.h"

namespace frugal::engine {

namespace {

nlohmann::json TelemetryJson(const std::vector<WorkerTelemetry>& telemetry) {
  // What the controller saw: per worker, its limiting link's acknowledged
  // bytes and busy time, and its compute, over the window.
  nlohmann::json seen = nlohmann::json::array();
  for (const auto& w : telemetry) {
    seen.push_back({{"rank", w.rank},
                    {"link_bytes", w.link_bytes},
                    {"link_busy_s", w.link_busy_s},
                    {"link_messages", w.link_messages},
                    {"window_s", w.window_s},
                    {"samples", w.samples},
                    {"compute_s", w.compute_s}});
  }
  return seen;
}

}  // namespace

AdaptationProtocol::AdaptationProtocol(comm::Transport* transport, GradientPipeline* pipeline,
                                       data::BatchCursor* cursor, std::unique_ptr<AdaptationPolicy> policy,
                                       Decision initial, std::chrono::milliseconds timeout)
    : transport_(transport),
      pipeline_(pipeline),
      cursor_(cursor),
      policy_(std::move(policy)),
      decision_(std::move(initial)),
      timeout_(timeout),
      window_(StartWindow()) {}

AdaptationProtocol::Window AdaptationProtocol::StartWindow() const {
  Window w;
  w.start = transport_->clock().Now();
  w.pipeline = pipeline_->stats();
  w.traffic = transport_->stats();
  return w;
}

void AdaptationProtocol::AddStep(int64_t samples, double compute_s) {
  window_.compute_s += compute_s;
  window_.samples += samples;
  window_.iterations += 1;
}

WorkerTelemetry AdaptationProtocol::Measure() const {
  const bool multi_cluster = transport_->topology().num_clusters() > 1;
  const comm::TransportStats traffic = transport_->stats().Since(window_.traffic);
  const comm::LinkCounters& link = multi_cluster ? traffic.inter_cluster : traffic.intra_cluster;
  const PipelineStats ps = pipeline_->stats();
  WorkerTelemetry mine;
  mine.rank = transport_->rank();
  mine.iterations = window_.iterations;
  mine.window_s = Seconds(transport_->clock().Now() - window_.start);
  mine.samples = window_.samples;
  mine.compute_s = window_.compute_s;
  mine.wait_s = ps.wait_s - window_.pipeline.wait_s;
  mine.sparsify_s = ps.sparsify_s - window_.pipeline.sparsify_s;
  mine.optimizer_s = ps.optimizer_s - window_.pipeline.optimizer_s;
  mine.link_bytes = static_cast<double>(link.bytes_acked);  // bytes and busy time of the same transfers
  mine.link_busy_s = link.send_busy_s;
  const comm::LinkCounters& before = multi_cluster ? window_.traffic.inter_cluster : window_.traffic.intra_cluster;
  const double in_flight_growth =
      static_cast<double>(link.messages_in_flight) - static_cast<double>(before.messages_in_flight);
  mine.link_messages = std::max(0.0, static_cast<double>(link.messages_sent) - in_flight_growth);
  return mine;
}

// Every worker's telemetry to rank 0, rank 0's decision to every worker.
Result<Decision> AdaptationProtocol::Exchange(int64_t t, const WorkerTelemetry& mine,
                                              std::vector<WorkerTelemetry>* seen) {
  auto all = comm::AllGather(*transport_, ControlTag(t, kTelemetry), mine.Serialize(), timeout_);
  if (!all.ok()) return all.status().WithContext("gathering telemetry at step " + std::to_string(t));
  comm::Bytes decided;
  if (transport_->rank() == 0) {
    for (const auto& bytes : *all) {
      FRUGAL_ASSIGN_OR_RETURN(WorkerTelemetry w, WorkerTelemetry::Deserialize(bytes));
      seen->push_back(w);
    }
    Decision d = policy_->Decide(t, *seen, decision_);
    d.effective_iteration = t;
    decided = d.Serialize();
  }
  auto got = comm::Broadcast(*transport_, ControlTag(t, kDecision), 0, std::move(decided), timeout_);
  if (!got.ok()) return got.status().WithContext("receiving the controller's decision at step " + std::to_string(t));
  return Decision::Deserialize(*got);
}

// Every worker applies the decision from iteration t on: the pipeline's
// density and learning-rate scale for tasks >= t, and the batch sizes of the
// data cursor from this step. All of it happens before any worker submits a
// gradient of iteration t, so all switch together.
Status AdaptationProtocol::Decide(int64_t t, double wall_time_s, nlohmann::json* record) {
  std::vector<WorkerTelemetry> seen;
  FRUGAL_ASSIGN_OR_RETURN(Decision d, Exchange(t, Measure(), &seen));
  if (d.effective_iteration != t) return Status::Corruption("decision for the wrong iteration");
  if (d.batch_sizes.empty()) d.batch_sizes = decision_.batch_sizes;
  if (static_cast<int>(d.batch_sizes.size()) != transport_->world_size()) {
    return Status::Corruption("decision has " + std::to_string(d.batch_sizes.size()) + " batch sizes for " +
                              std::to_string(transport_->world_size()) + " workers");
  }
  FRUGAL_RETURN_IF_ERROR(pipeline_->SetFrom(t, d.density, d.lr_scale));
  FRUGAL_RETURN_IF_ERROR(cursor_->SetBatchSizes(d.batch_sizes));
  decision_ = d;
  if (record != nullptr && transport_->rank() == 0) {
    *record = {{"wall_time_s", wall_time_s},
               {"step", t},
               {"decision",
                {{"density", d.density},
                 {"batch_sizes", d.batch_sizes},
                 {"lr_scale", d.lr_scale},
                 {"bandwidth_mbit", d.bandwidth_mbit},
                 {"predicted_iteration_s", d.predicted_iteration_s},
                 {"reason", d.reason}}},
               {"telemetry", TelemetryJson(seen)}};
  }
  window_ = StartWindow();
  return Status::Ok();
}

}  // namespace frugal::engine
