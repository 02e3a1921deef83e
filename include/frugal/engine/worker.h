// frugal::engine::Worker: one rank of a distributed data-parallel run. It
// trains its LibTorch model replica on its shard of every global batch and
// hands gradients to a GradientPipeline (sparsify, exchange, CPU optimizer).
// Rank 0 evaluates and writes metrics. This header is torch-free.
//
// The transport decides where the peers are: an in-process hub (tests, N
// ranks as threads) or ZeroMQ (processes, hosts). The world size is read from
// the transport, never fixed at build time.
//
// Thread safety: one thread calls Run(); the worker owns CPU pipeline threads.
#pragma once

#include <atomic>
#include <memory>

#include "frugal/comm/membership/membership.h"
#include "frugal/comm/transport/transport.h"
#include "frugal/engine/adaptation.h"
#include "frugal/common/status.h"
#include "frugal/engine/run_config.h"
#include "frugal/train/trainer.h"

namespace frugal::engine {

// Elastic: the counters cover every generation this worker took part in
// (iterations redone after a rollback included), and traffic.per_peer[i]
// sums what went to whoever was rank i in each. The state sent to joiners
// is not counted (the generation event in metrics.jsonl has its size).
struct WorkerResult {
  train::TrainResult train;       // final_test_accuracy is valid on rank 0 only
  uint64_t final_checksum = 0;    // of the master parameters, equal on every rank
  double compute_s = 0;           // forward + backward
  double wait_s = 0;              // blocked waiting for updates
  double sparsify_s = 0;
  double exchange_s = 0;
  double optimizer_s = 0;
  comm::TransportStats traffic;   // bytes per peer and link class sent during Run()
                                  // (excludes the start-up broadcast of parameters)
  bool left = false;              // elastic: this worker left before the end
  int64_t generation = 0;         // elastic: the generation it ended in
  int rank = 0;                   // its rank there
};

class Worker {
 public:
  // Validates the configuration, checks that every worker runs the same one
  // (SharedDigest), builds model, data and the Replica. The transport is
  // owned by the worker. With adapt on or batch, rank 0 needs `policy` (the
  // controller); it is ignored on other ranks.
  static Result<std::unique_ptr<Worker>> Create(const RunConfig& config,
                                                std::unique_ptr<comm::Transport> transport,
                                                std::unique_ptr<AdaptationPolicy> policy = nullptr);
  // An elastic worker (config.elastic.elastic): it gets each generation's
  // world from `membership` (registering in Run), checks for membership
  // changes every elastic_every steps, and survives the loss of peers down
  // to the coordinator's --min-workers (docs/architecture.md, "Membership
  // generations"). With config.elastic.join it joins a running job.
  static Result<std::unique_ptr<Worker>> CreateElastic(const RunConfig& config,
                                                       std::unique_ptr<comm::MembershipClient> membership);
  ~Worker();

  // Trains until the run is over. Elastic: also returns Ok when this worker
  // left the job (leave_signal, or the coordinator asked it to); then
  // WorkerResult::left is true.
  Result<WorkerResult> Run();

  // Set it (e.g. from a SIGTERM handler: the store is lock-free) to make an
  // elastic worker leave the job gracefully at its next check gate.
  std::atomic<bool>& leave_signal();

  // Flat copy of all trainable parameters of the model replica (tests).
  std::vector<float> Parameters() const;

  class Impl;

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::engine
