#include "frugal/sched/policy.h"

#include <algorithm>
#include <cmath>

#include "policies.h"

namespace frugal::sched {

std::vector<std::string> PolicyNames() {
  return {"fifo", "srtf", "tiresias", "optimus", "afs-l", "afs-p", "afs-goodput", "afs-goodput-2q"};
}

std::vector<int> BatchSizeCandidates(const JobView& job) {
  std::vector<int> out{job.batch_size};
  if (job.min_batch_size > 0 && job.min_batch_size < job.max_batch_size) {
    for (double b = job.min_batch_size; b < job.max_batch_size; b *= 1.4142135623730951) {
      out.push_back(static_cast<int>(std::lround(b)));
    }
    out.push_back(job.max_batch_size);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::unique_ptr<Policy>> CreatePolicy(const std::string& name, const PolicyOptions& options) {
  if (name == "fifo") return NewFifoPolicy();
  if (name == "srtf") return NewSrtfPolicy();
  if (name == "tiresias") return NewTiresiasPolicy(options.tiresias_threshold_gpu_seconds);
  if (name == "optimus") return NewOptimusPolicy();
  double min_gain = 0;
  if (options.stickiness_horizon > 0) {
    min_gain = std::clamp(options.reallocation_cost / options.stickiness_horizon, 0.0, 1.0);
  }
  SwitchCost switch_cost{std::max(options.reallocation_cost, 0.0), std::max(options.contended_horizon, 0.0)};
  if (name == "afs-l") return NewAfsLPolicy(min_gain);
  if (name == "afs-p") return NewAfsPPolicy(options.afsp_prior_seconds, min_gain, switch_cost);
  if (name == "afs-goodput") return NewAfsGoodputPolicy(options.afsp_prior_seconds, min_gain, switch_cost);
  if (name == "afs-goodput-2q") {
    if (!(options.long_job_seconds > 0)) {
      return Status::InvalidArgument("afs-goodput-2q needs a positive long-job threshold (--long-job-seconds)");
    }
    TwoQueues queues{options.long_job_seconds, options.long_queue_order, std::max(options.promote_knob, 0.0),
                     options.fit_aware_placement};
    return NewAfsGoodputTwoQueuePolicy(options.afsp_prior_seconds, min_gain, switch_cost, queues);
  }
  std::string known;
  for (const auto& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown policy '" + name + "' (known: " + known + ")");
}

}  // namespace frugal::sched
