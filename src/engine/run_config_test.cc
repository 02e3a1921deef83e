#include "frugal/engine/run_config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>
#include <type_traits>

#include <gtest/gtest.h>

namespace frugal::engine {
namespace {

// Changes one value to a different one of the same type; doubles by one ulp,
// so the digest must be exact.
template <class T>
void Perturb(T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    v = !v;
  } else if constexpr (std::is_same_v<T, std::string>) {
    v += "x";
  } else if constexpr (std::is_enum_v<T>) {
    const auto& table = EnumNames<T>::kTable;
    const size_t n = std::size(table);
    for (size_t i = 0; i < n; ++i) {
      if (table[i].first == v) {
        v = table[(i + 1) % n].first;
        return;
      }
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    v = std::nextafter(v, INFINITY);
  } else {
    v = v + 1;
  }
}

// Calls f(field, perturbed copy) for every field of the list.
template <class F>
void ForEachPerturbation(F&& f) {
  RunConfig probe;
  size_t count = 0;
  VisitFields(probe, [&](const Field&, const auto&) { ++count; });
  for (size_t k = 0; k < count; ++k) {
    RunConfig c;
    size_t i = 0;
    const Field* changed = nullptr;
    Field copy("", "", "");
    VisitFields(c, [&](const Field& field, auto& value) {
      if (i++ == k) {
        Perturb(value);
        copy = field;
        changed = &copy;
      }
    });
    f(*changed, c);
  }
}

TEST(RunConfigTest, DigestCoversEverySharedFieldExactlyAndNoPerWorkerField) {
  const uint64_t base = SharedDigest(RunConfig{});
  int shared = 0, per_worker = 0;
  ForEachPerturbation([&](const Field& f, const RunConfig& changed) {
    if (f.scope == FieldScope::kShared) {
      ++shared;
      EXPECT_NE(SharedDigest(changed), base) << f.key << " is shared but not in the digest";
    } else {
      ++per_worker;
      EXPECT_EQ(SharedDigest(changed), base) << f.key << " is per-worker but changes the digest";
    }
  });
  // The fields the hand-kept digest used to miss are shared.
  std::vector<std::string> keys = SharedKeys();
  std::set<std::string> set(keys.begin(), keys.end());
  for (const char* k : {"dampening", "beta1", "beta2", "eps", "lr_step_size", "lr_gamma", "eval_every"}) {
    EXPECT_TRUE(set.count(k)) << k;
  }
  EXPECT_GT(shared, 30);
  EXPECT_GT(per_worker, 10);
}

TEST(RunConfigTest, SpeedNeutralKeysAreOptionsThatLeaveAStepsSpeedAlone) {
  std::vector<std::string> keys = SpeedNeutralKeys();
  std::set<std::string> set(keys.begin(), keys.end());
  EXPECT_EQ(set.size(), keys.size()) << "a key listed twice";
  for (const std::string& k : keys) EXPECT_TRUE(HasOption(k)) << k;
  for (const char* k : {"lr", "seed", "max_steps", "timeout_s", "outer_lr", "key", "checkpoint_every"}) {
    EXPECT_TRUE(set.count(k)) << k << " should not split the cluster's speed profiles";
  }
  for (const char* k : {"model", "batch_size", "density", "workers", "sync", "local_steps", "value_encoding",
                        "exchange", "cpu_threads", "device"}) {
    EXPECT_FALSE(set.count(k)) << k << " changes a step's speed";
  }
}

TEST(RunConfigTest, DistributedOptionsVisitsEachConcernsFieldsOnce) {
  // The per-concern structs together are the whole field list, each key once.
  RunConfig c;
  std::set<std::string> all;
  size_t n = 0;
  VisitFields(c.distributed, [&](const Field& f, const auto&) { all.insert(f.key), ++n; });
  EXPECT_EQ(all.size(), n);
  std::set<std::string> parts{"workers", "sync", "checksum_every", "compute_slowdown"};
  auto add = [&](auto& part) { VisitFields(part, [&](const Field& f, const auto&) { parts.insert(f.key); }); };
  add(static_cast<CompressionOptions&>(c.distributed));
  add(static_cast<StepSyncOptions&>(c.distributed));
  add(static_cast<LocalSyncOptions&>(c.distributed));
  add(static_cast<NetworkOptions&>(c.distributed));
  add(static_cast<AdaptationOptions&>(c.distributed));
  EXPECT_EQ(parts, all);
}

TEST(RunConfigTest, LrOfOneEMinusSevenAndTwoEMinusSevenDiffer) {
  RunConfig a, b;
  a.train.lr = 1e-7;
  b.train.lr = 2e-7;
  EXPECT_NE(SharedDigest(a), SharedDigest(b));
}

TEST(RunConfigTest, TomlRoundTripsEveryField) {
  // Every field perturbed, written, read back: the same configuration.
  ForEachPerturbation([&](const Field& f, const RunConfig& changed) {
    RunConfig read;
    std::string toml = ToToml(changed);
    size_t pos = 0;
    while (pos < toml.size()) {
      size_t end = toml.find('\n', pos);
      std::string line = toml.substr(pos, end - pos);
      pos = end + 1;
      size_t eq = line.find(" = ");
      std::string key = line.substr(0, eq), value = line.substr(eq + 3);
      if (!value.empty() && value.front() == '"') value = value.substr(1, value.size() - 2);
      ASSERT_TRUE(SetOption(&read, key, value).ok()) << key << " = " << value;
    }
    EXPECT_EQ(ToToml(read), toml) << f.key;
    EXPECT_EQ(SharedDigest(read), SharedDigest(changed)) << f.key;
  });
}

TEST(RunConfigTest, ValidationNamesTheOptionAndRejectsNan) {
  RunConfig c;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
  c.distributed.density = std::nan("");
  Status s = Validate(c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "--density must be in [0, 1], got nan");
  c.distributed.density = -0.1;
  EXPECT_EQ(Validate(c).code(), Status::Code::kInvalidArgument);
  c.distributed.density = 1.5;
  EXPECT_EQ(Validate(c).code(), Status::Code::kInvalidArgument);
  c = RunConfig{};
  c.train.momentum = std::nan("");
  EXPECT_NE(Validate(c).message().find("--momentum"), std::string::npos);
  c = RunConfig{};
  c.distributed.workers = 1000;
  EXPECT_NE(Validate(c).message().find("on this machine"), std::string::npos) << Validate(c).message();
  c = RunConfig{};
  c.train.run_name = "../escape";
  EXPECT_NE(Validate(c).message().find("--run-name"), std::string::npos);
  c = RunConfig{};
  c.train.synthetic_train_size = int64_t{1} << 40;
  EXPECT_NE(Validate(c).message().find("in memory"), std::string::npos);
  c = RunConfig{};
  c.train.model = "nosuch";
  EXPECT_NE(Validate(c).message().find("nosuch"), std::string::npos);
}

// --leader-residual is a step-pipeline option: valid with --sync step, and
// an error naming it where the run's mode is local (auto with 2 workers too).
TEST(RunConfigTest, LeaderResidualAppliesToTheStepModeOnly) {
  RunConfig c;
  c.distributed.leader_residual = true;
  c.distributed.workers = 2;
  c.distributed.sync = SyncMode::kStep;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
  for (SyncMode local : {SyncMode::kLocal, SyncMode::kAuto}) {
    c.distributed.sync = local;
    const Status s = Validate(c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << NameOf(local);
    EXPECT_NE(s.message().find("--leader-residual"), std::string::npos) << s.ToString();
  }
}

// --adapt auto (the default) is valid where an explicit --adapt on is not:
// it resolves to off for an elastic or local-update run.
TEST(RunConfigTest, CpuThreadsAutoIsTwoOnTheCpuAndTheCoresPerWorkerOnAGpu) {
  RunConfig c;
  EXPECT_EQ(c.distributed.cpu_threads, 0);  // the default: auto
  EXPECT_TRUE(Validate(c).ok());
  c.train.device = "cpu";
  EXPECT_EQ(ResolveCpuThreads(c, 1), 2);
  EXPECT_EQ(ResolveCpuThreads(c, 4), 2);
  c.train.device = "cuda:0";
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(ResolveCpuThreads(c, 1), std::clamp(cores, 1, 4));
  EXPECT_EQ(ResolveCpuThreads(c, 1000), 1);  // never 0, however many workers share the host
  c.distributed.cpu_threads = 3;  // given: kept, on any device
  EXPECT_EQ(ResolveCpuThreads(c, 4), 3);
  c.distributed.cpu_threads = -1;
  EXPECT_FALSE(Validate(c).ok());
}

TEST(RunConfigTest, AdaptAutoIsTheDefaultAndValidWhereOnIsNot) {
  RunConfig c;
  EXPECT_EQ(c.distributed.adapt, AdaptMode::kAuto);
  c.elastic.elastic = true;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
  c.distributed.adapt = AdaptMode::kOn;
  EXPECT_NE(Validate(c).message().find("--elastic runs with --adapt off"), std::string::npos) << Validate(c).message();
  c = RunConfig{};
  c.distributed.sync = SyncMode::kLocal;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
  c.distributed.adapt = AdaptMode::kBatch;
  EXPECT_NE(Validate(c).message().find("--sync local runs with --adapt off"), std::string::npos);
}

TEST(RunConfigTest, ShardedExchangeRunsInEverySyncMode) {
  RunConfig c;
  c.distributed.exchange = comm::ExchangeAlgorithm::kSharded;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();  // --sync auto: local here
  c.distributed.sync = SyncMode::kStep;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
  c.distributed.sync = SyncMode::kLocal;
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
}

// --sync auto (the default): the local mode for 2 or more workers, the step
// mode where an option needs it; step and local stay as set. Validation
// checks the mode the run will take.
TEST(RunConfigTest, SyncAutoIsLocalUnlessAnOptionNeedsTheStepMode) {
  RunConfig c;
  EXPECT_EQ(c.distributed.sync, SyncMode::kAuto);
  EXPECT_EQ(c.distributed.local_steps, 16);
  EXPECT_EQ(SyncOf(c), SyncMode::kLocal);
  auto with = [](auto change) {
    RunConfig x;
    change(x);
    return SyncOf(x);
  };
  EXPECT_EQ(with([](RunConfig& x) { x.elastic.elastic = true; }), SyncMode::kLocal);  // Note [Local mode across worlds]
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.adapt = AdaptMode::kOn; }), SyncMode::kStep);
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.adapt = AdaptMode::kBatch; }), SyncMode::kStep);
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.adapt = AdaptMode::kOff; }), SyncMode::kLocal);
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.staleness = 1; }), SyncMode::kStep);
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.density_warmup_steps = 100; }), SyncMode::kStep);
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.workers = 1; }), SyncMode::kStep);
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.density = 0.05; }), SyncMode::kLocal);
  EXPECT_EQ(with([](RunConfig& x) {
              x.distributed.sync = SyncMode::kLocal;
              x.elastic.elastic = true;
            }),
            SyncMode::kLocal);  // as set: it runs elastic (Note [Local mode across worlds])
  EXPECT_EQ(with([](RunConfig& x) { x.distributed.sync = SyncMode::kStep; }), SyncMode::kStep);
  c.distributed.local_fragments = 3;  // checked as a local run: 3 does not divide 16
  EXPECT_NE(Validate(c).message().find("--local-fragments 3 must divide --local-steps 16"), std::string::npos)
      << Validate(c).message();
  c.distributed.sync = SyncMode::kStep;  // fragments do not apply to the step mode
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).ToString();
}

