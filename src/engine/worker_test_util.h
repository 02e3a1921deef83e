// Helpers of the worker tests: N workers as threads over one backend
// (comm/testing/test_world.h: in-process or ZeroMQ on loopback). Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "frugal/compress/codec.h"
#include "frugal/train/trainer.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/worker.h"
#include "testing/test_world.h"

namespace frugal::engine {
namespace {

using comm::testing::Backend;

// Where the runs of `backend` write their files: the in-process and the
// ZeroMQ instance of a parameterised test may run at once, under the same
// run names.
inline std::string TestRunsDir(Backend backend = Backend::kInProc) {
  std::filesystem::path root = std::filesystem::temp_directory_path() / "frugal_worker_test";
  return (backend == Backend::kInProc ? root : root / BackendName(backend)).string();
}

inline RunConfig BaseOptions(const std::string& run, Backend backend = Backend::kInProc) {
  RunConfig c;
  train::TrainOptions& o = c.train;
  o.dataset = train::DatasetKind::kSynthetic;
  o.synthetic_train_size = 1024;
  o.synthetic_test_size = 256;
  o.batch_size = 16;
  o.epochs = 1;
  o.lr = 0.01;
  o.warmup_steps = 0;
  o.lr_schedule = train::LrScheduleKind::kConstant;
  o.quiet = true;
  o.threads = 1;
  c.distributed.timeout_s = 30;
  c.distributed.checksum_every = 5;
  c.distributed.sync = SyncMode::kStep;  // these tests drive the gradient pipeline (--sync auto: local)
  o.runs_dir = TestRunsDir(backend);
  o.run_name = run;
  return c;
}

// `options` resumed from its own checkpoint of `step`, as run `run_name`.
inline RunConfig ResumedAt(RunConfig options, int64_t step, const std::string& run_name) {
  options.checkpoint.resume_from = CheckpointStepDir(options.checkpoint.checkpoint_dir, step);
  options.train.run_name = run_name;
  return options;
}

struct RankOutcome {
  Status status;
  WorkerResult result;
  std::vector<float> params;
};

using PolicyFactory = std::function<std::unique_ptr<AdaptationPolicy>()>;

// One worker per entry of `clusters`, each on its own thread, over
// `backend`; each worker owns its rank's transport.
inline std::vector<RankOutcome> RunWorkers(Backend backend, const RunConfig& options,
                                           const std::vector<std::string>& clusters,
                                           PolicyFactory make_policy = nullptr) {
  comm::testing::World w = comm::testing::MakeWorld(backend, clusters);
  std::vector<RankOutcome> out(clusters.size());
  for (RankOutcome& o : out) o.status = Status::Internal("not run");
  comm::testing::RunRanks(w, [&](int r, std::unique_ptr<comm::Transport>& transport) {
    auto worker = Worker::Create(options, std::move(transport), (r == 0 && make_policy) ? make_policy() : nullptr);
    if (!worker.ok()) {
      out[r].status = worker.status();
      return;
    }
    auto result = (*worker)->Run();
    if (!result.ok()) {
      out[r].status = result.status();
      return;
    }
    out[r].status = Status::Ok();
    out[r].result = *result;
    out[r].params = (*worker)->Parameters();
  });
  return out;
}

// RunWorkers over `backend`; over another backend than the in-process one,
// the same run in-process too (its files in a folder of their own): every
// rank must end with the in-process run's final checksum and parameters,
// bit for bit. REQUIRES: `options` writes no checkpoint.
inline std::vector<RankOutcome> RunWorkersMatchingInProc(Backend backend, const RunConfig& options,
                                                         const std::vector<std::string>& clusters) {
  std::vector<RankOutcome> out = RunWorkers(backend, options, clusters);
  if (backend == Backend::kInProc) return out;
  RunConfig reference = options;
  reference.train.runs_dir = (std::filesystem::path(options.train.runs_dir) / "in-process-reference").string();
  const std::vector<RankOutcome> in_proc = RunWorkers(Backend::kInProc, reference, clusters);
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_TRUE(in_proc[r].status.ok()) << in_proc[r].status.ToString();
    EXPECT_EQ(out[r].result.final_checksum, in_proc[r].result.final_checksum)
        << "rank " << r << " over " << BackendName(backend);
    EXPECT_EQ(out[r].params, in_proc[r].params) << "rank " << r << " over " << BackendName(backend);
  }
  return out;
}

inline std::vector<RankOutcome> RunWorkers(const RunConfig& options, const std::vector<std::string>& clusters,
                                           PolicyFactory make_policy = nullptr) {
  return RunWorkers(Backend::kInProc, options, clusters, std::move(make_policy));
}

// Exactness mode: every value sent (density 1) in fp32, staleness 0 and no
// momentum, so that N workers follow single-process training up to rounding.
inline void MakeExact(RunConfig* o) {
  o->train.momentum = 0.0;
  o->distributed.density = 1.0;
  o->distributed.value_encoding = compress::ValueEncoding::kFp32;
  o->distributed.staleness = 0;
}

// The final parameters of `options` trained in one process (train::Trainer);
// empty, with a test failure, if it did not run.
inline std::vector<float> SingleProcessParameters(const train::TrainOptions& options) {
  auto trainer = train::Trainer::Create(options);
  if (!trainer.ok()) {
    ADD_FAILURE() << trainer.status().ToString();
    return {};
  }
  auto result = (*trainer)->Run();
  if (!result.ok()) {
    ADD_FAILURE() << result.status().ToString();
    return {};
  }
  return (*trainer)->Parameters();
}

inline double RelativeDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

}  // namespace
}  // namespace frugal::engine
