#include "frugal/sim/hybrid_planner.h"

#include <gtest/gtest.h>

#include "frugal/sim/frugal_pipeline.h"

namespace frugal::sim {
namespace {

// A GPT-2-small-sized model (fp16), eight consumer GPUs on prem (10 Gbit/s),
// A100s for rent at $4/h, 1 Gbit/s WAN: compute-bound, so renting helps.
HybridRequest Request() {
  HybridRequest r;
  r.model = MakeTransformer("gpt-small", 12, 768, 12, 512, 50304);
  r.onprem = *BuiltinHardware("rtx3090");
  r.onprem_gpus = 8;
  r.onprem_intra_gbps = 10;
  CloudOffer a100;
  a100.hardware = *BuiltinHardware("a100-80g");
  a100.price_per_gpu_hour = 4;
  a100.max_gpus = 16;
  r.offers = {a100};
  r.wan_gbps = 1;
  r.global_batch = 1024;
  r.iterations = 20000;
  r.deadline_hours = 1000;
  return r;
}

TEST(HybridPlannerTest, GenerousDeadlinePicksTheFreeOnPremCluster) {
  Result<HybridReport> r = PlanHybrid(Request());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Recommended().name, "on-prem only");
  EXPECT_EQ(r->Recommended().total_usd, 0.0);
  EXPECT_TRUE(r->onprem_only.available && r->cloud_only.available && r->hybrid.available);
  // Hybrid adds GPUs: faster than on-prem alone.
  EXPECT_LT(r->hybrid.hours, r->onprem_only.hours);
  // The faster GPU gets the larger share, and the whole batch is placed.
  EXPECT_GT(r->hybrid.batch_per_cloud_gpu, r->hybrid.batch_per_onprem_gpu);
  EXPECT_GE(r->hybrid.onprem_gpus * r->hybrid.batch_per_onprem_gpu +
                r->hybrid.cloud_gpus * r->hybrid.batch_per_cloud_gpu,
            1024);
  // Dollars = GPUs x price x hours.
  EXPECT_NEAR(r->cloud_only.cloud_usd, r->cloud_only.cloud_gpus * 4.0 * r->cloud_only.hours, 1e-6);
}

TEST(HybridPlannerTest, TightDeadlineRentsTheCheapestPlanThatMeetsIt) {
  HybridRequest req = Request();
  Result<HybridReport> loose = PlanHybrid(req);
  ASSERT_TRUE(loose.ok());
  // Between the fastest plan and on-prem alone: renting is needed.
  req.deadline_hours = 0.5 * loose->onprem_only.hours;
  Result<HybridReport> r = PlanHybrid(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->Recommended().meets_goal);
  EXPECT_LE(r->Recommended().hours, req.deadline_hours);
  EXPECT_GT(r->Recommended().cloud_gpus, 0);
  EXPECT_FALSE(r->onprem_only.meets_goal);
  for (const HybridPlan* p : {&r->cloud_only, &r->hybrid}) {
    if (p->meets_goal) EXPECT_LE(r->Recommended().total_usd, p->total_usd) << p->name;
  }
}

TEST(HybridPlannerTest, InfeasibleGoalsAreClearErrors) {
  HybridRequest req = Request();
  req.deadline_hours = 1e-6;
  Result<HybridReport> r = PlanHybrid(req);
  ASSERT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("infeasible"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("fastest plan"), std::string::npos) << r.status().message();
  req.deadline_hours = 0;
  req.budget_usd = 1e-9;
  req.onprem_price_per_gpu_hour = 1;  // Nothing is free any more.
  r = PlanHybrid(req);
  ASSERT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cheapest plan"), std::string::npos) << r.status().message();
}

// The request's exchange carries the mode: in the local mode a plan's link
// carries one round per 16 steps, so on a WAN too slow for the rounds to hide
// behind compute its iteration is about 1/16 of the step mode's at the same
// density.
TEST(HybridPlannerTest, TheLocalModeSendsARoundPerLocalSteps) {
  HybridRequest step = Request();
  step.wan_gbps = 0.01;
  step.exchange.density = 1;
  HybridRequest local = step;
  local.exchange.local_steps = 16;
  local.exchange.local_fragments = DefaultLocalFragments(16);
  Result<HybridReport> s = PlanHybrid(step);
  Result<HybridReport> l = PlanHybrid(local);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->hybrid.cloud_gpus, s->hybrid.cloud_gpus);
  EXPECT_LT(l->hybrid.iteration_s, s->hybrid.iteration_s / 8);
  EXPECT_GT(l->hybrid.iteration_s, s->hybrid.iteration_s / 32);
  // On prem alone (10 Gbit/s, no WAN) the rounds cost less too.
  EXPECT_LT(l->onprem_only.iteration_s, s->onprem_only.iteration_s);
}

TEST(HybridPlannerTest, BadInputsAreRejected) {
  auto code = [](HybridRequest req) { return PlanHybrid(req).status().code(); };
  HybridRequest both = Request();
  both.budget_usd = 100;
  EXPECT_EQ(code(both), Status::Code::kInvalidArgument);
  HybridRequest none = Request();
  none.deadline_hours = 0;
  EXPECT_EQ(code(none), Status::Code::kInvalidArgument);
  HybridRequest iterations = Request();
  iterations.iterations = 0;
  EXPECT_EQ(code(iterations), Status::Code::kInvalidArgument);
  HybridRequest small_batch = Request();
  small_batch.global_batch = 4;  // Fewer samples than on-prem GPUs.
  EXPECT_EQ(code(small_batch), Status::Code::kInvalidArgument);
  HybridRequest empty_offer = Request();
  empty_offer.offers[0].max_gpus = 0;
  EXPECT_EQ(code(empty_offer), Status::Code::kInvalidArgument);
  HybridRequest nothing = Request();
  nothing.onprem_gpus = 0;
  nothing.offers.clear();
  EXPECT_EQ(code(nothing), Status::Code::kInvalidArgument);
  HybridRequest density = Request();
  density.exchange.density = 2;
  EXPECT_EQ(code(density), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace frugal::sim
