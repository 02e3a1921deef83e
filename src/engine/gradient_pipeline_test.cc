#include "frugal/engine/gradient_pipeline.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "testing/test_world.h"

namespace frugal::engine {
namespace {

using comm::testing::Backend;

// Each rank r minimises 0.5 * ||x - c_r||^2 with the pipeline; the gradient
// is computed from the parameters copied at BeginIteration, so staleness is
// visible in the trajectory.
struct QuadraticRun {
  std::vector<std::vector<float>> final_params;  // per rank
  std::vector<uint64_t> checksums;
  std::vector<Status> statuses;
  std::vector<PipelineStats> stats;
};

float Target(int rank, size_t i) { return static_cast<float>((rank + 1) * ((i % 7) + 1)) * 0.1f; }

// *pipeline's state after BeginIteration(t), in a fresh pipeline that has
// begun t again.
Status Restart(const PipelineOptions& options, const std::vector<BucketSpec>& specs, comm::Transport* transport,
               int64_t t, const CopyOutFn& copy, std::unique_ptr<GradientPipeline>* pipeline) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> state, (*pipeline)->SaveState());
  FRUGAL_ASSIGN_OR_RETURN(*pipeline, GradientPipeline::Create(options, specs, transport));
  FRUGAL_RETURN_IF_ERROR((*pipeline)->LoadState(state));
  return (*pipeline)->BeginIteration(t, copy);
}

// With restart_at >= 0 every rank saves its pipeline's state right after
// BeginIteration(restart_at), builds a fresh pipeline from it and goes on.
QuadraticRun RunQuadratic(Backend backend, int world, size_t n, int steps, PipelineOptions base,
                          std::vector<std::string> clusters, int restart_at) {
  if (clusters.empty()) clusters.assign(world, "local");
  comm::testing::World w = comm::testing::MakeWorld(backend, clusters);
  QuadraticRun out;
  out.final_params.resize(world);
  out.checksums.resize(world);
  out.statuses.assign(world, Status::Internal("not run"));
  out.stats.resize(world);
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    std::vector<BucketSpec> specs(2);
    specs[0].name = "a";
    specs[0].initial.assign(n, 0.0f);
    specs[1].name = "b";
    specs[1].initial.assign(n / 2 + 3, 1.0f);
    auto pipeline = GradientPipeline::Create(base, specs, transport.get());
    if (!pipeline.ok()) {
      out.statuses[r] = pipeline.status();
      return;
    }
    std::vector<std::vector<float>> model = {specs[0].initial, specs[1].initial};
    auto copy = [&](size_t b, Span<const float> m) { model[b].assign(m.begin(), m.end()); };
    for (int t = 0; t < steps; ++t) {
      Status s = (*pipeline)->BeginIteration(t, copy);
      if (s.ok() && t == restart_at) s = Restart(base, specs, transport.get(), t, copy, &*pipeline);
      if (!s.ok()) {
        out.statuses[r] = s;
        return;
      }
      GradientPipeline& p = **pipeline;
      for (size_t b = 0; b < 2; ++b) {
        Span<float> g = p.GradBuffer(b, t);
        for (size_t i = 0; i < g.size(); ++i) g[i] = model[b][i] - Target(r, i + b);
        s = p.Submit(b, t);
        if (!s.ok()) {
          out.statuses[r] = s;
          return;
        }
      }
    }
    GradientPipeline& p = **pipeline;
    out.statuses[r] = p.Finish(copy);
    out.checksums[r] = p.Checksum();
    out.final_params[r] = model[0];
    out.final_params[r].insert(out.final_params[r].end(), model[1].begin(), model[1].end());
    out.stats[r] = p.stats();
  });
  return out;
}