// Note [One resolver]: a plan has no "auto" left that the configuration
// and the host decide, and a resolved plan resolves to itself, over every
// option that has an auto (table-driven).
TEST(RunConfigTest, ResolvePlanLeavesNoAutoAndIsIdempotent) {
  struct Case {
    const char* name;
    std::vector<std::pair<const char*, const char*>> options;
    HostFacts facts;
    SyncMode sync;
    AdaptMode adapt;
  };
  HostFacts controller;
  controller.controller_available = true;
  const std::vector<Case> cases = {
      {"defaults", {}, {}, SyncMode::kLocal, AdaptMode::kOff},
      {"one worker", {{"workers", "1"}}, {}, SyncMode::kStep, AdaptMode::kOff},
      {"one worker, controller", {{"workers", "1"}}, controller, SyncMode::kStep, AdaptMode::kOn},
      {"step, controller", {{"sync", "step"}}, controller, SyncMode::kStep, AdaptMode::kOn},
      {"step, elastic", {{"sync", "step"}, {"elastic", "true"}}, controller, SyncMode::kStep, AdaptMode::kOff},
      {"local, controller", {{"sync", "local"}}, controller, SyncMode::kLocal, AdaptMode::kOff},
      {"staleness", {{"staleness", "1"}}, {}, SyncMode::kStep, AdaptMode::kOff},
      {"adapt on", {{"adapt", "on"}}, {}, SyncMode::kStep, AdaptMode::kOn},
      {"overlapped rounds", {{"local_overlap", "true"}, {"local_steps", "12"}}, {}, SyncMode::kLocal, AdaptMode::kOff},
      {"density set", {{"density", "0.05"}}, {}, SyncMode::kLocal, AdaptMode::kOff},
  };
  for (const Case& k : cases) {
    RunConfig c;
    for (const auto& [key, value] : k.options) ASSERT_TRUE(SetOption(&c, key, value).ok()) << k.name << " " << key;
    const RunConfig plan = ResolvePlan(c, k.facts);
    const DistributedOptions& d = plan.distributed;
    EXPECT_EQ(d.sync, k.sync) << k.name;
    EXPECT_EQ(d.adapt, k.adapt) << k.name;
    EXPECT_GT(d.cpu_threads, 0) << k.name;
    EXPECT_EQ(d.density, DensityOf(c.distributed.density > 0 ? c.distributed : d)) << k.name;
    EXPECT_GT(d.density, 0) << k.name;
    if (d.sync == SyncMode::kLocal) {
      EXPECT_EQ(d.local_fragments, LocalFragmentsOf(c.distributed)) << k.name;
      if (d.local_overlap) EXPECT_GT(d.local_delay, 0) << k.name;
    }
    EXPECT_TRUE(Validate(plan).ok()) << k.name << ": " << Validate(plan).ToString();
    EXPECT_EQ(ToToml(ResolvePlan(plan, k.facts)), ToToml(plan)) << k.name;
  }
  // A bad value is not resolved away: Validate still names it.
  RunConfig bad;
  bad.distributed.density = -0.5;
  EXPECT_EQ(ResolvePlan(bad, {}).distributed.density, -0.5);
  EXPECT_FALSE(Validate(ResolvePlan(bad, {})).ok());
}

