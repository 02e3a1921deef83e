// How fast a training application runs on a given placement, and how much
// statistical progress each step makes. These are the seams that connect the
// scheduler to measured traces (Pollux), to a plain table of samples/s, and
// later to the planner (src/sim): an adapter that implements ThroughputModel
// by asking the planner for the iteration time of (model, shape, batch) is all
// that is needed to schedule jobs that were never measured.
//
// Thread safety: implementations are immutable after construction and safe to
// call concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sched/cluster.h"

namespace frugal::sched {

// Seconds per optimizer step of one application.
class ThroughputModel {
 public:
  virtual ~ThroughputModel() = default;

  // Seconds for one optimizer step with global batch `global_batch` on a
  // placement of shape `shape` (gradient accumulation included when the
  // per-GPU batch does not fit). Returns +inf if the configuration cannot run.
  // REQUIRES: shape non-empty, global_batch > 0.
  virtual double StepTime(const Shape& shape, int global_batch) const = 0;

  // The most GPUs a job with `global_batch` can use (each GPU needs at least
  // the smallest per-GPU batch the model supports).
  virtual int MaxGpus(int global_batch) const = 0;
};

// How much statistical progress training makes, and how much it needs.
// Progress is counted in "steps at the application's base batch size B0".
class ConvergenceModel {
 public:
  virtual ~ConvergenceModel() = default;

  virtual int NumEpochs() const = 0;
  // Cumulative progress at the end of epoch `epoch` (1-based);
  // EpochEnd(NumEpochs()) is the progress needed to finish. EpochEnd(0) = 0.
  virtual double EpochEnd(int epoch) const = 0;
  // Progress one step with global batch `global_batch` adds during epoch
  // `epoch` (0-based). Constant within an epoch.
  virtual double StepGain(int global_batch, int epoch) const = 0;
  // The batch sizes whose statistical efficiency the model knows; a job may be
  // run at any batch in [MinBatch(), MaxBatch()]. Both 0 if the model does not
  // know how efficiency changes with batch (the job's batch stays fixed).
  virtual int MinBatch() const { return 0; }
  virtual int MaxBatch() const { return 0; }
};

// A training application: a throughput model plus a convergence model.
class Application {
 public:
  Application(std::string name, std::shared_ptr<const ThroughputModel> throughput,
              std::shared_ptr<const ConvergenceModel> convergence);

  const std::string& name() const { return name_; }
  const ThroughputModel& throughput() const { return *throughput_; }
  const ConvergenceModel& convergence() const { return *convergence_; }

  // Progress per second during `epoch` on `shape` at `global_batch`
  // (0 when the configuration cannot run).
  double ProgressRate(const Shape& shape, int global_batch, int epoch) const;
  double TotalProgress() const { return convergence_->EpochEnd(convergence_->NumEpochs()); }

 private:
  std::string name_;
  std::shared_ptr<const ThroughputModel> throughput_;
  std::shared_ptr<const ConvergenceModel> convergence_;
};

// Applications by name.
class ApplicationCatalog {
 public:
  // Fails if an application with that name already exists.
  Status Add(std::shared_ptr<const Application> app);
  // nullptr if absent.
  const Application* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  bool empty() const { return apps_.empty(); }

 private:
  std::vector<std::shared_ptr<const Application>> apps_;
};

// Loads every application under `dir` (one sub-directory per application, in
// the layout of data/scheduler/pollux-traces: placements.csv, scalability.csv,
// validation-<B>.csv; see that README for the job model). Malformed files give
// an error naming the file and line.
Result<ApplicationCatalog> LoadPolluxTraces(const std::string& dir);

// Loads one application from a Pollux-layout directory.
Result<std::shared_ptr<const Application>> LoadPolluxApplication(const std::string& dir);

// Adds applications described by a plain throughput table: a CSV with header
// `application,total_samples,num_gpus,samples_per_s`, one row per measured GPU
// count (total_samples repeated on every row of an application: how many
// samples a job must process). Throughput between measured GPU counts is
// interpolated linearly, scaled linearly below the first and held flat beyond
// the last; placement is ignored (the table has no notion of nodes); every
// sample counts fully (no statistical-efficiency loss at large batches).
Status LoadThroughputTable(const std::string& path, ApplicationCatalog* catalog);

}  // namespace frugal::sched