// The multi-rank tests, over each backend (comm/testing/test_world.h).
class GradientPipelineTest : public ::testing::TestWithParam<Backend> {
 protected:
  // RunQuadratic on this instance's backend. Over ZeroMQ the run must be
  // the in-process one, bit for bit: the same checksums and parameters.
  QuadraticRun Run(int world, size_t n, int steps, const PipelineOptions& base,
                   const std::vector<std::string>& clusters = {}, int restart_at = -1) {
    QuadraticRun run = RunQuadratic(GetParam(), world, n, steps, base, clusters, restart_at);
    if (GetParam() != Backend::kInProc) {
      QuadraticRun in_proc = RunQuadratic(Backend::kInProc, world, n, steps, base, clusters, restart_at);
      EXPECT_EQ(run.checksums, in_proc.checksums) << "over " << BackendName(GetParam());
      EXPECT_EQ(run.final_params, in_proc.final_params) << "over " << BackendName(GetParam());
    }
    return run;
  }
};

PipelineOptions ExactOptions(int staleness) {
  PipelineOptions o;
  o.sparsifier = compress::SparsifierKind::kTopk;
  o.density = 1.0;
  o.cpu_threads = 1;
  o.seed = 1;
  o.wire = {compress::ValueEncoding::kFp32, compress::IndexEncoding::kDeltaVarint};
  o.staleness = staleness;
  o.optimizer.kind = "sgd";
  o.lr_at = [](int64_t) { return 0.1; };
  o.exchange.timeout = std::chrono::milliseconds(5000);
  return o;
}

// The same iteration computed serially: x_{t+1} = x_t - lr * mean_r(x_{t-s} - c_r).
std::vector<float> Reference(int world, size_t n, int steps, int staleness, float init, size_t shift) {
  std::vector<std::vector<float>> versions = {std::vector<float>(n, init)};
  for (int t = 0; t < steps; ++t) {
    const std::vector<float>& seen = versions[std::max(0, t - staleness)];
    std::vector<float> next = versions.back();
    for (size_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < world; ++r) sum += seen[i] - Target(r, i + shift);
      next[i] -= 0.1f * (sum / static_cast<float>(world));
    }
    versions.push_back(next);
  }
  return versions.back();
}

TEST_P(GradientPipelineTest, DenseExchangeMatchesSerialSgdForBothStalenessValues) {
  for (int staleness : {0, 1}) {
    const int world = 3;
    const size_t n = 40;
    QuadraticRun run = Run(world, n, 12, ExactOptions(staleness));
    std::vector<float> ref = Reference(world, n, 12, staleness, 0.0f, 0);
    std::vector<float> ref_b = Reference(world, n / 2 + 3, 12, staleness, 1.0f, 1);
    ref.insert(ref.end(), ref_b.begin(), ref_b.end());
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(run.statuses[r].ok()) << run.statuses[r].ToString();
      ASSERT_EQ(run.final_params[r].size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_NEAR(run.final_params[r][i], ref[i], 1e-5) << "staleness " << staleness << " rank " << r << " i " << i;
      }
      EXPECT_EQ(run.checksums[r], run.checksums[0]);
    }
  }
}

TEST_P(GradientPipelineTest, SparseRunsKeepReplicasIdenticalAndSendAboutTheDensity) {
  PipelineOptions o = ExactOptions(1);
  o.sparsifier = compress::SparsifierKind::kBlock;
  o.density = 0.05;
  o.wire = {compress::ValueEncoding::kFp16, compress::IndexEncoding::kBlockId};
  QuadraticRun run = Run(4, 4096, 60, o, {"a", "a", "b", "b"});
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(run.statuses[r].ok()) << run.statuses[r].ToString();
    EXPECT_EQ(run.final_params[r], run.final_params[0]);
    EXPECT_EQ(run.checksums[r], run.checksums[0]);
    double density = static_cast<double>(run.stats[r].sent_values) / static_cast<double>(run.stats[r].total_values);
    EXPECT_GT(density, 0.03);
    EXPECT_LT(density, 0.08);
    // Every rank applies the same merged update: the union of the four
    // selections, at least this rank's and at most all of them.
    EXPECT_EQ(run.stats[r].merged_values, run.stats[0].merged_values);
    EXPECT_GE(run.stats[r].merged_values, run.stats[r].sent_values);
    uint64_t all_sent = 0;
    for (int q = 0; q < 4; ++q) all_sent += run.stats[q].sent_values;
    EXPECT_LE(run.stats[r].merged_values, all_sent);
  }
  // Error feedback: even at 5% density the parameters move towards the
  // mean target (2.5 * 0.1 * ((i % 7) + 1)) and away from the start.
  double err = 0, start_err = 0;
  for (size_t i = 0; i < 4096; ++i) {
    double target = 0.25 * static_cast<double>((i % 7) + 1);
    err += std::abs(run.final_params[0][i] - target);
    start_err += target;
  }
  EXPECT_LT(err, 0.5 * start_err);
}

