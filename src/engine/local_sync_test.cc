// The local-update mode (--sync local, include/frugal/engine/local_sync.h) end to end:
// workers as threads, over the in-process transport and over ZeroMQ.
#include <filesystem>
#include <tuple>

#include <gtest/gtest.h>

#include "frugal/engine/checkpoint.h"
#include "frugal/engine/local_sync.h"
#include "worker_test_util.h"

namespace frugal::engine {
namespace {

RunConfig LocalOptions(const std::string& run, Backend backend = Backend::kInProc) {
  RunConfig o = BaseOptions(run, backend);
  o.train.model = "cnn";  // 1.6M parameters: quicker than mlp's 5.8M on a loaded machine
  o.train.momentum = 0.9;
  o.train.lr = 0.02;
  o.distributed.sync = SyncMode::kLocal;
  o.distributed.local_steps = 4;
  o.distributed.density = 0.05;
  // These runs have a few rounds, where auto (0) would average: the tests
  // exercise the Nesterov step unless they set otherwise.
  o.distributed.outer_lr = kDiLoCoOuterLr;
  return o;
}

// The multi-rank tests, over each backend (comm/testing/test_world.h).
class LocalSyncTest : public ::testing::TestWithParam<Backend> {
 protected:
  RunConfig Options(const std::string& run) { return LocalOptions(run, GetParam()); }
  std::vector<RankOutcome> Run(const RunConfig& options, const std::vector<std::string>& clusters) {
    return RunWorkers(GetParam(), options, clusters);
  }
};

// Sparse, fp16, outer Nesterov momentum, a last round shorter than the
// others (22 steps, H = 4), replica checks every 5 steps (mid-round: the
// anchors are compared): every replica ends bit-identical, and it learns
// (the synthetic task reaches 100% in one epoch with every step synced).
// Over the flat and the sharded exchange (Note [Sharded exchange]).
TEST_P(LocalSyncTest, ReplicasStayBitIdenticalAndLearn) {
  for (auto exchange : {comm::ExchangeAlgorithm::kFlat, comm::ExchangeAlgorithm::kSharded}) {
    RunConfig o = Options(std::string("local-identical-") + NameOf(exchange));
    o.train.model = "mlp";  // learns the synthetic task in these few steps (cnn does not)
    o.train.epochs = 2;
    o.train.max_steps = 22;
    o.distributed.exchange = exchange;
    // One exchange also in-process: the same checksums over either backend.
    auto ranks = exchange == comm::ExchangeAlgorithm::kFlat
                     ? RunWorkersMatchingInProc(GetParam(), o, {"local", "local", "local"})
                     : Run(o, {"local", "local", "local"});
    for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    for (auto& r : ranks) {
      EXPECT_EQ(r.result.final_checksum, ranks[0].result.final_checksum) << NameOf(exchange);
      EXPECT_EQ(r.params, ranks[0].params) << NameOf(exchange);
    }
    EXPECT_EQ(ranks[0].result.train.steps, 22);
    EXPECT_GT(ranks[0].result.train.final_test_accuracy, 0.9) << NameOf(exchange);
  }
}

// Two clusters: the round's exchange is the topology-aware one (only the
// leaders cross the slow link), and it happens once per round.
TEST_P(LocalSyncTest, SyncsOncePerRoundOverTheHierarchicalExchange) {
  RunConfig o = Options("local-clusters");
  o.train.max_steps = 8;
  o.distributed.checksum_every = 0;
  o.distributed.bucket_mb = 2;  // cnn: 3 buckets (fc2 + fc1.bias, fc1.weight, conv1 + conv2)
  o.distributed.local_fragments = 1;
  auto ranks = Run(o, {"a", "a", "b", "b"});
  for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // 2 rounds x 3 buckets of pseudo-gradients plus the final checksum.
  for (int r : {0, 2}) EXPECT_EQ(ranks[r].result.traffic.inter_cluster.messages_sent, 2u * 3u + 2u) << "rank " << r;
  for (int r : {1, 3}) EXPECT_EQ(ranks[r].result.traffic.inter_cluster.messages_sent, 2u) << "rank " << r;
  EXPECT_EQ(ranks[1].params, ranks[2].params);
}

// With H = 1, density 1, fp32 values, outer lr 1 and no outer momentum, a
// round is one synchronous step: the mean of the workers' SGD updates is the
// update of the mean gradient, up to rounding (delta = anchor - inner, then
// anchor - mean(delta), instead of one subtraction). Without inner momentum:
// with it the cnn amplifies rounding differences along the trajectory (see
// the exactness test in worker_test.cc); mlp with momentum 0.9 stayed within
// 1e-5 over 12 steps, but costs 3x the time here.
TEST_P(LocalSyncTest, OneStepRoundsReproduceTheSynchronousPath) {
  RunConfig o = Options("local-h1");
  o.train.max_steps = 6;
  MakeExact(&o);
  o.distributed.local_steps = 1;
  o.distributed.outer_lr = 1.0;
  o.distributed.outer_momentum = 0.0;
  o.distributed.local_overlap = false;  // the overlapped rounds land one round late
  o.distributed.exchange = comm::ExchangeAlgorithm::kFlat;  // auto would be sharded (one cluster)
  auto local = Run(o, {"local", "local"});
  for (auto& r : local) ASSERT_TRUE(r.status.ok()) << r.status.ToString();

  RunConfig step = o;
  step.train.run_name = "local-h1-step";
  step.distributed.sync = SyncMode::kStep;
  auto sync = Run(step, {"local", "local"});
  for (auto& r : sync) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(local[0].params.size(), sync[0].params.size());
  EXPECT_LT(RelativeDistance(local[0].params, sync[0].params), 1e-5);
  EXPECT_EQ(local[0].params, local[1].params);

  // At density 1 in fp32 the sharded exchange's means are the flat one's,
  // bit for bit (Note [Sharded exchange]).
  RunConfig sharded = o;
  sharded.train.run_name = "local-h1-sharded";
  sharded.distributed.exchange = comm::ExchangeAlgorithm::kSharded;
  auto shard = Run(sharded, {"local", "local"});
  for (auto& r : shard) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(shard[0].params, local[0].params);
  EXPECT_EQ(shard[1].params, local[0].params);

  // Not vacuous: four local steps per round end measurably elsewhere.
  RunConfig h4 = o;
  h4.train.run_name = "local-h4";
  h4.distributed.local_steps = 4;
  auto four = Run(h4, {"local", "local"});
  for (auto& r : four) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(RelativeDistance(four[0].params, sync[0].params), 1e-4);
}

// The overlapped rounds (--local-overlap; Note [Overlapped rounds]): each
// round's outer step lands one round late, so the run ends elsewhere than
// the blocking one, yet the anchors, and the replicas after the last round,
// stay bit-identical on every rank, over the hierarchical exchange too.
TEST_P(LocalSyncTest, OverlappedRoundsKeepReplicasIdenticalAndDifferFromBlockingOnes) {
  RunConfig o = Options("local-overlap");
  o.train.max_steps = 9;  // rounds at 2, 4, 6, 8; Finish: the round in flight, then step 8 alone
  o.distributed.local_steps = 2;
  o.distributed.checksum_every = 3;  // the anchors compared while a round is in flight
  o.distributed.local_overlap = true;
  o.distributed.local_fragments = 1;  // the whole model, a whole round late
  auto overlapped = Run(o, {"a", "a", "b"});
  for (auto& r : overlapped) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  for (auto& r : overlapped) EXPECT_EQ(r.params, overlapped[0].params);

  RunConfig blocking = o;
  blocking.train.run_name = "local-overlap-blocking";
  blocking.distributed.local_overlap = false;
  auto blocked = Run(blocking, {"a", "a", "b"});
  for (auto& r : blocked) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GT(RelativeDistance(overlapped[0].params, blocked[0].params), 1e-6);
  // Same rounds on the wire: 4 + the last one, each bucket once, plus the
  // checksums; rank 2 is cluster b's leader.
  EXPECT_EQ(overlapped[2].result.traffic.inter_cluster.messages_sent,
            blocked[2].result.traffic.inter_cluster.messages_sent);
}

// Streaming DiLoCo's fragments (--local-fragments; Note [Fragments]): with
// P = 2 and H = 4 one half of every bucket syncs every 2 steps, so 8 steps
// make fragment syncs at 2 (f0), 4 (f1), 6 (f0), then Finish syncs f1 (last
// at 4) and f0 (last at 6): 5 syncs of 3 bucket slices each cross the slow
// link, against 2 rounds of 3 buckets without fragments. Blocking and
// overlapped, every replica ends bit-identical, elsewhere than without
// fragments.
TEST_P(LocalSyncTest, FragmentsSyncInTurnAndKeepReplicasIdentical) {
  RunConfig o = Options("local-fragments");
  o.train.max_steps = 8;
  o.distributed.checksum_every = 3;  // the anchors compared while fragments are in flight
  o.distributed.bucket_mb = 2;       // cnn: 3 buckets
  o.distributed.local_fragments = 1;
  o.distributed.local_overlap = false;
  auto whole = Run(o, {"a", "a", "b"});
  for (auto& r : whole) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const uint64_t checksums = whole[2].result.traffic.inter_cluster.messages_sent - 2u * 3u;
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlapped" : "blocking");
    RunConfig f = o;
    f.train.run_name = overlap ? "local-fragments-overlap" : "local-fragments-blocking";
    f.distributed.local_fragments = 2;
    f.distributed.local_overlap = overlap;
    auto ranks = Run(f, {"a", "a", "b"});
    for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    for (auto& r : ranks) EXPECT_EQ(r.params, ranks[0].params);
    EXPECT_EQ(ranks[2].result.traffic.inter_cluster.messages_sent, 5u * 3u + checksums);
    EXPECT_GT(RelativeDistance(ranks[0].params, whole[0].params), 1e-6);
  }
}

// Runs `c` as run `name` on two ranks; both end bit-identical: returns rank
// 0's parameters.
std::vector<float> TwoReplicas(Backend backend, RunConfig c, const std::string& name) {
  c.train.run_name = name;
  auto ranks = RunWorkers(backend, c, {"local", "local"});
  for (auto& r : ranks) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(ranks[0].params, ranks[1].params);
  return ranks[0].params;
}

// --outer-anneal (Note [Outer annealing]): the outer lr follows the inner
// schedule's decay, floored at 1 - momentum. A constant schedule, or an
// outer lr already at the floor, leaves the run bit-identical; a decaying
// schedule moves it, and the replicas stay bit-identical.
TEST_P(LocalSyncTest, OuterAnnealingFollowsTheDecayOfTheInnerSchedule) {
  RunConfig o = Options("local-anneal");
  o.train.max_steps = 8;
  o.train.warmup_steps = 0;
  o.train.lr_schedule = train::LrScheduleKind::kCosine;
  o.distributed.local_steps = 2;
  o.distributed.local_fragments = 1;
  auto run = [this](RunConfig c, const std::string& name, bool anneal) {
    c.distributed.outer_anneal = anneal;
    return TwoReplicas(GetParam(), c, name);
  };
  EXPECT_GT(RelativeDistance(run(o, "anneal-cos-off", false), run(o, "anneal-cos-on", true)), 1e-6);

  RunConfig constant = o;
  constant.train.lr_schedule = train::LrScheduleKind::kConstant;
  EXPECT_EQ(run(constant, "anneal-const-off", false), run(constant, "anneal-const-on", true));

  RunConfig floored = o;  // outer lr 0.5 = 1 - momentum 0.5: the gain is 1 from the start
  floored.distributed.outer_lr = 0.5;
  floored.distributed.outer_momentum = 0.5;
  EXPECT_EQ(run(floored, "anneal-floor-off", false), run(floored, "anneal-floor-on", true));
}

// The parameters after a two-replica run of c with this outer lr and momentum.
std::vector<float> WithOuter(Backend backend, RunConfig c, const std::string& name, double lr, double momentum) {
  c.distributed.outer_lr = lr;
  c.distributed.outer_momentum = momentum;
  return TwoReplicas(backend, c, name);
}

// Note [The last round]: Finish's round is a plain average of the replicas,
// whatever the outer optimizer: a run of exactly one round ends where outer
// lr 1 without momentum ends, bit for bit; with a round before it, the outer
// step of that round makes them differ.
TEST_P(LocalSyncTest, TheLastRoundIsAPlainAverage) {
  RunConfig o = Options("local-last");
  o.distributed.local_steps = 4;
  o.distributed.local_fragments = 1;
  o.train.max_steps = 4;
  EXPECT_EQ(WithOuter(GetParam(), o, "last-one-nesterov", 0.7, 0.9),
            WithOuter(GetParam(), o, "last-one-average", 1.0, 0.0));
  o.train.max_steps = 6;
  EXPECT_GT(RelativeDistance(WithOuter(GetParam(), o, "last-two-nesterov", 0.7, 0.9),
                             WithOuter(GetParam(), o, "last-two-average", 1.0, 0.0)),
            1e-6);
}

// Note [A lone worker]: in a world of one worker the rounds are plain
// averages, whatever the outer optimizer, bit for bit; with two workers the
// outer step still makes a difference.
TEST_P(LocalSyncTest, ALoneWorkerTakesNoOuterStep) {
  RunConfig o = Options("local-alone");
  o.distributed.local_steps = 2;
  o.distributed.local_fragments = 1;
  o.train.max_steps = 8;
  auto alone = [&](const std::string& name, double lr, double momentum) {
    RunConfig c = o;
    c.train.run_name = name;
    c.distributed.outer_lr = lr;
    c.distributed.outer_momentum = momentum;
    auto ranks = Run(c, {"local"});
    EXPECT_TRUE(ranks[0].status.ok()) << ranks[0].status.ToString();
    return ranks[0].params;
  };
  const auto average = alone("alone-average", 1.0, 0.0);
  ASSERT_FALSE(average.empty());
  EXPECT_EQ(alone("alone-nesterov", kDiLoCoOuterLr, 0.9), average);
  EXPECT_GT(RelativeDistance(WithOuter(GetParam(), o, "pair-nesterov", kDiLoCoOuterLr, 0.9),
                             WithOuter(GetParam(), o, "pair-average", 1.0, 0.0)),
            1e-6);
}

// --outer-lr 0 (OuterOf): a run of 4 rounds, fewer than the 20 that momentum
// 0.9 needs, takes plain averaging, bit for bit.
TEST_P(LocalSyncTest, AutoOuterStepAveragesAShortRun) {
  RunConfig o = Options("local-auto-outer");
  o.train.max_steps = 8;
  o.distributed.local_steps = 2;
  o.distributed.local_fragments = 1;
  const auto average = WithOuter(GetParam(), o, "auto-outer-average", 1.0, 0.0);
  EXPECT_EQ(WithOuter(GetParam(), o, "auto-outer-auto", 0.0, 0.9), average);
  EXPECT_GT(RelativeDistance(WithOuter(GetParam(), o, "auto-outer-nesterov", kDiLoCoOuterLr, 0.9), average), 1e-6);
}

// --deflate auto switches per rank and round; the values, hence the run,
// are those of --deflate on, bit for bit.
TEST_P(LocalSyncTest, AutoDeflateLeavesTheRunBitIdentical) {
  RunConfig o = Options("local-deflate");
  o.train.max_steps = 12;
  o.distributed.density = 1;
  o.distributed.local_fragments = 2;
  o.distributed.deflate = DeflateMode::kOn;
  const auto on = TwoReplicas(GetParam(), o, "deflate-on");
  o.distributed.deflate = DeflateMode::kAuto;
  EXPECT_EQ(TwoReplicas(GetParam(), o, "deflate-auto"), on);
  o.distributed.deflate = DeflateMode::kOff;
  EXPECT_EQ(TwoReplicas(GetParam(), o, "deflate-off"), on);
}

RunConfig LocalCheckpointOptions(const std::string& run, Backend backend) {
  RunConfig o = LocalOptions(run, backend);
  o.train.max_steps = 8;
  o.checkpoint.checkpoint_every = 6;  // in the middle of the second round (H = 4)
  o.checkpoint.checkpoint_dir = (std::filesystem::path(o.train.runs_dir) / run / "checkpoints").string();
  std::filesystem::remove_all(o.checkpoint.checkpoint_dir);
  return o;
}

// The outer momentum, the anchors, each rank's inner parameters, optimizer
// state and residuals, and the round counters are run state: a run resumed
// from the checkpoint of step 6 (mid-round, the round of step 4 in flight:
// its merged pseudo-gradient is saved as pending) ends bit-identical to the
// run that wrote it, with overlapped rounds and with blocking ones, and with
// two overlapped fragments (synced at 2, 4, 6: at step 6 fragment 1's outer
// step has landed, and fragment 0's round of step 6 starts after the save,
// Note [State at rest]). At a sync point of one overlapped fragment (step 4,
// the checkpoint saved before its round starts) the resumed run starts that
// round again and ends bit-identical too.
TEST_P(LocalSyncTest, ResumeFromAMidRoundCheckpointIsBitExact) {
  for (int mode : {0, 1, 2, 3}) {
    const bool overlap = mode != 1;
    SCOPED_TRACE(mode == 0   ? "overlapped rounds"
                 : mode == 1 ? "blocking rounds"
                 : mode == 2 ? "overlapped fragments"
                             : "at a sync point");
    const std::string run = mode == 0   ? "local-ckpt"
                            : mode == 1 ? "local-ckpt-blocking"
                            : mode == 2 ? "local-ckpt-fragments"
                                        : "local-ckpt-sync-point";
    RunConfig o = LocalCheckpointOptions(run, GetParam());
    o.distributed.local_overlap = overlap;
    o.distributed.local_fragments = mode == 2 ? 2 : 1;
    const int64_t at = mode == 3 ? 4 : 6;
    o.checkpoint.checkpoint_every = at;
    auto full = Run(o, {"local", "local"});
    for (auto& r : full) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    const std::string saved = CheckpointStepDir(o.checkpoint.checkpoint_dir, at);
    auto rank0 = ReadCheckpointFile(CheckpointRankFile(saved, 0));
    auto rank1 = ReadCheckpointFile(CheckpointRankFile(saved, 1));
    ASSERT_TRUE(rank0.ok() && rank1.ok());
    EXPECT_EQ(rank0->count("local_sync"), 1u);
    EXPECT_EQ(rank0->count("local_sync_own"), 1u);
    EXPECT_EQ(rank1->count("local_sync"), 0u);
    EXPECT_EQ(rank1->count("local_sync_own"), 1u);

    RunConfig resumed = o;
    resumed.train.run_name = run + "-resumed";
    resumed.checkpoint.resume_from = saved;
    auto again = Run(resumed, {"local", "local"});
    for (auto& r : again) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(again[0].result.train.steps, 8);
    EXPECT_EQ(again[0].result.final_checksum, full[0].result.final_checksum);
    EXPECT_EQ(again[0].params, full[0].params);
    EXPECT_EQ(again[1].params, full[1].params);
    if (mode == 2) {
      RunConfig other = resumed;
      other.train.run_name = run + "-other";
      other.distributed.local_fragments = 1;
      auto wrong = Run(other, {"local", "local"});
      EXPECT_EQ(wrong[0].status.code(), Status::Code::kCorruption) << wrong[0].status.ToString();
      EXPECT_NE(wrong[0].status.message().find("resume with --local-fragments 2"), std::string::npos)
          << wrong[0].status.ToString();
    }
    if (mode != 0) continue;

    // A third rank, absent from the checkpoint, joins the round at the
    // anchor (the pending outer step reaches its anchor too).
    resumed.train.run_name = run + "-3";
    auto three = Run(resumed, {"local", "local", "local"});
    for (auto& r : three) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(three[2].params, three[0].params);
  }
}

// Note [Inner steps on the device]: --local-inner device steps the model's
// own tensors with torch operations. On the CPU device it ends where the
// host optimizer ends, up to float rounding, for SGD with Nesterov momentum
// and weight decay and for AdamW (dense fp32 rounds, so that no rounding
// difference changes a selection), and its replicas stay bit-identical.
TEST_P(LocalSyncTest, InnerStepsOnTheDeviceMatchTheHost) {
  for (auto kind : {train::OptimizerKind::kSgd, train::OptimizerKind::kAdamW}) {
    SCOPED_TRACE(NameOf(kind));
    RunConfig o = Options(std::string("local-inner-") + NameOf(kind));
    o.train.max_steps = 10;
    o.train.optimizer = kind;
    o.train.weight_decay = 0.01;
    o.train.nesterov = kind == train::OptimizerKind::kSgd;
    if (kind == train::OptimizerKind::kAdamW) o.train.lr = 0.002;
    o.distributed.density = 1;
    o.distributed.value_encoding = compress::ValueEncoding::kFp32;
    o.distributed.local_fragments = 2;
    o.distributed.local_inner = LocalInner::kHost;
    const auto host = TwoReplicas(GetParam(), o, o.train.run_name + "-host");
    o.distributed.local_inner = LocalInner::kDevice;
    const auto device = TwoReplicas(GetParam(), o, o.train.run_name + "-device");
    EXPECT_LT(RelativeDistance(device, host), 1e-5);
    o.train.lr *= 1.1;  // not vacuous: a slightly different run ends measurably elsewhere
    EXPECT_GT(RelativeDistance(TwoReplicas(GetParam(), o, o.train.run_name + "-lr"), host), 1e-4);
  }
}

// The inner state moves between the device and a checkpoint
// (Note [Inner steps on the device]): a run on the device resumed from its
// mid-round checkpoint on the device ends bit-identical to the run that wrote it, and
// resumed on the host within float rounding of it (Adam's moments and step
// count, SGD's momentum buffer).
TEST_P(LocalSyncTest, DeviceInnerStateSurvivesACheckpoint) {
  for (auto kind : {train::OptimizerKind::kSgd, train::OptimizerKind::kAdam}) {
    SCOPED_TRACE(NameOf(kind));
    RunConfig o = LocalCheckpointOptions(std::string("local-ckpt-device-") + NameOf(kind), GetParam());
    o.train.optimizer = kind;
    if (kind == train::OptimizerKind::kAdam) o.train.lr = 0.002;
    o.distributed.density = 1;
    o.distributed.value_encoding = compress::ValueEncoding::kFp32;
    o.distributed.local_inner = LocalInner::kDevice;
    auto full = Run(o, {"local", "local"});
    for (auto& r : full) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    RunConfig resumed = ResumedAt(o, 6, o.train.run_name + "-resumed");
    EXPECT_EQ(TwoReplicas(GetParam(), resumed, resumed.train.run_name), full[0].params);
    resumed.train.run_name += "-host";
    resumed.distributed.local_inner = LocalInner::kHost;
    EXPECT_LT(RelativeDistance(TwoReplicas(GetParam(), resumed, resumed.train.run_name), full[0].params), 1e-5);
  }
}

// Note [Outer step on resume]: a checkpoint written with the Nesterov
// outer step, resumed with --outer-lr auto in a run so short that auto
// would average (2 rounds), takes the checkpoint's step and ends
// bit-identical to the run that wrote it; a set outer step of the other
// form is refused with the flags that resume it.
TEST_P(LocalSyncTest, AResumedRunTakesTheCheckpointsOuterStep) {
  RunConfig o = LocalCheckpointOptions("local-ckpt-outer", GetParam());
  auto full = Run(o, {"local", "local"});
  for (auto& r : full) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  RunConfig resumed = ResumedAt(o, 6, "local-ckpt-outer-auto");
  resumed.distributed.outer_lr = 0;  // auto: averaging for 8 steps of H = 4
  ASSERT_EQ(OuterOf(resumed.distributed, 8).momentum, 0.0);
  auto again = Run(resumed, {"local", "local"});
  for (auto& r : again) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(again[0].params, full[0].params);
  EXPECT_EQ(again[1].params, full[1].params);

  resumed.train.run_name = "local-ckpt-outer-set";
  resumed.distributed.outer_lr = 1;
  resumed.distributed.outer_momentum = 0;
  auto wrong = Run(resumed, {"local", "local"});
  EXPECT_EQ(wrong[0].status.code(), Status::Code::kInvalidArgument) << wrong[0].status.ToString();
  EXPECT_NE(wrong[0].status.message().find("resume with --outer-lr 0.7 --outer-momentum 0.9"), std::string::npos)
      << wrong[0].status.ToString();
}

TEST_P(LocalSyncTest, AStepModeCheckpointIsNotALocalOne) {
  RunConfig o = LocalCheckpointOptions("local-ckpt-mixed", GetParam());
  o.distributed.sync = SyncMode::kStep;
  o.train.max_steps = 7;
  auto full = Run(o, {"local", "local"});
  for (auto& r : full) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  RunConfig resumed = LocalCheckpointOptions("local-ckpt-mixed-resumed", GetParam());
  resumed.checkpoint.resume_from = CheckpointStepDir(o.checkpoint.checkpoint_dir, 6);
  auto again = Run(resumed, {"local", "local"});
  EXPECT_EQ(again[0].status.code(), Status::Code::kCorruption) << again[0].status.ToString();
  EXPECT_NE(again[0].status.message().find("local_sync"), std::string::npos) << again[0].status.ToString();
}

// Note [Inner steps by the caller]: two ranks as threads drive LocalSync
// directly on two tensors with fixed per-rank gradients. With
// InnerSteps::kCaller the caller's own SGD step (p -= lr g) and LocalSync's
// rounds give the run that InnerSteps::kOwn gives with the same SGD, up to
// float rounding; the replicas end bit-identical, and LocalSync leaves the
// caller's gradients alone.
struct CallerRun {
  std::vector<std::vector<float>> params;  // per rank, flattened at the end
  std::vector<Status> status;
  bool grads_kept = true;
};

CallerRun RunCallerSteps(Backend backend, InnerSteps mode, int steps, int nan_at = -1) {
  RunConfig c = BaseOptions("local-caller", backend);
  c.train.optimizer = train::OptimizerKind::kSgd;  // plain SGD, the caller's step below
  c.train.lr = 0.1;
  c.train.momentum = 0;
  c.train.weight_decay = 0;
  c.distributed.sync = SyncMode::kLocal;
  c.distributed.workers = 2;
  c.distributed.local_steps = 2;
  c.distributed.local_fragments = 1;
  c.distributed.local_overlap = false;
  c.distributed.density = 1;
  c.distributed.value_encoding = compress::ValueEncoding::kFp32;
  c.distributed.outer_lr = kDiLoCoOuterLr;
  const BucketLayout layout = BucketLayout::Pack({{"w", 12}, {"b", 3}}, 1 << 20);
  comm::testing::World w = comm::testing::MakeWorld(backend, {"local", "local"});
  CallerRun out;
  out.params.resize(2);
  out.status.assign(2, Status::Internal("not run"));
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    std::vector<torch::Tensor> params = {torch::full({4, 3}, 0.5f + r), torch::full({3}, -0.25f * (r + 1))};
    auto sync = LocalSync::Create(c, [](int64_t) { return 0.1; }, layout, params, transport.get(), true, mode);
    ASSERT_TRUE(sync.ok()) << sync.status().ToString();
    Status s;
    for (int t = 0; t < steps && s.ok(); ++t) {
      s = (*sync)->BeginIteration(t, /*check_replicas=*/t % 3 == 0);
      if (!s.ok()) break;
      for (auto& p : params) {
        p.mutable_grad() = torch::arange(p.numel(), torch::kFloat32).reshape(p.sizes()) * 0.01f * (r + 1) + 0.1f * t;
      }
      if (mode == InnerSteps::kCaller) {
        torch::NoGradGuard no_grad;
        for (auto& p : params) p.sub_(p.grad() * 0.1f);
        if (t == nan_at) params[1].index_put_({0}, NAN);
      }
      s = (*sync)->EndBackward(t);
      if (mode == InnerSteps::kCaller && !params[0].grad().defined()) out.grads_kept = false;
    }
    if (s.ok()) s = (*sync)->Finish(steps);
    out.status[r] = s;
    for (auto& p : params) {
      torch::Tensor f = p.detach().flatten().contiguous();
      out.params[r].insert(out.params[r].end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    }
  });
  return out;
}

