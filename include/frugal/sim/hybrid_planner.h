// On-premises + cloud co-training planner (`frugal plan hybrid`;
// StellaTrain's claim: adding public-cloud GPUs to an on-prem
// cluster cut cloud cost by 64.5% and training time by 29%).
//
// Given an on-prem cluster, cloud GPU offers, the WAN between them, a model
// with its time-to-accuracy in iterations and a deadline or a budget, it
// prices three plans: on-prem only, cloud only (the offer and count that
// best meet the goal) and hybrid (on-prem plus k GPUs of one offer, trained
// as two Frugal clusters joined by the WAN with the sparse, topology-aware
// exchange). Model (Note [Hybrid plan] in hybrid_planner.cc): the global
// batch is split in proportion to each GPU's speed, so both clusters finish
// compute together; an iteration takes the slower of the two clusters'
// steady-state Frugal periods (PredictFrugalIteration, each on its own
// hardware, with the joint topology); run time = iterations x iteration;
// dollars = GPUs x price x hours (on-prem at its own price, default 0: sunk).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::sim {

struct CloudOffer {
  HardwareSpec hardware;
  double price_per_gpu_hour = 0;  // US dollars.
  int max_gpus = 0;
  double intra_gbps = 100;        // Network among the rented GPUs; default 100.
};

struct HybridRequest {
  ModelSpec model;
  HardwareSpec onprem;            // On-prem GPU type.
  int onprem_gpus = 0;            // 0: no on-prem cluster (cloud only).
  double onprem_intra_gbps = 10;  // Default 10.
  double onprem_price_per_gpu_hour = 0;  // Default 0 (owned hardware).
  std::vector<CloudOffer> offers;
  double wan_gbps = 1;            // On-prem <-> cloud; default 1.
  double wan_latency_ms = 20;     // Default 20.
  int64_t global_batch = 256;     // Samples per iteration; default 256.
  double iterations = 0;          // Iterations to the target accuracy (> 0).
  // Frugal's exchange for every plan: the mode (local_steps > 0: the local
  // mode, frugal train's default, which the CLI sets), density (default 1%),
  // wire bytes (the CLI sets Frugal's own wire), selection overlap. Each plan
  // copies it and sets the model, batch and clusters.
  FrugalJob exchange;
  // Exactly one of the two goals is > 0: cheapest plan finishing by the
  // deadline, or fastest plan within the budget.
  double deadline_hours = 0;
  double budget_usd = 0;
};

struct HybridPlan {
  std::string name;               // "on-prem only", "cloud only", "hybrid".
  bool available = false;         // False when the plan cannot be built (no offer, no on-prem GPUs).
  bool meets_goal = false;
  std::string offer;              // Cloud hardware name; empty without cloud GPUs.
  int cloud_gpus = 0;
  int onprem_gpus = 0;
  int64_t batch_per_onprem_gpu = 0;
  int64_t batch_per_cloud_gpu = 0;
  double iteration_s = 0;
  double hours = 0;
  double cloud_usd = 0;
  double total_usd = 0;
};

struct HybridReport {
  HybridPlan onprem_only, cloud_only, hybrid;
  std::string recommended;  // Name of the plan to take: "on-prem only", "cloud only" or "hybrid".

  const HybridPlan& Recommended() const {
    return recommended == onprem_only.name ? onprem_only : recommended == cloud_only.name ? cloud_only : hybrid;
  }
};

// InvalidArgument for bad inputs (no goal or both, non-positive iterations,
// a global batch smaller than the GPUs, an offer without GPUs, ...), and
// when no plan meets the goal: the message names the fastest plan's hours
// (deadline) or the cheapest plan's dollars (budget).
Result<HybridReport> PlanHybrid(const HybridRequest& request);

}  // namespace frugal::sim
