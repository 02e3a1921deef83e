// --sync site (Note [Site replicas] in sync_strategy.cc): a cluster trains
// as one replica. The strategy over four ranks as threads in two clusters,
// then whole workers; over the in-process transport and over ZeroMQ.
#include <filesystem>
#include <functional>

#include <gtest/gtest.h>

#include "frugal/engine/checkpoint.h"
#include "frugal/engine/cluster_average.h"
#include "frugal/engine/sync_strategy.h"
#include "worker_test_util.h"

namespace frugal::engine {
namespace {

RunConfig SitePlan(SyncMode sync) {
  RunConfig c;
  c.distributed.sync = sync;
  c.distributed.density = 0.5;
  c.distributed.local_steps = 4;
  c.distributed.local_fragments = 1;
  c.distributed.checksum_every = 0;
  c.distributed.timeout_s = 30;
  return c;
}

std::vector<float> Flat(torch::nn::Linear& model) {
  std::vector<float> out;
  for (const auto& p : model->parameters()) {
    torch::Tensor c = p.detach().contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

// Each rank's parameters after every step of `steps`, ranks on threads in
// clusters a, a, b, b, each with data of its own.
std::vector<std::vector<std::vector<float>>> TrainFourRanks(
    Backend backend, SyncMode sync, int64_t steps, compress::ValueEncoding values = compress::ValueEncoding::kBf16) {
  const std::vector<std::string> clusters = {"a", "a", "b", "b"};
  comm::testing::World w = comm::testing::MakeWorld(backend, clusters);
  std::vector<std::vector<std::vector<float>>> seen(clusters.size());
  // Built here, not on the ranks' threads: torch initialises a module from
  // its process-wide generator, so seeding and building on four threads at
  // once would give each rank whatever seed another thread left there.
  std::vector<torch::nn::Linear> models;
  for (size_t rank = 0; rank < clusters.size(); ++rank) {
    torch::manual_seed(static_cast<uint64_t>(rank) + 1);
    models.emplace_back(8, 3);
  }
  comm::testing::RunRanks(w, [&](int rank, std::unique_ptr<comm::Transport>& transport) {
    torch::nn::Linear& model = models[static_cast<size_t>(rank)];
    SyncInputs in;
    in.config = SitePlan(sync);
    in.config.distributed.site_values = values;
    in.lr_at = [](int64_t) { return 0.1; };
    in.outer = OuterStep{0.7, 0.9};
    for (const auto& p : model->named_parameters()) in.params.emplace_back(p.key(), p.value());
    in.transport = transport.get();
    auto created = CreateSyncStrategy(std::move(in));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    SyncStrategy& s = **created;
    const torch::Tensor x = torch::arange(16, torch::kFloat32).view({2, 8}) * (rank + 1) / 16;
    for (int64_t t = 0; t < steps; ++t) {
      ASSERT_TRUE(s.BeginIteration(t, /*check_replicas=*/false).ok());
      model->forward(x).pow(2).sum().backward();
      Status st = s.EndBackward(t);
      ASSERT_TRUE(st.ok()) << st.ToString();
      seen[rank].push_back(Flat(model));
    }
    ASSERT_TRUE(s.Finish(steps).ok());
    seen[rank].push_back(Flat(model));
  });
  return seen;
}

// The multi-rank tests, over each backend (comm/testing/test_world.h).
class SiteSyncTest : public ::testing::TestWithParam<Backend> {};

// The members of a cluster hold the same parameters after every step; the
// two clusters differ inside a round and agree once the run ends. The
// per-worker local mode, on the same data, lets two members differ: the
// comparison can fail.
TEST_P(SiteSyncTest, AClustersMembersStayBitIdenticalEveryStep) {
  const int64_t steps = 6;  // a round at 4, and the last one at 6
  std::vector<std::vector<float>> after_first;
  for (auto values : {compress::ValueEncoding::kBf16, compress::ValueEncoding::kFp32}) {
    SCOPED_TRACE(NameOf(values));
    auto site = TrainFourRanks(GetParam(), SyncMode::kSite, steps, values);
    if (GetParam() != Backend::kInProc) {
      EXPECT_EQ(site, TrainFourRanks(Backend::kInProc, SyncMode::kSite, steps, values)) << "the in-process run's";
    }
    for (const auto& r : site) ASSERT_EQ(r.size(), static_cast<size_t>(steps + 1));
    for (int64_t t = 0; t <= steps; ++t) {
      EXPECT_EQ(site[0][t], site[1][t]) << "cluster a after step " << t;
      EXPECT_EQ(site[2][t], site[3][t]) << "cluster b after step " << t;
    }
    EXPECT_NE(site[0][1], site[2][1]);  // two replicas inside the first round
    EXPECT_EQ(site[0][steps], site[2][steps]);
    after_first.push_back(site[0][0]);
  }
  EXPECT_NE(after_first[0], after_first[1]);  // bf16 rounds the gradients sent
  auto local = TrainFourRanks(GetParam(), SyncMode::kLocal, 2);
  EXPECT_NE(local[0][0], local[1][0]);
}

// A member that builds another model is named instead of read out of bounds.
TEST_P(SiteSyncTest, AMemberWithAnotherModelIsAClearError) {
  comm::testing::World w = comm::testing::MakeWorld(GetParam(), {"a", "a"});
  std::vector<Status> got(2, Status::Internal("not run"));
  comm::testing::RunRanks(w, [&](int rank, std::unique_ptr<comm::Transport>& transport) {
    torch::nn::Linear model(8, rank == 0 ? 3 : 4);
    model->forward(torch::ones({1, 8})).sum().backward();
    std::vector<torch::Tensor> params = model->parameters();
    ClusterAverage average(transport.get(), params, std::chrono::milliseconds(5000));
    EXPECT_EQ(average.members(), 2);
    got[rank] = average.Average(0);
  });
  for (const Status& st : got) {
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find("do all workers build the same model"), std::string::npos) << st.ToString();
  }
}

RunConfig SiteWorkerOptions(const std::string& run, Backend backend = Backend::kInProc) {
  RunConfig o = BaseOptions(run, backend);
  o.train.model = "mlp";
  o.train.momentum = 0.9;
  o.train.lr = 0.02;
  o.distributed.sync = SyncMode::kSite;
  o.distributed.local_steps = 4;
  o.distributed.density = 0.05;
  o.distributed.outer_lr = kDiLoCoOuterLr;
  return o;
}

// Whole workers in two clusters of two: every replica ends bit-identical, it
// learns, and only the leaders send rounds over the inter-cluster link (the
// members' round messages go to their leader), as in the per-worker mode.
TEST_P(SiteSyncTest, WorkersLearnAndOnlyLeadersCrossClusters) {
  RunConfig o = SiteWorkerOptions("site-workers", GetParam());
  o.train.epochs = 2;
  o.train.max_steps = 22;
  o.distributed.checksum_every = 0;
  auto ranks = RunWorkersMatchingInProc(GetParam(), o, {"a", "a", "b", "b"});
  for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  for (auto& r : ranks) EXPECT_EQ(r.params, ranks[0].params);
  EXPECT_GT(ranks[0].result.train.final_test_accuracy, 0.9);
  // The members cross only with the control all-gathers' few bytes.
  for (int r : {1, 3}) EXPECT_LT(ranks[r].result.traffic.inter_cluster.bytes_sent, 1024u) << "rank " << r;
  for (int r : {0, 2}) EXPECT_GT(ranks[r].result.traffic.inter_cluster.bytes_sent, 100000u) << "rank " << r;
}

// A run resumed from a checkpoint in the middle of a round ends bit-identical
// to the run that wrote it; resumed into a world of another size, a
// cluster's members all start the round at the anchor and stay equal.
TEST_P(SiteSyncTest, ResumeFromAMidRoundCheckpointIsBitExact) {
  RunConfig o = SiteWorkerOptions("site-ckpt", GetParam());
  o.train.model = "cnn";  // quicker than mlp on a loaded machine
  o.train.max_steps = 8;
  o.checkpoint.checkpoint_every = 6;  // in the middle of the second round
  o.checkpoint.checkpoint_dir = (std::filesystem::path(o.train.runs_dir) / "site-ckpt" / "checkpoints").string();
  std::filesystem::remove_all(o.checkpoint.checkpoint_dir);
  const std::vector<std::string> clusters = {"a", "a", "b", "b"};
  auto full = RunWorkers(GetParam(), o, clusters);
  for (auto& r : full) ASSERT_TRUE(r.status.ok()) << r.status.ToString();

  RunConfig resumed = ResumedAt(o, 6, "site-ckpt-resumed");
  auto again = RunWorkers(GetParam(), resumed, clusters);
  for (auto& r : again) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(again[0].result.train.steps, 8);
  EXPECT_EQ(again[0].result.final_checksum, full[0].result.final_checksum);
  for (size_t r = 0; r < clusters.size(); ++r) EXPECT_EQ(again[r].params, full[r].params) << "rank " << r;

  resumed.train.run_name = "site-ckpt-5";
  auto five = RunWorkers(GetParam(), resumed, {"a", "a", "a", "b", "b"});
  for (auto& r : five) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  for (auto& r : five) EXPECT_EQ(r.params, five[0].params);
}

// A cluster of one is a worker of the local mode: the same run, bit for bit.
TEST_P(SiteSyncTest, ClustersOfOneAreTheLocalMode) {
  RunConfig o = SiteWorkerOptions("site-singletons", GetParam());
  o.train.model = "cnn";
  o.train.max_steps = 6;
  auto site = RunWorkers(GetParam(), o, {"a", "b"});
  o.distributed.sync = SyncMode::kLocal;
  o.train.run_name = "site-singletons-local";
  auto local = RunWorkers(GetParam(), o, {"a", "b"});
  for (auto* run : {&site, &local}) {
    for (auto& r : *run) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  }
  EXPECT_EQ(site[0].params, local[0].params);
}

TEST(SiteSyncOptionsTest, BadOptionsAreClearErrors) {
  RunConfig o = SiteWorkerOptions("site-values");
  o.distributed.site_values = compress::ValueEncoding::kInt4;
  Status st = Validate(o);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--site-values must be bf16 or fp32, got int4"), std::string::npos) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, SiteSyncTest, comm::testing::AllBackends(), comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::engine
