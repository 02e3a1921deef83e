#include "frugal/sched/policy.h"

#include "policies.h"

namespace frugal::sched {

std::vector<std::string> PolicyNames() { return {"fifo", "srtf", "tiresias", "optimus", "afs-l", "afs-p"}; }

Result<std::unique_ptr<Policy>> CreatePolicy(const std::string& name, const PolicyOptions& options) {
  if (name == "fifo") return NewFifoPolicy();
  if (name == "srtf") return NewSrtfPolicy();
  if (name == "tiresias") return NewTiresiasPolicy(options.tiresias_threshold_gpu_seconds);
  if (name == "optimus") return NewOptimusPolicy();
  if (name == "afs-l") return NewAfsLPolicy();
  if (name == "afs-p") return NewAfsPPolicy(options.afsp_prior_seconds);
  std::string known;
  for (const auto& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown policy '" + name + "' (known: " + known + ")");
}

}  // namespace frugal::sched
