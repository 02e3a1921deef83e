// IterationGraph: the task graph of one training iteration
// (Note [Iteration task graph] in iteration_graph.cc), internal to src/sim.
//
// Thread safety: none; one object per Predict() call.
#pragma once

#include <vector>

#include "frugal/sim/event_engine.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/network_model.h"
#include "frugal/sim/simulator.h"

#include "iteration_plan.h"

namespace frugal::sim::internal {

// The task graph of one iteration of a plan, built step by step in the
// order the Note describes, and the prediction read back from a run of it.
// REQUIRES: plan, model, strategy, hardware and network outlive the object.
class IterationGraph {
 public:
  IterationGraph(const Plan& plan, const ModelSpec& model, const ParallelStrategy& s, const HardwareSpec& hw,
                 const NetworkModel& net)
      : plan_(plan), model_(model), s_(s), hw_(hw), net_(net) {
    AddStreams();
    SplitGradientBuckets();
    AddComputeTasks();
    AddPointToPointSends();
    AddDataParallelAllReduces();
    AddOptimizerSteps();
  }

  const TaskGraph& graph() const { return graph_; }
  // Times, communication shares, bubble and FLOP rates from a run of
  // graph(); everything but the memory estimate.
  IterationPrediction Summarize(const EngineResult& run) const;

 private:
  size_t Slot(int vs, int microbatch) const { return static_cast<size_t>(vs) * plan_.m + microbatch; }
  void AddStreams();
  void SplitGradientBuckets();
  void AddComputeTasks();
  void AddPointToPointSends();
  void AddDataParallelAllReduces();
  void AddOptimizerSteps();

  const Plan& plan_;
  const ModelSpec& model_;
  const ParallelStrategy& s_;
  const HardwareSpec& hw_;
  const NetworkModel& net_;
  TaskGraph graph_;
  // Per pipeline stage.
  std::vector<ResourceId> compute_, send_fwd_, send_bwd_, dp_link_;
  std::vector<TaskId> last_piece_of_stage_;  // the stage's last backward piece
  std::vector<std::vector<TaskId>> stage_allreduces_;
  std::vector<TaskId> optimizer_;
  // Per virtual stage (chunk * p + stage).
  std::vector<int> buckets_;                       // gradient buckets of the chunk
  std::vector<std::vector<TaskId>> final_pieces_;  // pieces of the last micro-batch's backward
  // Per (virtual stage, micro-batch) slot.
  std::vector<TaskId> fwd_, bwd_first_, bwd_last_;
  double dp_seconds_per_stage_ = 0;
};

}  // namespace frugal::sim::internal
