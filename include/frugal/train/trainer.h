// frugal::Trainer: trains one model on one worker. The `frugal train` command
// and (later) the Python binding are thin layers over it. This header is
// torch-free (pimpl), so callers compile fast.
//
// Thread safety: a Trainer is used from one thread; several may coexist.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/train/lr_schedule.h"

namespace frugal::train {

// Every option of a training run, with its default. The CLI exposes each one
// as --kebab-case-name and as a TOML key of the same name (snake_case ->
// kebab-case in flags).
struct TrainOptions {
  // Model and data.
  std::string model = "mlp";                                    // mlp | cnn | resnet18
  std::string dataset = "fashion-mnist";                        // fashion-mnist | synthetic
  std::string data_dir = "/usr/share/datasets/fashion-mnist";   // idx files, gzipped or not
  int64_t synthetic_train_size = 4096;                          // samples, dataset = synthetic
  int64_t synthetic_test_size = 1024;
  // Schedule.
  int64_t epochs = 3;
  int64_t max_steps = 0;         // stop after this many steps; 0 = no limit
  int64_t batch_size = 64;       // per worker
  // Optimiser.
  std::string optimizer = "sgd"; // sgd | adam | adamw
  double lr = 0.05;
  double momentum = 0.9;         // sgd
  double dampening = 0.0;        // sgd
  bool nesterov = false;         // sgd
  double weight_decay = 0.0;     // sgd/adam: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;            // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  // Learning-rate schedule (see lr_schedule.h).
  std::string lr_schedule = "cosine";  // constant | cosine | step
  int64_t warmup_steps = 100;
  int64_t lr_step_size = 1000;         // step schedule
  double lr_gamma = 0.1;               // step schedule
  // Evaluation and logging.
  int64_t eval_every = 0;   // evaluate every N steps; 0 = at the end of every epoch
  int64_t log_every = 50;   // progress line cadence when stdout is not a terminal
  std::string runs_dir = "runs";
  std::string run_name;     // empty = "<model>-<YYYYmmdd-HHMMSS>"
  // Execution.
  uint64_t seed = 1;
  int threads = 0;          // LibTorch intra-op threads; 0 = all cores
  std::string device = "cpu";  // any torch::Device string: cpu, cuda, cuda:1, ...
  bool quiet = false;       // no progress output (metrics are still written)

  // Distributed training (the engine; used when workers > 1 or a
  // coordinator is given). See docs/architecture.md.
  int workers = 4;                  // worker processes; frugal train starts them locally, 1 = no engine
  double density = 0.01;            // fraction of each gradient bucket sent per step, (0, 1]
  std::string sparsifier = "block"; // block | topk | randomk
  std::string value_encoding = "fp16";  // fp32 | fp16 | bf16 on the wire
  // 0 or 1: forward t uses the parameters after t-1-staleness. Default 0:
  // buckets still overlap backward, and 1 (forward overlaps the whole
  // exchange, StellaTrain's pipeline) diverged on cnn at lr 0.05 momentum
  // 0.9 density 1% (delay + momentum + sparse updates) and converged slower
  // on mlp (docs/benchmarks.md, "Staleness").
  int staleness = 0;
  double bucket_mb = 4.0;           // gradient bucket size (MB of fp32), parameters never split
  int cpu_threads = 1;              // CPU pipeline threads per worker
  std::string exchange = "auto";    // auto | flat | hierarchical
  double timeout_s = 60.0;          // bound on every network wait
  int64_t checksum_every = 100;     // compare replica checksums every N steps (0 = only at the end)
  double dgc_momentum = 0.0;        // error-feedback momentum correction (0 = off)
  std::string adapt = "off";        // on: the controller picks density and batch sizes;
                                    // batch: only batch sizes (proportional to speed); off
  int64_t decide_every = 5;         // steps between controller decisions
  double compute_slowdown = 1.0;    // per worker: stretch compute by this factor (experiments)
  // Per worker (not shared through the config):
  std::string cluster = "local";    // this worker's cluster (topology-aware exchange)
  std::string coordinator;          // tcp://HOST:PORT of the coordinator (frugal worker)
  int rank = -1;                    // -1: assigned by the coordinator
  std::string listen = "tcp://127.0.0.1:*";  // where this worker receives peers' messages
  std::string advertise_host;       // host peers should connect to, if listen is a wildcard

  // Checks every value; the message names the offending option.
  Status Validate() const;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t epochs_completed = 0;
  double final_test_accuracy = 0;  // on the whole test set
  double final_loss = 0;           // mean training loss of the last logged window
  double wall_time_s = 0;
  double samples_per_s = 0;
  std::string metrics_path;        // runs/<run-name>/metrics.jsonl
};

class Trainer {
 public:
  // Loads the data and builds the model. Errors: bad options, missing or
  // corrupt data files, unknown device.
  static Result<std::unique_ptr<Trainer>> Create(const TrainOptions& options);
  ~Trainer();

  // Trains to completion. A NaN/Inf loss is an error, not a silent result.
  Result<TrainResult> Run();

  // Test-set accuracy of the current parameters.
  Result<double> Evaluate();

  // Flat copy of all trainable parameters, in model->parameters() order.
  std::vector<float> Parameters() const;

  class Impl;

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::train