TEST(RunConfigTest, SetOptionAcceptsKebabCaseAndNamesUnknownKeys) {
  RunConfig c;
  ASSERT_TRUE(SetOption(&c, "value-encoding", "bf16").ok());
  EXPECT_EQ(c.distributed.value_encoding, compress::ValueEncoding::kBf16);
  Status s = SetOption(&c, "no_such", "1");
  EXPECT_NE(s.message().find("no_such"), std::string::npos);
  EXPECT_FALSE(SetOption(&c, "sparsifier", "nope").ok());
  EXPECT_TRUE(HasOption("lr-gamma"));
  EXPECT_FALSE(HasOption("lr-gammas"));
}

// density 0 (the default) is the mode's: 3% a step, whole rounds (no index
// bytes) with --sync local; an explicit density wins in both modes.
TEST(RunConfigTest, DensityDefaultsToTheModes) {
  DistributedOptions d;
  EXPECT_EQ(d.density, 0.0);
  EXPECT_DOUBLE_EQ(DensityOf(d), kStepDensity);
  d.sync = SyncMode::kLocal;
  EXPECT_DOUBLE_EQ(DensityOf(d), kLocalDensity);
  EXPECT_DOUBLE_EQ(WireBytesPerValue(d), 129.0 / 256);  // int4 codes, every index: no index bytes
  d.density = 0.25;
  EXPECT_DOUBLE_EQ(DensityOf(d), 0.25);
  d.sync = SyncMode::kStep;
  EXPECT_DOUBLE_EQ(DensityOf(d), 0.25);
}