// The step mode's sharded exchange (Note [Sharded exchange] in
// src/collective/compressed_collective.cc): fp32 at density 1 gives the flat
// exchange's parameters bit for bit; int4 codes give them within the
// codes' rounding; both bit-identical across the ranks.
TEST_P(GradientPipelineTest, ShardedExchangeEqualsTheFlatOneWithinTheCodecsRounding) {
  PipelineOptions flat = ExactOptions(1);
  PipelineOptions sharded = flat;
  sharded.exchange.algorithm = comm::ExchangeAlgorithm::kSharded;
  for (compress::ValueEncoding values : {compress::ValueEncoding::kFp32, compress::ValueEncoding::kInt4}) {
    flat.wire.values = sharded.wire.values = values;
    QuadraticRun a = Run(4, 1000, 20, flat);
    QuadraticRun b = Run(4, 1000, 20, sharded);
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(a.statuses[r].ok()) << a.statuses[r].ToString();
      ASSERT_TRUE(b.statuses[r].ok()) << b.statuses[r].ToString();
      EXPECT_EQ(b.checksums[r], b.checksums[0]) << "rank " << r;
      EXPECT_EQ(b.final_params[r], b.final_params[0]) << "rank " << r;
    }
    if (values == compress::ValueEncoding::kFp32) {
      EXPECT_EQ(a.final_params[0], b.final_params[0]);
      continue;
    }
    // int4: a step's mean is re-coded once more by its shard's owner (with
    // a residual of its own), so the two trajectories differ by the codes'
    // rounding, a few per cent of the targets' 0.1-1.75 spread.
    double diff = 0, spread = 0;
    for (size_t i = 0; i < a.final_params[0].size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a.final_params[0][i] - b.final_params[0][i])));
      spread = std::max(spread, static_cast<double>(std::abs(a.final_params[0][i])));
    }
    EXPECT_GT(diff, 0.0);  // the owners' codes do change the values
    EXPECT_LT(diff, 0.05 * spread);
  }
}

// Hierarchical with the leaders' residual (Note [Leader residual]): the
// leaders send int4 across clusters where merging leaders send int8, and
// the replicas stay bit-identical.
TEST_P(GradientPipelineTest, LeaderResidualSendsInt4AcrossClustersAndKeepsReplicasIdentical) {
  PipelineOptions o = ExactOptions(1);
  o.wire.values = compress::ValueEncoding::kInt4;
  o.exchange.algorithm = comm::ExchangeAlgorithm::kHierarchical;
  const std::vector<std::string> clusters = {"a", "a", "b", "b"};
  QuadraticRun merge = Run(4, 1000, 20, o, clusters);
  o.leader = collective::LeaderMode::kResidual;
  QuadraticRun residual = Run(4, 1000, 20, o, clusters);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(merge.statuses[r].ok()) << merge.statuses[r].ToString();
    ASSERT_TRUE(residual.statuses[r].ok()) << residual.statuses[r].ToString();
    EXPECT_EQ(residual.checksums[r], residual.checksums[0]) << "rank " << r;
  }
  EXPECT_NE(merge.checksums[0], residual.checksums[0]);
  double diff = 0;
  for (size_t i = 0; i < merge.final_params[0].size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(merge.final_params[0][i] - residual.final_params[0][i])));
  }
  EXPECT_LT(diff, 0.1);
}

