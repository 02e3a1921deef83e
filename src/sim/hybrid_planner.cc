#include "frugal/sim/hybrid_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "frugal/sim/frugal_pipeline.h"

namespace frugal::sim {
namespace {

// Note [Hybrid plan]
// Two Frugal clusters (on-prem, cloud) joined by the WAN. Each GPU's batch
// is proportional to its speed (per-sample compute time from the same cost
// model as every other prediction), so both clusters finish their forward and
// backward together; each cluster's steady-state period is
// PredictFrugalIteration on its own hardware with the joint topology (so the
// WAN exchange of merged sparse chunks is in both), and an iteration takes
// the slower of the two. Time to accuracy = iterations x iteration; the
// iterations are the user's (sparse training needs more than dense: about
// 20% in StellaTrain's runs). Cloud GPUs are billed for the whole run.

constexpr int kMaxCloudGpus = 4096;

double ComputeSecondsPerSample(const ModelSpec& model, const HardwareSpec& hw, int64_t batch, Status* error) {
  FrugalJob job;
  job.model = model;
  job.batch_per_worker = std::max<int64_t>(1, batch);
  job.clusters = {ClusterSpec{1, 10}};
  Result<FrugalPrediction> p = PredictFrugalIteration(job, hw);
  if (!p.ok()) {
    *error = p.status();
    return 0;
  }
  return p->gpu_s / static_cast<double>(job.batch_per_worker);
}

class Evaluator {
 public:
  explicit Evaluator(const HybridRequest& r) : r_(r) {}

  // On-prem GPUs plus `cloud` GPUs of `offer` (either may be absent).
  Result<HybridPlan> Evaluate(const std::string& name, int onprem, const CloudOffer* offer, int cloud) const {
    HybridPlan plan;
    plan.name = name;
    plan.onprem_gpus = onprem;
    plan.cloud_gpus = offer != nullptr ? cloud : 0;
    plan.offer = plan.cloud_gpus > 0 ? offer->hardware.name : "";
    const int gpus = plan.onprem_gpus + plan.cloud_gpus;
    if (gpus == 0) return plan;
    if (r_.global_batch < gpus) {
      return Status::InvalidArgument("global batch " + std::to_string(r_.global_batch) + " is smaller than the " +
                                     std::to_string(gpus) + " GPUs of the " + name + " plan");
    }
    FRUGAL_RETURN_IF_ERROR(SplitBatch(offer, &plan));
    std::vector<ClusterSpec> clusters;
    if (plan.onprem_gpus > 0) clusters.push_back(ClusterSpec{plan.onprem_gpus, r_.onprem_intra_gbps});
    if (plan.cloud_gpus > 0) clusters.push_back(ClusterSpec{plan.cloud_gpus, offer->intra_gbps});
    auto period = [&](const HardwareSpec& hw, int64_t batch) -> Result<double> {
      FrugalJob job = r_.exchange;
      job.model = r_.model;
      job.batch_per_worker = batch;
      job.clusters = clusters;
      job.inter_cluster_gbps = r_.wan_gbps;
      job.inter_cluster_latency_ms = r_.wan_latency_ms;
      FRUGAL_ASSIGN_OR_RETURN(FrugalPrediction p, PredictFrugalIteration(job, hw));
      return p.iteration_s;
    };
    if (plan.onprem_gpus > 0) {
      FRUGAL_ASSIGN_OR_RETURN(double s, period(r_.onprem, plan.batch_per_onprem_gpu));
      plan.iteration_s = std::max(plan.iteration_s, s);
    }
    if (plan.cloud_gpus > 0) {
      FRUGAL_ASSIGN_OR_RETURN(double s, period(offer->hardware, plan.batch_per_cloud_gpu));
      plan.iteration_s = std::max(plan.iteration_s, s);
    }
    plan.available = true;
    plan.hours = r_.iterations * plan.iteration_s / 3600.0;
    plan.cloud_usd = plan.cloud_gpus > 0 ? plan.cloud_gpus * offer->price_per_gpu_hour * plan.hours : 0.0;
    plan.total_usd = plan.cloud_usd + plan.onprem_gpus * r_.onprem_price_per_gpu_hour * plan.hours;
    plan.meets_goal = r_.deadline_hours > 0 ? plan.hours <= r_.deadline_hours : plan.total_usd <= r_.budget_usd;
    return plan;
  }

  // Under a deadline: meeting it first, then cheaper, then faster. Under a
  // budget: within it first, then faster, then cheaper.
  bool Better(const HybridPlan& a, const HybridPlan& b) const {
    if (!b.available) return a.available;
    if (!a.available) return false;
    if (a.meets_goal != b.meets_goal) return a.meets_goal;
    const bool deadline = r_.deadline_hours > 0;
    if (!a.meets_goal) return deadline ? a.hours < b.hours : a.total_usd < b.total_usd;
    if (deadline) return a.total_usd < b.total_usd || (a.total_usd == b.total_usd && a.hours < b.hours);
    return a.hours < b.hours || (a.hours == b.hours && a.total_usd < b.total_usd);
  }