TEST_P(LocalSyncTest, InnerStepsByTheCallerMatchItsOwn) {
  const CallerRun own = RunCallerSteps(GetParam(), InnerSteps::kOwn, 7);
  const CallerRun caller = RunCallerSteps(GetParam(), InnerSteps::kCaller, 7);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(own.status[r].ok()) << own.status[r].ToString();
    ASSERT_TRUE(caller.status[r].ok()) << caller.status[r].ToString();
  }
  EXPECT_EQ(caller.params[0], caller.params[1]);
  EXPECT_LT(RelativeDistance(caller.params[0], own.params[0]), 1e-6);
  std::vector<float> initial(12, 0.5f);  // rank 0's, broadcast
  initial.insert(initial.end(), 3, -0.25f);
  EXPECT_GT(RelativeDistance(caller.params[0], initial), 1e-2);  // it moved
  EXPECT_TRUE(caller.grads_kept);
}

TEST_P(LocalSyncTest, ANonFiniteParameterOfTheCallerFailsTheRound) {
  const CallerRun run = RunCallerSteps(GetParam(), InnerSteps::kCaller, 4, /*nan_at=*/0);
  bool named = false;
  for (const Status& s : run.status) {
    named = named || s.message().find("after the optimizer's steps") != std::string::npos;
  }
  EXPECT_TRUE(named) << run.status[0].ToString() << " / " << run.status[1].ToString();
}