// The shards', owners' and leaders' residuals are part of the saved state:
// a run restarted from it goes on exactly as the uninterrupted run.
TEST_P(GradientPipelineTest, ShardedAndLeaderResidualsSurviveARestart) {
  // Staleness 0: the saved state is "after t-1", which the forward of t sees.
  PipelineOptions o = ExactOptions(0);
  o.density = 0.2;
  o.wire.values = compress::ValueEncoding::kInt4;
  const std::vector<std::string> clusters = {"a", "a", "b"};
  for (auto algorithm : {comm::ExchangeAlgorithm::kFlat, comm::ExchangeAlgorithm::kSharded,
                         comm::ExchangeAlgorithm::kHierarchical}) {
    o.exchange.algorithm = algorithm;
    o.leader = collective::LeaderMode::kResidual;
    QuadraticRun straight = Run(3, 300, 12, o, clusters);
    QuadraticRun restarted = Run(3, 300, 12, o, clusters, /*restart_at=*/6);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(straight.statuses[r].ok()) << straight.statuses[r].ToString();
      ASSERT_TRUE(restarted.statuses[r].ok()) << restarted.statuses[r].ToString();
      EXPECT_EQ(straight.checksums[r], restarted.checksums[r]) << "rank " << r;
    }
  }
}

TEST(WholeBucketsTest, SmallBucketsAreSentWhole) {
  using V = std::vector<bool>;
  EXPECT_EQ(WholeBuckets({4096}, 0.0, 0), V{false});  // off
  EXPECT_EQ(WholeBuckets({4096}, 0.0, 4096), V{true});
  EXPECT_EQ(WholeBuckets({4097}, 0.0, 4096), V{false});
  // Relative: the smallest first while they fit in the share (here 2% of
  // 10,000 = 200 values): 50 and 60 fit, a 100 after them would overflow
  // the budget, the big one never.
  EXPECT_EQ(WholeBuckets({9690, 100, 60, 50, 100}, 0.02, 0), (V{false, false, true, true, false}));
  EXPECT_EQ(WholeBuckets({9800, 100, 100}, 0.02, 0), (V{false, true, true}));
  // Equal buckets: none fits alone unless the share covers one of them.
  EXPECT_EQ(WholeBuckets({100, 100, 100, 100}, 0.02, 0), (V{false, false, false, false}));
  EXPECT_EQ(WholeBuckets({100, 100, 100, 100}, 0.5, 0), (V{true, true, false, false}));
  // A single bucket is never whole by share below 1.
  EXPECT_EQ(WholeBuckets({5}, 0.99, 0), V{false});
  EXPECT_EQ(WholeBuckets({}, 0.02, 0), V{});
}

TEST_P(GradientPipelineTest, SmallBucketsAreSentWhole) {
  PipelineOptions o = ExactOptions(0);
  o.sparsifier = compress::SparsifierKind::kBlock;
  o.density = 0.05;
  o.dense_bucket_max = 4096;
  o.wire = {compress::ValueEncoding::kInt4, compress::IndexEncoding::kBlockVarint};
  QuadraticRun run = Run(2, 4096, 10, o, {"a", "a"});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(run.statuses[r].ok()) << run.statuses[r].ToString();
    EXPECT_EQ(run.stats[r].sent_values, run.stats[r].total_values);
    EXPECT_EQ(run.stats[r].merged_values, run.stats[r].total_values);
    EXPECT_EQ(run.checksums[r], run.checksums[0]);
  }
}

TEST_P(GradientPipelineTest, SilentPeerBecomesAnErrorNotAHang) {
  comm::testing::World w = comm::testing::MakeWorld(GetParam(), {"local", "local"});  // rank 1 never participates
  ASSERT_EQ(w.ranks.size(), 2u);
  PipelineOptions o = ExactOptions(0);
  o.exchange.timeout = std::chrono::milliseconds(200);
  std::vector<BucketSpec> specs(1);
  specs[0].name = "w";
  specs[0].initial.assign(8, 0.0f);
  auto p = GradientPipeline::Create(o, specs, w.ranks[0].get());
  ASSERT_TRUE(p.ok());
  auto noop = [](size_t, Span<const float>) {};
  ASSERT_TRUE((*p)->BeginIteration(0, noop).ok());
  std::fill((*p)->GradBuffer(0, 0).begin(), (*p)->GradBuffer(0, 0).end(), 1.0f);
  ASSERT_TRUE((*p)->Submit(0, 0).ok());
  Status s = (*p)->Finish(noop);
  EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.ToString();
  EXPECT_NE(s.ToString().find("rank 1"), std::string::npos) << s.ToString();
}