// --outer-lr 0 (auto): DiLoCo's Nesterov step over at least 2 / (1 -
// momentum) rounds, plain averaging below; a set outer lr is kept as set.
TEST(RunConfigTest, OuterStepFollowsTheRunsLengthInRounds) {
  DistributedOptions d;
  d.sync = SyncMode::kLocal;
  d.local_steps = 16;
  EXPECT_EQ(d.outer_lr, 0.0);
  EXPECT_DOUBLE_EQ(MinNesterovRounds(0.9), 20.0);
  EXPECT_EQ(OuterOf(d, 200), (OuterStep{1.0, 0.0}));  // gpt-tiny: 12.5 rounds
  EXPECT_EQ(OuterOf(d, 702), (OuterStep{kDiLoCoOuterLr, 0.9}));  // mlp: 44 rounds
  EXPECT_EQ(OuterOf(d, 319), (OuterStep{1.0, 0.0}));
  EXPECT_EQ(OuterOf(d, 320), (OuterStep{kDiLoCoOuterLr, 0.9}));
  EXPECT_EQ(OuterOf(d, 0), (OuterStep{kDiLoCoOuterLr, 0.9}));  // an elastic run: no fixed length
  d.outer_momentum = 0.5;  // 4 rounds suffice
  EXPECT_EQ(OuterOf(d, 64), (OuterStep{kDiLoCoOuterLr, 0.5}));
  d.outer_lr = 0.3;
  EXPECT_EQ(OuterOf(d, 16), (OuterStep{0.3, 0.5}));
  // Note [Outer step on resume]: an elastic run's length counts only with a
  // global batch (a cluster job's 225 steps of 256 samples: 14 rounds).
  RunConfig e;
  e.distributed.local_steps = 16;
  e.elastic.elastic = true;
  EXPECT_EQ(RunOuterOf(e, 225), (OuterStep{kDiLoCoOuterLr, 0.9}));
  e.train.global_batch = 256;
  EXPECT_EQ(RunOuterOf(e, 225), (OuterStep{1.0, 0.0}));
  EXPECT_EQ(RunOuterOf(e, 320), (OuterStep{kDiLoCoOuterLr, 0.9}));
  e.elastic.elastic = false;
  e.train.global_batch = 0;
  EXPECT_EQ(RunOuterOf(e, 225), (OuterStep{1.0, 0.0}));
  RunConfig c;
  c.distributed.outer_lr = -0.1;
  EXPECT_NE(Validate(c).message().find("--outer-lr"), std::string::npos) << Validate(c).message();
}

