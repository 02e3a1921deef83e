// Helpers of the worker tests: N workers as threads over the in-process
// transport. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "frugal/comm/transport/inproc_transport.h"
#include "frugal/compress/codec.h"
#include "frugal/train/trainer.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/worker.h"

namespace frugal::engine {
namespace {

inline RunConfig BaseOptions(const std::string& run) {
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
  o.runs_dir = (std::filesystem::temp_directory_path() / "frugal_worker_test").string();
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

inline std::vector<RankOutcome> RunWorkers(const RunConfig& options, std::vector<std::string> clusters,
                                    PolicyFactory make_policy = nullptr) {
  auto topo = comm::Topology::FromClusterNames(clusters);
  comm::InProcHub hub(*topo);
  const int world = static_cast<int>(clusters.size());
  std::vector<RankOutcome> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto transport = hub.CreateTransport(r);
      if (!transport.ok()) {
        out[r].status = transport.status();
        return;
      }
      auto worker = Worker::Create(options, std::move(*transport),
                                   (r == 0 && make_policy) ? make_policy() : nullptr);
      if (!worker.ok()) {
        out[r].status = worker.status();
        return;
      }
      auto result = (*worker)->Run();
      if (!result.ok()) {
        out[r].status = result.status();
        return;
      }
      out[r].result = *result;
      out[r].params = (*worker)->Parameters();
    });
  }
  for (auto& t : threads) t.join();
  return out;
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
