// `frugal plan hybrid`: on-prem + cloud co-training cost planner. A thin layer over sim::PlanHybrid; see docs/design/planner.md.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/common/csv.h"
#include "frugal/sim/hybrid_planner.h"
#include "input_checks.h"
#include "plan_common.h"

namespace frugal::cli {
namespace {

std::vector<std::string> SplitColons(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ':') {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

double NumberOrThrow(const std::string& text, const std::string& what) {
  const std::optional<double> v = ParseFiniteNumber(text);
  if (!v) throw UsageError(what + " must be a number, got '" + text + "'");
  return *v;
}

// "HARDWARE:PRICE:MAX_GPUS[:INTRA_GBPS]", e.g. "a100-80g:4.1:16".
sim::CloudOffer ParseOffer(const std::string& text) {
  const std::vector<std::string> p = SplitColons(text);
  if (p.size() < 3 || p.size() > 4) {
    throw UsageError("--cloud takes HARDWARE:PRICE_PER_GPU_HOUR:MAX_GPUS[:INTRA_GBPS], got '" + text + "'");
  }
  sim::CloudOffer o;
  o.hardware = OrThrow(sim::LoadHardware(p[0]));
  o.price_per_gpu_hour = NumberOrThrow(p[1], "--cloud price");
  const double gpus = NumberOrThrow(p[2], "--cloud GPU count");
  if (gpus != static_cast<int>(gpus) || gpus < 1 || gpus > 4096) {
    throw UsageError("--cloud GPU count must be an integer in [1, 4096], got '" + p[2] + "'");
  }
  o.max_gpus = static_cast<int>(gpus);
  if (p.size() == 4) o.intra_gbps = NumberOrThrow(p[3], "--cloud bandwidth");
  return o;
}

struct HybridOpts {
  ModelFlags model;
  std::string onprem;  // HARDWARE:COUNT
  double onprem_gbps = 10, onprem_price = 0;
  std::vector<std::string> cloud;
  double wan_gbps = 1, wan_latency_ms = 20;
  int64_t global_batch = 256;
  double iterations = 0, deadline_hours = 0, budget_usd = 0, selection_overlap = 0;
  SyncFlags sync;
  WireBytesFlags wire;
};

void PrintPlan(const sim::HybridPlan& p, bool recommended) {
  if (!p.available) {
    std::printf("%-14s (not available)\n", p.name.c_str());
    return;
  }
  std::printf("%-14s %4d on-prem x %-5lld %4d cloud %-10s x %-5lld %9.3f s/it %9.1f h  cloud $%10.0f  total $%10.0f%s%s\n",
              p.name.c_str(), p.onprem_gpus, static_cast<long long>(p.batch_per_onprem_gpu), p.cloud_gpus,
              p.offer.empty() ? "-" : p.offer.c_str(), static_cast<long long>(p.batch_per_cloud_gpu), p.iteration_s,
              p.hours, p.cloud_usd, p.total_usd, p.meets_goal ? "" : "  (misses the goal)",
              recommended ? "  <- recommended" : "");
}

void RunHybrid(const HybridOpts& o) {
  sim::HybridRequest r;
  r.model = o.model.Resolve();
  if (!o.onprem.empty()) {
    const std::vector<std::string> p = SplitColons(o.onprem);
    if (p.size() != 2) throw UsageError("--onprem takes HARDWARE:GPUS, got '" + o.onprem + "'");
    r.onprem = OrThrow(sim::LoadHardware(p[0]));
    const double gpus = NumberOrThrow(p[1], "--onprem GPU count");
    if (gpus != static_cast<int>(gpus) || gpus < 1 || gpus > 1e5) {
      throw UsageError("--onprem GPU count must be an integer in [1, 100000], got '" + p[1] + "'");
    }
    r.onprem_gpus = static_cast<int>(gpus);
  }
  for (const std::string& c : o.cloud) r.offers.push_back(ParseOffer(c));
  r.onprem_intra_gbps = o.onprem_gbps;
  r.onprem_price_per_gpu_hour = o.onprem_price;
  r.wan_gbps = o.wan_gbps;
  r.wan_latency_ms = o.wan_latency_ms;
  r.global_batch = o.global_batch;
  r.iterations = o.iterations;
  o.sync.Apply(&r.exchange);
  r.exchange.selection_overlap = o.selection_overlap;
  o.wire.Apply(&r.exchange);
  r.deadline_hours = o.deadline_hours;
  r.budget_usd = o.budget_usd;
  const sim::HybridReport report = OrThrow(sim::PlanHybrid(r));
  char goal[96];
  if (r.deadline_hours > 0) {
    std::snprintf(goal, sizeof goal, "finish within %g h, as cheaply as possible", r.deadline_hours);
  } else {
    std::snprintf(goal, sizeof goal, "spend at most $%g, as fast as possible", r.budget_usd);
  }
  char mode[96];
  if (o.sync.local()) {
    std::snprintf(mode, sizeof mode, "local mode, a round every %d steps", r.exchange.local_steps);
  } else {
    std::snprintf(mode, sizeof mode, "step mode");
  }
  std::printf("model %s, %lld samples per iteration, %.0f iterations, WAN %.3g Gbit/s, %s at density %g; goal: %s\n",
              r.model.name.c_str(), static_cast<long long>(r.global_batch), r.iterations, r.wan_gbps, mode,
              r.exchange.density, goal);
  for (const sim::HybridPlan* p : {&report.onprem_only, &report.cloud_only, &report.hybrid}) {
    PrintPlan(*p, p->name == report.recommended);
  }
}

}  // namespace

void AddHybrid(CLI::App* plan) {
  auto o = std::make_shared<HybridOpts>();
  auto* cmd = plan->add_subcommand("hybrid", "Plan on-prem + cloud co-training: how many cloud GPUs, batch placement, "
                                             "time and dollars");
  o->model.Add(cmd);
  cmd->add_option("--onprem", o->onprem, "On-prem cluster HARDWARE:GPUS (e.g. rtx3090:8; omit for cloud only)");
  cmd->add_option("--onprem-gbps", o->onprem_gbps, "On-prem network per GPU, Gbit/s")
      ->capture_default_str()
      ->check(Bounded(1e-6, 1e6));
  cmd->add_option("--onprem-price", o->onprem_price, "On-prem $ per GPU-hour (0: owned)")
      ->capture_default_str()
      ->check(Bounded(0, 1e6));
  cmd->add_option("--cloud", o->cloud, "Cloud offer HARDWARE:PRICE_PER_GPU_HOUR:MAX_GPUS[:INTRA_GBPS]; repeatable");
  cmd->add_option("--wan-gbps", o->wan_gbps, "On-prem <-> cloud bandwidth, Gbit/s")
      ->capture_default_str()
      ->check(Bounded(1e-6, 1e6));
  cmd->add_option("--wan-latency-ms", o->wan_latency_ms, "On-prem <-> cloud latency")
      ->capture_default_str()
      ->check(Bounded(0, 1e5));
  cmd->add_option("--global-batch", o->global_batch, "Samples per iteration over all GPUs")
      ->capture_default_str()
      ->check(Bounded(1, 1e9));
  cmd->add_option("--iterations", o->iterations, "Iterations to the target accuracy (with sparse updates)")
      ->required()
      ->check(Bounded(1, 1e12));
  o->sync.Add(cmd);
  AddSelectionOverlapOption(cmd, &o->selection_overlap);
  o->wire.Add(cmd);
  cmd->add_option("--deadline-hours", o->deadline_hours, "Goal: finish by then, as cheaply as possible")
      ->check(Bounded(1e-9, 1e9));
  cmd->add_option("--budget-usd", o->budget_usd, "Goal: spend at most this, as fast as possible")
      ->check(Bounded(1e-9, 1e15));
  cmd->callback([o] { RunHybrid(*o); });
}

}  // namespace frugal::cli
