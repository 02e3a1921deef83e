// SpeedPrior: what the server expects of a job's throughput before the job
// has measured it, e.g. the planner's prediction (src/cli builds one from
// sim::PredictFrugalIteration; the cluster module does not depend on the
// planner). LiveSpeed uses it for worker counts that neither the job nor
// any job of its profile has run at (Note [Live throughput prior] in
// src/cluster/live_speed.h).
//
// Thread safety: SamplesPerSecond is called from the scheduling round, off
// the manager's lock, and must be safe to call concurrently.
#pragma once

#include <functional>
#include <memory>

#include "frugal/cluster/types.h"

namespace frugal::cluster {

class SpeedPrior {
 public:
  virtual ~SpeedPrior() = default;
  // Training samples per second over all workers when the job runs with
  // `workers` workers on one node; 0 (or less) when there is no prediction.
  virtual double SamplesPerSecond(int workers) const = 0;
};

// The prior of a submitted job, or nullptr when there is none (a model the
// planner does not know, an unparsable configuration). Called under the
// manager's lock on submit and on loading the state; keep it cheap and
// defer predictions to SamplesPerSecond.
using SpeedPriorFactory = std::function<std::shared_ptr<const SpeedPrior>(const JobSubmission&)>;

// A command job's own prior: CommandSpec::planned_samples_per_s, the rate at
// n workers its entry n - 1 (0 beyond the table). nullptr when the job gives
// none. Thread safety: immutable.
std::shared_ptr<const SpeedPrior> PlannedPrior(const JobSubmission& job);

}  // namespace frugal::cluster