TEST(LocalSyncOptionsTest, BadOptionsAreClearErrors) {
  auto message = [](const std::function<void(RunConfig&)>& change) {
    RunConfig c = LocalOptions("bad");
    change(c);
    return Validate(c).message();
  };
  EXPECT_EQ(message([](RunConfig& c) { c.elastic.elastic = true; }), "");  // Note [Local mode across worlds]
  EXPECT_NE(message([](RunConfig& c) { c.distributed.adapt = AdaptMode::kOn; }).find("--adapt off"),
            std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.staleness = 1; }).find("--staleness"), std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.workers = 1; }).find("--sync local needs --workers 2"),
            std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.local_steps = 0; }).find("--local-steps"), std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.outer_lr = -1; }).find("--outer-lr"), std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.outer_momentum = 1.0; }).find("--outer-momentum"),
            std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.local_fragments = 3; }).find("must divide --local-steps 4"),
            std::string::npos);
  EXPECT_NE(message([](RunConfig& c) {
              c.distributed.local_overlap = false;
              c.distributed.local_delay = 2;
            }).find("add --local-overlap"),
            std::string::npos);
  EXPECT_NE(message([](RunConfig& c) {
              c.distributed.local_overlap = true;
              c.distributed.local_delay = 5;
            }).find("exceeds --local-steps 4"),
            std::string::npos);
  EXPECT_NE(message([](RunConfig& c) { c.distributed.local_fragments = -1; }).find("--local-fragments"),
            std::string::npos);
  // 0 picks the largest divisor of --local-steps up to 4.
  DistributedOptions d;
  for (auto [steps, want] : std::vector<std::pair<int64_t, int64_t>>{{32, 4}, {6, 3}, {2, 2}, {7, 1}, {1, 1}}) {
    d.local_steps = steps;
    EXPECT_EQ(LocalFragmentsOf(d), want) << "--local-steps " << steps;
  }
  d.local_fragments = 8;
  EXPECT_EQ(LocalFragmentsOf(d), 8);
  // Note [Elastic gates]: auto gates on sync points, at most 10 steps apart.
  RunConfig g;
  g.distributed.sync = SyncMode::kLocal;
  for (auto [steps, fragments, want] : {std::tuple<int64_t, int64_t, int64_t>{16, 4, 8}, {16, 1, 16}, {4, 2, 10},
                                        {30, 3, 10}, {12, 4, 9}, {7, 7, 10}}) {
    g.distributed.local_steps = steps;
    g.distributed.local_fragments = fragments;
    EXPECT_EQ(ElasticEveryOf(g), want) << steps << " steps in " << fragments << " fragments";
    EXPECT_EQ(ResolvePlan(g, HostFacts{}).elastic.elastic_every, want);
  }
  g.distributed.sync = SyncMode::kStep;
  EXPECT_EQ(ElasticEveryOf(g), kElasticEvery);
  g.elastic.elastic_every = 7;
  EXPECT_EQ(ElasticEveryOf(g), 7);
  EXPECT_EQ(ResolvePlan(g, HostFacts{}).elastic.elastic_every, 7);
  // The delay: local_steps / fragments by default, 0 when blocking.
  d.local_steps = 32;
  EXPECT_EQ(LocalDelayOf(d), 4);
  d.local_delay = 6;
  EXPECT_EQ(LocalDelayOf(d), 6);
  d.local_overlap = false;
  EXPECT_EQ(LocalDelayOf(d), 0);
  EXPECT_TRUE(Validate(LocalOptions("good")).ok());
  RunConfig c;
  Status s = SetOption(&c, "sync", "sometimes");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("local"), std::string::npos) << s.ToString();
  ASSERT_TRUE(SetOption(&c, "local-steps", "500").ok());
  EXPECT_EQ(c.distributed.local_steps, 500);
}

INSTANTIATE_TEST_SUITE_P(Backends, LocalSyncTest, comm::testing::AllBackends(), comm::testing::BackendParamName());

}  // namespace
}  // namespace frugal::engine
