// AdaptationProtocol: the controller's decision protocol of a worker
// (docs/architecture.md, "The controller's decision protocol"). It keeps the
// telemetry window since the last decision and, at a decision point,
// all-gathers every worker's telemetry, lets rank 0's policy decide,
// broadcasts the decision and applies it to the pipeline and the data
// cursor. Internal to the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/comm/transport/transport.h"
#include "frugal/data/batch_plan.h"
#include "frugal/engine/adaptation.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

class AdaptationProtocol {
 public:
  // `policy` is required on rank 0 and ignored elsewhere. The pointers must
  // outlive the protocol.
  AdaptationProtocol(comm::Transport* transport, GradientPipeline* pipeline, data::BatchCursor* cursor,
                     std::unique_ptr<AdaptationPolicy> policy, Decision initial, std::chrono::milliseconds timeout);

  // One step of compute measured on this worker.
  void AddStep(int64_t samples, double compute_s);
  // At the gate of iteration t: decide and apply from t on. On rank 0,
  // `record` receives the metrics record (decision, reason, telemetry seen).
  Status Decide(int64_t t, double wall_time_s, nlohmann::json* record);

  const Decision& decision() const { return decision_; }

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    int64_t iterations = 0;
    int64_t samples = 0;
    double compute_s = 0;
    PipelineStats pipeline;
    comm::TransportStats traffic;
  };
  Window StartWindow() const;
  WorkerTelemetry Measure() const;
  Result<Decision> Exchange(int64_t t, const WorkerTelemetry& mine, std::vector<WorkerTelemetry>* seen);

  comm::Transport* transport_;
  GradientPipeline* pipeline_;
  data::BatchCursor* cursor_;
  std::unique_ptr<AdaptationPolicy> policy_;
  Decision decision_;  // in force since decision_.effective_iteration
  std::chrono::milliseconds timeout_;
  Window window_;
};

}  // namespace frugal::engine