// One rank: nothing crosses a transport, so in-process only.
TEST(GradientPipelineOneRankTest, NonFiniteGradientIsAnErrorNamingTheBucket) {
  comm::testing::World w = comm::testing::MakeWorld(Backend::kInProc, {"local"});
  ASSERT_EQ(w.ranks.size(), 1u);
  comm::Transport* t0 = w.ranks[0].get();
  std::vector<BucketSpec> specs(1);
  specs[0].name = "fc1.weight";
  specs[0].initial.assign(32, 0.0f);
  auto p = GradientPipeline::Create(ExactOptions(0), specs, t0);
  ASSERT_TRUE(p.ok());
  auto noop = [](size_t, Span<const float>) {};
  ASSERT_TRUE((*p)->BeginIteration(0, noop).ok());
  (*p)->GradBuffer(0, 0)[5] = std::nanf("");
  ASSERT_TRUE((*p)->Submit(0, 0).ok());
  Status s = (*p)->Finish(noop);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("fc1.weight"), std::string::npos) << s.ToString();
}

TEST(GradientPipelineOneRankTest, RejectsBadOptions) {
  comm::testing::World w = comm::testing::MakeWorld(Backend::kInProc, {"local"});
  ASSERT_EQ(w.ranks.size(), 1u);
  comm::Transport* t0 = w.ranks[0].get();
  std::vector<BucketSpec> specs(1);
  specs[0].initial.assign(4, 0.0f);
  PipelineOptions o = ExactOptions(0);
  o.staleness = 2;
  EXPECT_EQ(GradientPipeline::Create(o, specs, t0).status().code(), Status::Code::kInvalidArgument);
  o = ExactOptions(0);
  o.density = 0;
  EXPECT_EQ(GradientPipeline::Create(o, specs, t0).status().code(), Status::Code::kInvalidArgument);
  o = ExactOptions(0);
  o.wire.indices = compress::IndexEncoding::kBlockId;  // needs the block sparsifier
  EXPECT_EQ(GradientPipeline::Create(o, specs, t0).status().code(), Status::Code::kInvalidArgument);
  o = ExactOptions(0);
  o.cpu_threads = 0;
  EXPECT_EQ(GradientPipeline::Create(o, specs, t0).status().code(), Status::Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, GradientPipelineTest, comm::testing::AllBackends(),
                         comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::engine

namespace frugal::engine {
namespace {

TEST(WarmupDensityTest, DensityWarmUpFallsGeometricallyToTheTarget) {
  EXPECT_DOUBLE_EQ(WarmupDensity(0.03, 0, 0), 0.03);      // off
  EXPECT_DOUBLE_EQ(WarmupDensity(0.03, 0, 100), 0.25);    // starts at 25%
  EXPECT_NEAR(WarmupDensity(0.03, 50, 100), std::sqrt(0.25 * 0.03), 1e-12);  // geometric middle
  EXPECT_DOUBLE_EQ(WarmupDensity(0.03, 100, 100), 0.03);  // reached
  EXPECT_DOUBLE_EQ(WarmupDensity(0.03, 5000, 100), 0.03);
  EXPECT_DOUBLE_EQ(WarmupDensity(0.5, 0, 100), 0.5);      // a denser target is never lowered
  for (int64_t t = 1; t <= 100; ++t) EXPECT_LT(WarmupDensity(0.03, t, 100), WarmupDensity(0.03, t - 1, 100));
}

}  // namespace
}  // namespace frugal::engine
