// The seam between the engine and a run-time controller (src/control): what a
// worker measures, and what a controller may change. The engine gathers every
// worker's WorkerTelemetry at decision points, asks the AdaptationPolicy (on
// rank 0 only), and broadcasts the Decision; every worker switches at
// Decision::effective_iteration exactly. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/enum_names.h"
#include "frugal/common/status.h"

namespace frugal::engine {

// What a run lets its controller change: nothing (off), density and batch
// sizes (on), or only the batch sizes, in proportion to speed (batch).
// auto (the default): on where the launcher runs a controller and the run
// is one it supports (`frugal train` / `frugal worker`, a fixed world, step
// sync, a model the planner knows; ResolveAdapt in the CLI), else off; the
// engine API, given no controller, treats it as off.
enum class AdaptMode { kOff, kOn, kBatch, kAuto };

// Whether `mode` asks for a controller outright (on, batch); auto and off
// do not.
inline bool NeedsController(AdaptMode mode) { return mode == AdaptMode::kOn || mode == AdaptMode::kBatch; }

// One worker's measurements over the window since the previous decision point.
struct WorkerTelemetry {
  int rank = 0;
  int64_t iterations = 0;          // iterations in the window
  double window_s = 0;             // wall time of the window
  int64_t samples = 0;             // samples this worker computed in the window
  double compute_s = 0;            // forward + backward (incl. any --compute-slowdown)
  double wait_s = 0;               // blocked waiting for updates
  double sparsify_s = 0;           // CPU: error feedback + sparsify + encode
  double optimizer_s = 0;          // CPU: decode + sparse optimizer
  // The link class whose bandwidth limits this worker (inter-cluster when
  // the run spans clusters, else intra-cluster): payload bytes of its
  // messages acknowledged in the window and the time during which at least
  // one of its messages was in flight (the same transfers, so a backlog
  // draining into the window does not look like a slow link).
  double link_bytes = 0;
  double link_busy_s = 0;
  // Messages acknowledged on that link in the window (sent minus the change
  // in messages in flight): with link_bytes and link_busy_s it lets the
  // controller separate per-message latency from bandwidth. 0 = unknown.
  double link_messages = 0;

  std::vector<uint8_t> Serialize() const;
  static Result<WorkerTelemetry> Deserialize(const std::vector<uint8_t>& bytes);
};

// What the controller decides. Every worker applies it from
// effective_iteration on.
struct Decision {
  int64_t effective_iteration = 0;
  double density = 0.01;
  std::vector<int64_t> batch_sizes;  // per rank; empty = unchanged
  double lr_scale = 1.0;             // multiplies the schedule's learning rate
  double bandwidth_mbit = 0;         // the controller's estimate (for logs)
  double predicted_iteration_s = 0;  // (for logs)
  std::string reason;

  std::vector<uint8_t> Serialize() const;
  static Result<Decision> Deserialize(const std::vector<uint8_t>& bytes);
};

class AdaptationPolicy {
 public:
  virtual ~AdaptationPolicy() = default;
  // Called on rank 0 at iteration `t` with every worker's telemetry (index =
  // rank). Returns the decision to apply from `t` on (effective_iteration is
  // set by the engine). Must be deterministic in its inputs.
  virtual Decision Decide(int64_t t, const std::vector<WorkerTelemetry>& telemetry, const Decision& current) = 0;
};

}  // namespace frugal::engine

template <>
struct frugal::EnumNames<frugal::engine::AdaptMode> {
  static constexpr std::pair<engine::AdaptMode, const char*> kTable[] = {
      {engine::AdaptMode::kOff, "off"},
      {engine::AdaptMode::kOn, "on"},
      {engine::AdaptMode::kBatch, "batch"},
      {engine::AdaptMode::kAuto, "auto"}};
};