 private:
  Status SplitBatch(const CloudOffer* offer, HybridPlan* plan) const {
    const int gpus = plan->onprem_gpus + plan->cloud_gpus;
    const int64_t even = r_.global_batch / gpus;
    Status error;
    const double speed_on =
        plan->onprem_gpus > 0 ? 1.0 / ComputeSecondsPerSample(r_.model, r_.onprem, even, &error) : 0.0;
    const double speed_cloud =
        plan->cloud_gpus > 0 ? 1.0 / ComputeSecondsPerSample(r_.model, offer->hardware, even, &error) : 0.0;
    FRUGAL_RETURN_IF_ERROR(error);
    const double total_speed = plan->onprem_gpus * speed_on + plan->cloud_gpus * speed_cloud;
    const double batch = static_cast<double>(r_.global_batch);
    if (plan->onprem_gpus > 0) {
      plan->batch_per_onprem_gpu = std::max<int64_t>(1, std::llround(batch * speed_on / total_speed));
    }
    if (plan->cloud_gpus > 0) {
      const int64_t left = r_.global_batch - plan->onprem_gpus * plan->batch_per_onprem_gpu;
      plan->batch_per_cloud_gpu = std::max<int64_t>(1, (left + plan->cloud_gpus - 1) / plan->cloud_gpus);
    }
    return Status::Ok();
  }

  const HybridRequest& r_;
};

Status CheckRequest(const HybridRequest& r) {
  if ((r.deadline_hours > 0) == (r.budget_usd > 0)) {
    return Status::InvalidArgument("give exactly one goal: a deadline (hours) or a budget (dollars), both positive");
  }
  if (!(r.iterations > 0) || !std::isfinite(r.iterations)) {
    return Status::InvalidArgument("iterations to accuracy must be a positive number");
  }
  if (r.global_batch <= 0) return Status::InvalidArgument("global batch must be positive");
  if (r.onprem_gpus < 0) return Status::InvalidArgument("on-prem GPU count must not be negative");
  if (r.onprem_gpus == 0 && r.offers.empty()) return Status::InvalidArgument("no on-prem GPUs and no cloud offer");
  if (!(r.wan_gbps > 0) || !(r.onprem_intra_gbps > 0) || !(r.exchange.density > 0) || r.exchange.density > 1 || r.wan_latency_ms < 0 ||
      r.onprem_price_per_gpu_hour < 0) {
    return Status::InvalidArgument("bandwidths must be positive, density in (0, 1], latency and prices not negative");
  }
  for (const CloudOffer& o : r.offers) {
    if (o.max_gpus < 1 || o.max_gpus > kMaxCloudGpus) {
      return Status::InvalidArgument("cloud offer '" + o.hardware.name + "': GPU count must be in [1, " +
                                     std::to_string(kMaxCloudGpus) + "]");
    }
    if (!(o.price_per_gpu_hour >= 0) || !std::isfinite(o.price_per_gpu_hour) || !(o.intra_gbps > 0)) {
      return Status::InvalidArgument("cloud offer '" + o.hardware.name +
                                     "': price must be a finite number >= 0 and bandwidth positive");
    }
  }
  return Status::Ok();
}

std::string Describe(const HybridPlan& p) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s (%d on-prem + %d cloud GPUs): %.1f h, $%.0f", p.name.c_str(), p.onprem_gpus,
                p.cloud_gpus, p.hours, p.total_usd);
  return buf;
}

}  // namespace

Result<HybridReport> PlanHybrid(const HybridRequest& r) {
  FRUGAL_RETURN_IF_ERROR(CheckRequest(r));
  const Evaluator eval(r);
  HybridReport report;
  report.onprem_only.name = "on-prem only";
  report.cloud_only.name = "cloud only";
  report.hybrid.name = "hybrid";
  if (r.onprem_gpus > 0) {
    FRUGAL_ASSIGN_OR_RETURN(report.onprem_only, eval.Evaluate("on-prem only", r.onprem_gpus, nullptr, 0));
  }
  for (const CloudOffer& o : r.offers) {
    for (int k = 1; k <= o.max_gpus && k <= r.global_batch; ++k) {
      FRUGAL_ASSIGN_OR_RETURN(HybridPlan cloud, eval.Evaluate("cloud only", 0, &o, k));
      if (eval.Better(cloud, report.cloud_only)) report.cloud_only = cloud;
      if (r.onprem_gpus > 0 && r.onprem_gpus + k <= r.global_batch) {
        FRUGAL_ASSIGN_OR_RETURN(HybridPlan both, eval.Evaluate("hybrid", r.onprem_gpus, &o, k));
        if (eval.Better(both, report.hybrid)) report.hybrid = both;
      }
    }
  }
  const HybridPlan* best = nullptr;
  for (const HybridPlan* p : {&report.onprem_only, &report.cloud_only, &report.hybrid}) {
    if (best == nullptr || eval.Better(*p, *best)) best = p;
  }
  if (best == nullptr || !best->available) return Status::InvalidArgument("no plan could be built");
  if (!best->meets_goal) {
    char goal[96];
    if (r.deadline_hours > 0) {
      std::snprintf(goal, sizeof goal, "deadline of %.1f h cannot be met", r.deadline_hours);
    } else {
      std::snprintf(goal, sizeof goal, "budget of $%.0f cannot be met", r.budget_usd);
    }
    return Status::InvalidArgument(std::string("infeasible: the ") + goal + "; the " +
                                   (r.deadline_hours > 0 ? "fastest" : "cheapest") + " plan is " + Describe(*best));
  }
  report.recommended = best->name;
  return report;
}

}  // namespace frugal::sim
