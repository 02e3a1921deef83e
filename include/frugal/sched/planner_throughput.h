// The seam between the scheduler and the planner: a ThroughputModel whose step
// times come from the training-time simulator (src/sim), so the policies can
// schedule jobs that were never measured. Lives in its own library target,
// frugal_sched_planner (built when frugal_sim exists), so that frugal_sched
// itself stays independent of sim.
//
// Thread safety: immutable after construction.
#pragma once

#include <string>

#include "frugal/common/status.h"
#include "frugal/sched/throughput_model.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::sched {

// Data-parallel step time of `model` on `hardware` for a placement shape, as
// predicted by sim::PredictDataParallelStep (largest micro-batch that fits,
// gradient accumulation, all-reduce over the shape's nodes). +inf when the
// planner fails or nothing fits in memory.
class PlannerThroughputModel : public ThroughputModel {
 public:
  PlannerThroughputModel(sim::ModelSpec model, sim::HardwareSpec hardware);

  double StepTime(const Shape& shape, int global_batch) const override;
  // One sample per GPU at least.
  int MaxGpus(int global_batch) const override { return global_batch; }

 private:
  sim::ModelSpec model_;
  sim::HardwareSpec hardware_;
};

// Adds planner-backed applications from a CSV with header
// `application,model,hardware,total_samples`: `model` a built-in planner model
// (e.g. resnet18, gpt-125m), `hardware` a built-in name or a TOML file,
// `total_samples` the samples a job must process (statistical efficiency is
// taken as perfect). Errors name the file and line.
Status LoadPlannerApplications(const std::string& path, ApplicationCatalog* catalog);

}  // namespace frugal::sched