// Deflated values: auto is on with --sync local only (the step mode's
// controller prices undeflated bytes); on and off are what they say.
TEST(RunConfigTest, DeflateFollowsTheMode) {
  DistributedOptions d;
  EXPECT_FALSE(WireFormatOf(d).deflate);
  d.sync = SyncMode::kLocal;
  EXPECT_TRUE(WireFormatOf(d).deflate);
  d.deflate = DeflateMode::kOff;
  EXPECT_FALSE(WireFormatOf(d).deflate);
  d.sync = SyncMode::kStep;
  d.deflate = DeflateMode::kOn;
  EXPECT_TRUE(WireFormatOf(d).deflate);
  RunConfig c;
  ASSERT_TRUE(SetOption(&c, "deflate", "off").ok());
  EXPECT_EQ(c.distributed.deflate, DeflateMode::kOff);
  EXPECT_FALSE(SetOption(&c, "deflate", "maybe").ok());
}

// --sync local's auto exchange: sharded on one cluster, the hierarchical
// exchange's auto across clusters; an explicit choice wins.
TEST(RunConfigTest, LocalExchangeIsShardedOnOneCluster) {
  DistributedOptions d;
  EXPECT_EQ(LocalExchangeOf(d, 1), comm::ExchangeAlgorithm::kSharded);
  EXPECT_EQ(LocalExchangeOf(d, 2), comm::ExchangeAlgorithm::kAuto);
  d.exchange = comm::ExchangeAlgorithm::kFlat;
  EXPECT_EQ(LocalExchangeOf(d, 1), comm::ExchangeAlgorithm::kFlat);
  d.exchange = comm::ExchangeAlgorithm::kSharded;
  EXPECT_EQ(LocalExchangeOf(d, 3), comm::ExchangeAlgorithm::kSharded);
}

TEST(RunConfigTest, WireBytesFollowTheEncoding) {
  DistributedOptions d;
  EXPECT_DOUBLE_EQ(WireBytesPerValue(d), 129.0 / 256 + 1.0 / 16);  // int4 codes, one-byte block-id gaps at 3%
  EXPECT_DOUBLE_EQ(MergedWireBytesPerValue(d), 257.0 / 256 + 1.0 / 16);  // merged: int8 codes
  d.density = 0.005;  // gaps of 200 blocks take two bytes
  EXPECT_DOUBLE_EQ(WireBytesPerValue(d), 129.0 / 256 + 2.0 / 16);
  d.density = 0.03;
  d.value_encoding = compress::ValueEncoding::kFp16;
  EXPECT_DOUBLE_EQ(WireBytesPerValue(d), 2.0625);
  d.value_encoding = compress::ValueEncoding::kFp32;
  d.sparsifier = compress::SparsifierKind::kTopk;
  EXPECT_DOUBLE_EQ(WireBytesPerValue(d), 6.0);
  EXPECT_EQ(WireFormatOf(d).indices, compress::IndexEncoding::kDeltaVarint);
}

}  // namespace
}  // namespace frugal::engine
