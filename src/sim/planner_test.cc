#include "frugal/sim/planner.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/frugal_validation.h"

namespace frugal::sim {
namespace {

// A Frugal job of `model` over `clusters` (workers each, 10 Gbit/s inside)
// joined by `inter_gbps`, at `density`.
FrugalJob ClusteredJob(const char* model, std::vector<int> clusters, double inter_gbps, double density) {
  FrugalJob job;
  job.model = *BuiltinModel(model);
  job.clusters.clear();
  for (int w : clusters) job.clusters.push_back(ClusterSpec{w, 10});
  job.inter_cluster_gbps = inter_gbps;
  job.density = density;
  return job;
}

TEST(PlannerTest, RanksFeasibleStrategies) {
  Result<ModelSpec> m = BuiltinModel("gpt-13b");
  SearchOptions o;
  o.gpus = 64;
  o.global_batch = 256;
  o.top = 5;
  Result<SearchResult> r = SearchStrategies(*m, {*BuiltinHardware("a100-80g")}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->enumerated, 100);
  EXPECT_GT(r->out_of_memory, 0);
  ASSERT_EQ(r->by_time.size(), 5u);
  for (size_t i = 0; i < r->by_time.size(); ++i) {
    const Candidate& c = r->by_time[i];
    EXPECT_EQ(c.strategy.gpus(), 64);
    EXPECT_FALSE(c.prediction.memory.oom());
    if (i > 0) {
      EXPECT_LE(r->by_time[i - 1].run_hours, c.run_hours);
    }
  }
  // One GPU count and one price: cheapest = fastest.
  EXPECT_EQ(r->by_cost.front().strategy.ToString(), r->by_time.front().strategy.ToString());
}

TEST(PlannerTest, CostRankingDiffersAcrossHardware) {
  Result<ModelSpec> m = BuiltinModel("gpt-1.3b");
  SearchOptions o;
  o.gpus = 16;
  o.min_gpus = 4;
  o.global_batch = 64;
  o.training_tokens = 1e9;
  Result<SearchResult> r = SearchStrategies(*m, {*BuiltinHardware("a100-80g"), *BuiltinHardware("h100")}, o);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->by_cost.empty());
  for (size_t i = 1; i < r->by_cost.size(); ++i) EXPECT_LE(r->by_cost[i - 1].run_dollars, r->by_cost[i].run_dollars);
  // The fastest run uses the most GPUs; the cheapest does not need to.
  EXPECT_EQ(r->by_time.front().strategy.gpus(), 16);
  EXPECT_EQ(r->by_time.front().hardware, "h100");
}

TEST(FrugalPipelineTest, StalenessOverlapsStages) {
  FrugalJob job = ClusteredJob("resnet18", {4, 4}, 0.1, 0.01);
  job.batch_per_worker = 64;
  job.pipeline_threads = 2;  // Stages pipelined; one thread: see OnePipelineThreadChainsTheStages.
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  Result<FrugalPrediction> stale = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  const double stages[] = {stale->gpu_s, stale->sparsify_s, stale->exchange_s, stale->combine_s, stale->optimizer_s};
  double max_stage = 0, sum = stale->copy_s;
  for (double s : stages) {
    max_stage = std::max(max_stage, s);
    sum += s;
  }
  // Staleness 1 keeps two iterations in flight: the period is the slowest
  // stage or half the round trip, whichever is longer. Synchronous training
  // pays every stage in turn.
  EXPECT_NEAR(stale->iteration_s, std::max(max_stage, sum / 2), 1e-9);
  job.staleness = 0;
  Result<FrugalPrediction> sync = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(sync.ok());
  EXPECT_NEAR(sync->iteration_s, sum, 1e-9);
  EXPECT_LT(stale->iteration_s, sync->iteration_s);
  // Denser exchange over the 100 Mbit/s link is slower.
  job.density = 0.1;
  Result<FrugalPrediction> dense = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(dense.ok());
  EXPECT_GT(dense->exchange_s, 5 * sync->exchange_s);
  EXPECT_EQ(dense->bottleneck, "exchange");
  job.density = 0;
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
}

// Note [One pipeline thread]: with frugal's default single CPU pipeline
// thread, a bucket's sparsify, exchange, combine and optimizer run in turn
// (the thread waits for the network), overlapping only the compute.
TEST(FrugalPipelineTest, OnePipelineThreadChainsTheStages) {
  FrugalJob job;
  job.model = *BuiltinModel("resnet18");
  job.batch_per_worker = 64;
  job.clusters = {ClusterSpec{4, 10}, ClusterSpec{4, 10}};
  job.inter_cluster_gbps = 0.1;
  job.density = 0.1;
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  Result<FrugalPrediction> one = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  const double chain = one->sparsify_s + one->exchange_s + one->combine_s + one->optimizer_s;
  EXPECT_EQ(one->bottleneck, "exchange");
  EXPECT_GT(chain, 1.05 * one->exchange_s);  // The test means something: the other stages count.
  EXPECT_NEAR(one->iteration_s, chain, 1e-9);  // Compute (shorter) overlaps it.
  job.pipeline_threads = 2;
  Result<FrugalPrediction> two = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(two.ok());
  EXPECT_NEAR(two->iteration_s, two->exchange_s, 1e-9);  // Pipelined: the slowest stage.
  job.pipeline_threads = 0;
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace frugal::sim

namespace frugal::sim {
namespace {

TEST(FrugalPipelineTest, TelemetryAndSharedCpu) {
  FrugalJob job;
  job.model = *BuiltinModel("mlp");
  job.batch_per_worker = 32;
  job.clusters = {ClusterSpec{4, 0.1}};
  job.density = 0.05;
  job.compute_s_per_sample = 1e-3;
  job.compute_fixed_s = 0.01;
  HardwareSpec hw = *BuiltinHardware("rtx3090");
  Result<FrugalPrediction> p = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->gpu_s, 0.01 + 32e-3);
  // On shared cores compute, sparsify and optimizer cannot overlap.
  job.shared_cpu = true;
  Result<FrugalPrediction> shared = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  EXPECT_GE(shared->iteration_s,
            shared->gpu_s + shared->sparsify_s + shared->combine_s + shared->optimizer_s - 1e-12);
  EXPECT_GE(shared->iteration_s, p->iteration_s);
  // Four workers on one 2-core host: every CPU stage runs twice as slowly.
  job.workers_per_host = 4;
  HardwareSpec two_cores = hw;
  two_cores.host.cores = 2;
  Result<FrugalPrediction> crowded = PredictFrugalIteration(job, two_cores);
  ASSERT_TRUE(crowded.ok());
  EXPECT_DOUBLE_EQ(crowded->cpu_share, 2.0);
  EXPECT_NEAR(crowded->sparsify_s, 2 * shared->sparsify_s, 1e-12);
  EXPECT_NEAR(crowded->combine_s, 2 * shared->combine_s, 1e-12);
  EXPECT_NEAR(crowded->optimizer_s, 2 * shared->optimizer_s, 1e-12);
  EXPECT_DOUBLE_EQ(crowded->gpu_s, shared->gpu_s);  // Telemetry already holds the slowdown.
  EXPECT_GE(crowded->iteration_s, shared->iteration_s - 1e-12);  // Exchange-bound here (0.1 Gbit/s).
  // The combine cost: 3 chunks in at 5% x 4.25 bytes, the merged update out.
  Result<Workload> w = BuildWorkload(job.model, WorkloadOptions{});
  const double params = w->total_params;
  const double merged = 1 - std::pow(1 - 0.05, 4);
  EXPECT_NEAR(shared->combine_s, (3 * 0.05 + merged) * params * 4.25 / (hw.host.cpu_combine_gbs * 1e9), 1e-12);
  job.workers_per_host = 0;
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
  job.workers_per_host = 1;
  // cpu-local implies shared cores.
  job.shared_cpu = false;
  Result<FrugalPrediction> local = PredictFrugalIteration(job, *BuiltinHardware("cpu-local"));
  ASSERT_TRUE(local.ok());
  EXPECT_GE(local->iteration_s, local->gpu_s + local->sparsify_s + local->optimizer_s - 1e-12);
  for (int staleness : {0, 2}) {
    job.staleness = staleness;
    job.shared_cpu = true;
    EXPECT_TRUE(PredictFrugalIteration(job, hw).ok()) << staleness;
  }
}

// Note [Local rounds]: a round of fragments hides behind the inner steps
// until the link cannot carry a fragment within its window; then the link
// sets the pace. Hand-computed against the sharded and the hierarchical
// exchange.
TEST(FrugalPipelineTest, LocalRoundsHideBehindTheStepsUntilTheLinkIsTooSlow) {
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  FrugalJob job = ClusteredJob("mlp", {4}, 1, 1.0);
  job.batch_per_worker = 64;
  job.compute_s_per_sample = 0.1 / 64;  // a 0.1 s step, as a worker measures it
  job.bytes_per_selected = 0.504;
  job.local_steps = 16;
  job.local_fragments = 4;
  const double params = BuildWorkload(job.model, WorkloadOptions{})->total_params;
  const double message = params / 4 * 0.504;
  auto predict = [&](const FrugalJob& j) {
    Result<FrugalPrediction> p = PredictFrugalIteration(j, hw);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : FrugalPrediction{};
  };
  const FrugalPrediction fast = predict(job);
  EXPECT_EQ(fast.bottleneck, "gpu");
  EXPECT_DOUBLE_EQ(fast.gpu_s, 0.1);
  EXPECT_NEAR(fast.iteration_s, 0.1 + fast.sync_s, 1e-12);
  // The sharded exchange: 2 (N-1)/N of a fragment's message per fragment.
  const double rate = 10e9 / 8 * hw.efficiency.inter_link;
  EXPECT_NEAR(fast.exchange_s, 4 * 2.0 * 3 / 4 * message / rate, 1e-12);
  // 20 Mbit/s: a fragment no longer fits in its 4 steps, and the link sets the pace.
  FrugalJob slow = job;
  slow.clusters[0].intra_gbps = 0.02;
  const FrugalPrediction s = predict(slow);
  EXPECT_EQ(s.bottleneck, "exchange");
  const double chain = (s.exchange_s + s.sparsify_s + s.combine_s) / 4;
  EXPECT_GT(chain / 4, 0.1);
  EXPECT_NEAR(s.iteration_s, chain / 4 + s.sync_s, 1e-12);
  // Without overlap the whole chain is waited for.
  slow.local_overlap = false;
  EXPECT_NEAR(predict(slow).iteration_s, 0.1 + chain / 4 + s.sync_s, 1e-12);
  // Rounds twice as long halve the link's share of a step.
  slow.local_overlap = true;
  slow.local_steps = 32;
  const FrugalPrediction longer = predict(slow);
  EXPECT_NEAR(longer.iteration_s, std::max(0.1, chain / 8) + longer.sync_s, 1e-12);
  EXPECT_LT(longer.iteration_s, s.iteration_s);
  // Two clusters of 2 over a 20 Mbit/s WAN: a member's message to its
  // leader, one message each way between the leaders, both clusters'
  // messages back to the member.
  FrugalJob wan = ClusteredJob("mlp", {2, 2}, 0.02, 1.0);
  wan.batch_per_worker = 64;
  wan.compute_s_per_sample = job.compute_s_per_sample;
  wan.bytes_per_selected = 0.504;
  wan.local_steps = 16;
  wan.local_fragments = 4;
  const double wan_rate = 0.02e9 / 8 * hw.efficiency.inter_link;
  const double fragment = message / rate + message / wan_rate + 1e-3 + 2 * message / rate;
  EXPECT_NEAR(predict(wan).exchange_s, 4 * fragment, 1e-12);
  // A step-mode prediction of the same job is unchanged by the local fields' defaults.
  FrugalJob step = job;
  step.local_steps = 0;
  EXPECT_NE(predict(step).iteration_s, fast.iteration_s);
  job.local_fragments = 17;
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(DefaultLocalFragments(16), 4);
  EXPECT_EQ(DefaultLocalFragments(18), 3);
  EXPECT_EQ(DefaultLocalFragments(7), 1);
}

// Site replicas: each step waits for its cluster's fp32 gradient average,
// (n - 1) copies of the gradients on the cluster's link plus n + 2 host
// passes; the round is the per-worker mode's.
TEST(FrugalPipelineTest, SiteReplicasAddTheClustersGradientAverageToTheStep) {
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  FrugalJob job = ClusteredJob("mlp", {2, 2}, 1.0, 1.0);  // a WAN fast enough that the step sets the pace
  job.batch_per_worker = 64;
  job.compute_s_per_sample = 0.1 / 64;
  job.bytes_per_selected = 0.504;
  job.local_steps = 16;
  job.local_fragments = 4;
  Result<FrugalPrediction> local = PredictFrugalIteration(job, hw);
  job.site_replicas = true;
  Result<FrugalPrediction> site = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(local.ok() && site.ok());
  const double params = BuildWorkload(job.model, WorkloadOptions{})->total_params;
  const double passes = 4.0 * 4.0 * params / (hw.host.cpu_sparsify_gbs * 1e9);  // n + 2 over fp32
  EXPECT_NEAR(site->cluster_average_s, 2.0 * params / (10e9 / 8 * hw.efficiency.inter_link) + passes, 1e-12);
  job.site_bytes_per_value = 4;  // fp32: twice the link's share
  Result<FrugalPrediction> fp32 = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(fp32.ok());
  EXPECT_NEAR(fp32->cluster_average_s, 4.0 * params / (10e9 / 8 * hw.efficiency.inter_link) + passes, 1e-12);
  EXPECT_EQ(local->cluster_average_s, 0);
  EXPECT_DOUBLE_EQ(site->exchange_s, local->exchange_s);
  EXPECT_NEAR(site->iteration_s, local->iteration_s + site->cluster_average_s, 1e-12);
  // Clusters of one: nothing to average.
  FrugalJob singles = ClusteredJob("mlp", {1, 1}, 0.01, 1.0);
  singles.local_steps = 16;
  singles.site_replicas = true;
  Result<FrugalPrediction> one = PredictFrugalIteration(singles, hw);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->cluster_average_s, 0);
}

// Note [Frugal memory]: the host buffers per parameter as the engine's
// HostMemory names them, the device's share, and the two OOM flags.
TEST(FrugalPipelineTest, HiddenLocalStepsIsTheFewestThatHideTheRound) {
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  FrugalJob job = ClusteredJob("mlp", {2, 2}, 1.0, 0.01);  // 10 Mbit/s between the clusters
  job.batch_per_worker = 64;
  job.compute_s_per_sample = 0.05 / 64;
  ASSERT_TRUE(SetFrugalMode(&job, "local", 16, 0, 0).ok());
  job.bytes_per_selected = 0.504;
  Result<int> h = HiddenLocalSteps(job, hw);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_GT(*h, 1);
  // At h the compute is the bottleneck, at h / 2 it is not.
  for (int steps : {*h, *h / 2}) {
    FrugalJob at = job;
    at.local_steps = steps;
    at.local_fragments = DefaultLocalFragments(steps);
    EXPECT_EQ(PredictFrugalIteration(at, hw)->bottleneck == "gpu", steps == *h) << steps;
  }
  EXPECT_EQ(*HiddenLocalSteps(job, hw, *h / 2), 0);  // none up to the bound
  job.inter_cluster_gbps = 10;  // a fast link hides sooner
  EXPECT_LT(*HiddenLocalSteps(job, hw), *h);
  ASSERT_TRUE(SetFrugalMode(&job, "step", 16, 0, 0).ok());
  EXPECT_DOUBLE_EQ(job.density, 0.01);
  EXPECT_FALSE(HiddenLocalSteps(job, hw).ok());
}

TEST(FrugalPipelineTest, SetFrugalModeTakesFrugalTrainsDefaults) {
  FrugalJob job;
  ASSERT_TRUE(SetFrugalMode(&job, "site", 12, 0, 0, "fp32").ok());
  EXPECT_EQ(job.local_steps, 12);
  EXPECT_EQ(job.local_fragments, 4);
  EXPECT_TRUE(job.site_replicas);
  EXPECT_EQ(job.site_bytes_per_value, 4);
  EXPECT_EQ(job.density, 1.0);
  EXPECT_FALSE(SetFrugalMode(&job, "fast", 16, 0, 0).ok());
  EXPECT_FALSE(SetFrugalMode(&job, "local", 4, 8, 0).ok());
  EXPECT_FALSE(SetFrugalMode(&job, "local", 0, 0, 0).ok());
  EXPECT_FALSE(SetFrugalMode(&job, "local", 16, 0, 1.5).ok());
  EXPECT_FALSE(SetFrugalMode(&job, "site", 16, 0, 0, "int4").ok());
}

TEST(FrugalMemoryTest, BuffersPerParameterAndOutOfMemoryFlags) {
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  FrugalJob job = ClusteredJob("gpt-125m", {2}, 1.0, 1.0);
  job.model.transformer.seq_len = 256;
  job.batch_per_worker = 2;
  job.local_steps = 16;
  job.local_fragments = 4;
  Result<FrugalMemory> m = PredictFrugalMemory(job, hw);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const double p = job.model.ParameterCount();
  // anchor 4, master 4, base 1, sending 1, outer 4, residuals 4 + 4/2 (the owned shard)
  EXPECT_NEAR(m->host_bytes / p, 20.0, 1e-9);
  EXPECT_TRUE(m->activations_modelled);
  double optimizer = -1;
  for (const auto& [name, bytes] : m->device) {
    if (name == "optimizer") optimizer = bytes;
  }
  EXPECT_NEAR(optimizer / p, 8.0, 1e-9);  // the inner AdamW on the device
  EXPECT_FALSE(m->device_oom());
  EXPECT_FALSE(m->host_oom());

  job.clusters = {ClusterSpec{2, 10}, ClusterSpec{2, 10}};  // a leader's second residual
  EXPECT_NEAR(PredictFrugalMemory(job, hw)->host_bytes / p, 22.0, 1e-9);
  job.site_replicas = true;  // + sum 4 and two bf16 messages
  EXPECT_NEAR(PredictFrugalMemory(job, hw)->host_bytes / p, 30.0, 1e-9);

  FrugalJob step = ClusteredJob("gpt-125m", {2}, 1.0, 0.01);
  step.model.transformer.seq_len = 256;
  step.batch_per_worker = 2;
  step.staleness = 0;
  Result<FrugalMemory> s = PredictFrugalMemory(step, hw);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->host_bytes / p, 4 + 8 + 4 + 8, 1e-9);  // masters, two slots, residuals, AdamW

  step.model.transformer.seq_len = 2048;  // seq 2048 x 64 without recomputation: far past 24 GB
  step.batch_per_worker = 64;
  EXPECT_TRUE(PredictFrugalMemory(step, hw)->device_oom());
  step.batch_per_worker = 2;
  step.workers_per_host = 64;
  HardwareSpec small = hw;
  small.host.memory_gb = 16;
  EXPECT_TRUE(PredictFrugalMemory(step, small)->host_oom());
  small.host.memory_gb = 0;  // unknown: no host check
  EXPECT_FALSE(PredictFrugalMemory(step, small)->host_oom());
  step.optimizer_state_bytes = -1;
  EXPECT_FALSE(PredictFrugalMemory(step, hw).ok());
}

// Without telemetry, a CPU device's step holds the inner step on the host
// and, on shared cores, the exchange threads' CPU of the round.
TEST(FrugalPipelineTest, LocalStepsOnSharedCoresCarryTheRoundsCpu) {
  FrugalJob job = ClusteredJob("mlp", {4}, 1, 1.0);
  job.bytes_per_selected = 0.504;
  job.local_steps = 16;
  job.local_fragments = 4;
  job.workers_per_host = 4;
  HardwareSpec hw = *BuiltinHardware("cpu-local");
  Result<FrugalPrediction> p = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_GT(p->optimizer_s, 0);
  EXPECT_EQ(p->bottleneck, "gpu");
  EXPECT_NEAR(p->iteration_s, p->gpu_s + p->optimizer_s + (p->sparsify_s + p->combine_s) / 16 + p->sync_s, 1e-12);
}

// Note [Selections overlap]: the merged density between one selection
// (overlap 1) and independent selections (overlap 0), the WAN carrying each
// cluster's union, and telemetry fixing the overlap.
TEST(FrugalPipelineTest, SelectionOverlapSetsTheMergedVolume) {
  FrugalJob job = ClusteredJob("mlp", {3, 1}, 0.02, 0.1);
  job.batch_per_worker = 32;
  job.staleness = 0;
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  auto predict = [&](double overlap, double measured) {
    FrugalJob j = job;
    j.selection_overlap = overlap;
    j.measured_merged_density = measured;
    Result<FrugalPrediction> p = PredictFrugalIteration(j, hw);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return *p;
  };
  const FrugalPrediction independent = predict(0, 0);
  EXPECT_NEAR(independent.merged_density, 1 - std::pow(0.9, 4), 1e-12);
  const FrugalPrediction same = predict(1, 0);
  EXPECT_NEAR(same.merged_density, 0.1, 1e-12);
  const FrugalPrediction half = predict(0.5, 0);
  EXPECT_NEAR(half.merged_density, 1 - std::pow(0.9, 1 + 3 * 0.5), 1e-12);
  // The WAN dominates at 20 Mbit/s: cluster a's union goes over it, so the
  // exchange shrinks with the overlap, by the union's ratio (3 workers:
  // 1 - 0.9^3 = 0.271 against 0.1 at full overlap), up to the other terms.
  EXPECT_LT(same.exchange_s, half.exchange_s);
  EXPECT_LT(half.exchange_s, independent.exchange_s);
  Result<Workload> w = BuildWorkload(job.model, WorkloadOptions{});
  const double wan_bytes_per_s = 0.02e9 / 8 * hw.efficiency.inter_link;
  const double union3 = 1 - std::pow(0.9, 3);
  EXPECT_NEAR(independent.exchange_s - same.exchange_s,
              (union3 - 0.1) * w->total_params * job.bytes_per_selected / wan_bytes_per_s +
                  (independent.merged_density - 0.1) * w->total_params * job.bytes_per_selected /
                      (10e9 / 8 * hw.efficiency.inter_link),
              1e-9);
  // Telemetry: a measured merged density is inverted to the overlap that
  // gives it, and overrides the option.
  const FrugalPrediction measured = predict(0, half.merged_density);
  EXPECT_NEAR(measured.merged_density, half.merged_density, 1e-12);
  EXPECT_NEAR(measured.exchange_s, half.exchange_s, 1e-12);
  // Outside the model's range it is clamped: below one selection, full overlap.
  EXPECT_NEAR(predict(0, 0.05).merged_density, 0.1, 1e-12);
  job.selection_overlap = 1.5;
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
  job.selection_overlap = 0;
  job.measured_merged_density = std::nan("");
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
}

// Merged updates travel in their own format (int8 where chunks are int4):
// the WAN, the broadcast, the combine's output and the copy to the device
// carry merged bytes, a worker's own chunk its chunk bytes.
TEST(FrugalPipelineTest, MergedUpdatesHaveTheirOwnWireBytes) {
  FrugalJob job = ClusteredJob("mlp", {2, 2}, 0.1, 0.05);
  job.inter_cluster_latency_ms = 0;
  job.bytes_per_selected = 0.5;
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  Result<FrugalPrediction> same = PredictFrugalIteration(job, hw);  // merged 0: as the chunks
  job.merged_bytes_per_selected = 1.0;
  Result<FrugalPrediction> doubled = PredictFrugalIteration(job, hw);
  ASSERT_TRUE(same.ok() && doubled.ok());
  const double params = BuildWorkload(job.model, WorkloadOptions{})->total_params;
  const double intra = 10e9 / 8 * hw.efficiency.inter_link, wan = 0.1e9 / 8 * hw.efficiency.inter_link;
  const double union2 = 1 - std::pow(0.95, 2), union4 = 1 - std::pow(0.95, 4);
  EXPECT_NEAR(same->exchange_s, 0.05 * params * 0.5 / intra + union2 * params * 0.5 / wan + union4 * params * 0.5 / intra,
              1e-9);
  EXPECT_NEAR(doubled->exchange_s,
              0.05 * params * 0.5 / intra + union2 * params * 1.0 / wan + union4 * params * 1.0 / intra, 1e-9);
  EXPECT_GT(doubled->copy_s, same->copy_s);
  job.merged_bytes_per_selected = -1;
  EXPECT_EQ(PredictFrugalIteration(job, hw).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace frugal::sim

namespace frugal::sim {
namespace {

TEST(FrugalValidationTest, ParsesAndValidates) {
  const std::string csv =
      "# measured on the testbed\n"
      "model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms),compute ms per sample,"
      "merged density\n"
      "mlp,4,100,unlimited,0.01,32,400,1.5,0\n"
      "mlp,2+2,unlimited,100,0.1,64,900,1.5,0.13\n";
  Result<std::vector<FrugalMeasurement>> rows = ParseFrugalMeasurementsCsv(csv, "f.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].job.clusters.size(), 1u);
  EXPECT_DOUBLE_EQ((*rows)[0].job.clusters[0].intra_gbps, 0.1);
  EXPECT_EQ((*rows)[1].job.clusters.size(), 2u);
  EXPECT_DOUBLE_EQ((*rows)[1].job.clusters[1].intra_gbps, kUnlimitedMbps / 1000);
  EXPECT_DOUBLE_EQ((*rows)[1].job.inter_cluster_gbps, 0.1);
  EXPECT_DOUBLE_EQ((*rows)[1].job.compute_s_per_sample, 1.5e-3);
  EXPECT_DOUBLE_EQ((*rows)[0].job.measured_merged_density, 0);
  EXPECT_DOUBLE_EQ((*rows)[1].job.measured_merged_density, 0.13);
  Result<FrugalValidationReport> report = ValidateFrugal(*rows, *BuiltinHardware("cpu-local"), true);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  double sum = 0;
  for (const FrugalRowResult& r : report->rows) {
    EXPECT_NEAR(r.error_pct, (r.predicted_ms - r.row.iteration_ms) / r.row.iteration_ms * 100, 1e-9);
    sum += std::abs(r.error_pct);
  }
  EXPECT_NEAR(report->mape_pct, sum / 2, 1e-9);
}

TEST(FrugalValidationTest, ErrorsNameTheLine) {
  const std::string header = "model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms)\n";
  auto error = [&](const std::string& row) {
    Result<std::vector<FrugalMeasurement>> r = ParseFrugalMeasurementsCsv(header + row, "f.csv");
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(error("mlp,4,100,100,2,32,400\n").find("f.csv:2: 'density'"), std::string::npos);
  EXPECT_NE(error("mlp,2+x,100,100,0.1,32,400\n").find("f.csv:2: 'clusters'"), std::string::npos);
  EXPECT_NE(error("vgg,4,100,100,0.1,32,400\n").find("f.csv:2: unknown model"), std::string::npos);
  EXPECT_NE(error("mlp,4,fast,100,0.1,32,400\n").find("'intra mbps' must be"), std::string::npos);
  EXPECT_NE(error("mlp,4,100,100,0.1,32\n").find("expected 7 fields"), std::string::npos);
  // Regression (sim_fuzz): a huge batch was converted to int64 before any bound.
  EXPECT_NE(error("mlp,2,100,unlimited,0.01,6333333333333333333333333333333333333,30.69\n")
                .find("f.csv:2: 'batch per worker' must be a whole number from 1 to 1000000"),
            std::string::npos);
  Result<std::vector<FrugalMeasurement>> stale = ParseFrugalMeasurementsCsv(
      "model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms),staleness\n"
      "mlp,4,100,100,0.1,32,400,1e40\n",
      "f.csv");
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("'staleness' must be a whole number from 0 to 16"), std::string::npos);
  const std::string merged_header =
      "model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms),merged density\n";
  Result<std::vector<FrugalMeasurement>> bad = ParseFrugalMeasurementsCsv(merged_header + "mlp,4,100,100,0.1,32,400,1.5\n", "f.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f.csv:2: 'merged density' must be in [0, 1]"), std::string::npos)
      << bad.status().message();
  const std::string local_header =
      "model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms),local steps,bytes per value\n";
  Result<std::vector<FrugalMeasurement>> local =
      ParseFrugalMeasurementsCsv(local_header + "mlp,4,100,100,1,64,120,16,0.4\nmlp,4,100,100,0.03,64,120,0,0.6\n", "f.csv");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ((*local)[0].job.local_steps, 16);
  EXPECT_EQ((*local)[0].job.local_fragments, 4);
  EXPECT_DOUBLE_EQ((*local)[0].job.bytes_per_selected, 0.4);
  EXPECT_TRUE((*local)[0].measured_bytes);
  EXPECT_EQ((*local)[1].job.local_steps, 0);
  for (const char* row : {"mlp,4,100,100,1,64,120,2.5,0.4\n", "mlp,4,100,100,1,64,120,16,0\n"}) {
    Result<std::vector<FrugalMeasurement>> r = ParseFrugalMeasurementsCsv(local_header + row, "f.csv");
    ASSERT_FALSE(r.ok()) << row;
    EXPECT_NE(r.status().message().find("f.csv:2: '"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace frugal::sim

namespace frugal::sim {
namespace {

TEST(DataParallelStepTest, ScalesAndReportsMemoryLimits) {
  const HardwareSpec hw = *BuiltinHardware("rtx3090");
  const ModelSpec resnet = *BuiltinModel("resnet18");
  Result<DataParallelStep> one = PredictDataParallelStep(resnet, hw, {1}, 512);
  Result<DataParallelStep> four = PredictDataParallelStep(resnet, hw, {4}, 512);
  Result<DataParallelStep> spread = PredictDataParallelStep(resnet, hw, {2, 2}, 512);
  ASSERT_TRUE(one.ok() && four.ok() && spread.ok()) << one.status().ToString();
  EXPECT_EQ(one->per_gpu_batch, 512);
  EXPECT_EQ(four->per_gpu_batch, 128);
  EXPECT_LT(four->step_s, one->step_s);
  // Two nodes over 10 Gbit/s Ethernet are slower than one node over PCIe.
  EXPECT_GT(spread->step_s, four->step_s);
  // GPT-13B does not fit on one 24 GB GPU at any micro-batch.
  Result<DataParallelStep> big = PredictDataParallelStep(*BuiltinModel("gpt-13b"), hw, {1}, 8);
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(std::isinf(big->step_s));
  EXPECT_EQ(big->micro_batch, 0);
  // A model that fits only with gradient accumulation picks a smaller micro-batch.
  Result<DataParallelStep> acc = PredictDataParallelStep(*BuiltinModel("gpt-350m"), *BuiltinHardware("a100-40g"), {1}, 64);
  ASSERT_TRUE(acc.ok());
  EXPECT_GT(acc->micro_batch, 0);
  EXPECT_LT(acc->micro_batch, 64);
  EXPECT_FALSE(PredictDataParallelStep(resnet, hw, {}, 8).ok());
}

}  // namespace
}  // namespace frugal::sim
