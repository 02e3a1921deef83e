// The growth step elastic policies reason with. Internal to src/sched.
//
// Note [Growth step]: with compact placements on 4-GPU nodes, throughput often
// drops when a job first spills onto a second node (e.g. 4 -> 5 GPUs) and only
// recovers a few GPUs later. A greedy one-GPU-at-a-time policy would never
// cross that dip, so a job's next step is the smallest k that raises its
// throughput, and gains are compared per GPU. A job whose workers take u GPUs
// each steps in whole workers, k a multiple of u:
// Note [Workers of several GPUs] in placer.cc.
#pragma once

#include "placer.h"

namespace frugal::sched {

struct GrowthStep {
  int k = 0;            // GPUs to add; 0 = the job cannot usefully grow.
  double rate_now = 0;  // Progress rate at the current count.
  double rate_next = 0; // Progress rate after adding k GPUs.
};

// `rate(n)`: the progress rate the policy assumes at n GPUs. Tries k = u, 2u,
// ... up to a node's GPUs, without passing `cap` rounded down to whole
// workers, where u = gpus_per_worker.
// REQUIRES: 0 <= gpus, gpus a multiple of gpus_per_worker >= 1.
template <typename RateFn>
GrowthStep NextGrowthStep(int gpus, int cap, int gpus_per_node, int gpus_per_worker, double rate_now,
                          const RateFn& rate) {
  GrowthStep step;
  step.rate_now = rate_now;
  const int unit = gpus_per_worker;
  cap = RoundDownToWorkers(cap, unit);
  for (int k = unit; k <= gpus_per_node && gpus + k <= cap; k += unit) {
    double r = rate(gpus + k);
    if (r > rate_now * (1 + 1e-9) && r > 0) {
      step.k = k;
      step.rate_next = r;
      return step;
    }
  }
  return step;
}

}  // namespace frugal::sched
