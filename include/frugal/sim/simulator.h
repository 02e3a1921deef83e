// The training-iteration simulator: wires a workload (workload.h), an
// operator cost model (cost_model.h) and a network model (network_model.h)
// together for one parallel strategy, builds the task graph of one training
// iteration and runs it through the discrete-event engine (event_engine.h).
//
// Strategies: data parallel with bucketed gradient all-reduce, optionally
// overlapped with the last backward pass (DDP) and ring / tree /
// hierarchical; Megatron tensor parallelism (two all-reduces per layer in
// forward, two in backward, two more when the forward is recomputed);
// pipeline parallelism with GPipe, 1F1B or interleaved 1F1B; activation
// recomputation (none, selective, full); mixed-precision Adam memory per
// device with out-of-memory detection. See docs/design/planner.md.
//
// Thread safety: a Simulator is immutable after construction; Predict() may
// be called from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/cost_model.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/network_model.h"
#include "frugal/sim/pipeline_schedule.h"
#include "frugal/sim/workload.h"

namespace frugal::sim {

enum class Recompute { kNone, kSelective, kFull };
const char* RecomputeName(Recompute r);
Result<Recompute> ParseRecompute(const std::string& text);  // none|selective|full

struct ParallelStrategy {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
  int64_t micro_batch = 1;
  int64_t global_batch = 1;   // Samples per iteration over all replicas.
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int chunks = 1;             // Model chunks per stage; > 1 only for interleaved.
  Recompute recompute = Recompute::kFull;
  bool sequence_parallel = false;
  // Megatron's fused softmax for any attention batch count (Megatron-LM as of
  // 2021); false: only when b x heads / tp is a multiple of 4, else PyTorch's
  // unfused softmax (current Megatron-LM and Megatron-DeepSpeed;
  // Note [Unfused softmax] in workload.cc). Default false.
  bool fused_softmax_any_batch = false;
  CollectiveAlgorithm dp_algorithm = CollectiveAlgorithm::kAuto;  // Default: fastest of ring/tree/hierarchical.
  bool overlap_dp = true;     // Gradient buckets all-reduced during the last backward.
  double bucket_mb = 25;      // DDP bucket size (MB); default 25.
  bool distributed_optimizer = false;  // ZeRO-1: Adam state sharded over data parallel ranks.

  int gpus() const { return tensor_parallel * pipeline_parallel * data_parallel; }
  std::string ToString() const;  // "tp8 pp8 dp16 mb1 1f1b full"
};

struct MemoryEstimate {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activation_bytes = 0;
  double reserved_bytes = 0;
  double total_bytes = 0;     // Worst pipeline stage.
  double capacity_bytes = 0;
  int max_in_flight = 0;      // Micro-batch activations held by the worst stage.
  int worst_stage = 0;
  bool oom() const { return total_bytes > capacity_bytes; }
};

struct IterationPrediction {
  double iteration_s = 0;
  double compute_s = 0;        // Busiest compute stream: kernels incl. TP all-reduces, optimizer.
  double tp_comm_s = 0;        // Tensor-parallel all-reduces per device (serial, exposed).
  double pp_comm_s = 0;        // Busiest pipeline point-to-point link.
  double dp_comm_s = 0;        // Gradient all-reduce per device.
  double dp_exposed_s = 0;     // Part of dp_comm_s not hidden behind backward.
  double bubble_fraction = 0;  // Idle share of the pipeline phase, mean over stages.
  double achieved_tflops_per_gpu = 0;  // Executed FLOPs (incl. recomputation) per second.
  double model_tflops_per_gpu = 0;     // Model FLOPs (no recomputation) per second.
  MemoryEstimate memory;
  std::vector<std::pair<std::string, double>> resource_busy;  // Per stream/link, seconds.
  uint64_t events = 0;
};

class Simulator {
 public:
  // Null `cost` means the roofline model of `hw`; null `network` the analytic one.
  explicit Simulator(HardwareSpec hw, std::unique_ptr<OperatorCostModel> cost = nullptr,
                     std::unique_ptr<NetworkModel> network = nullptr);

  // InvalidArgument when the strategy does not fit the model (batch not
  // divisible, layers not divisible by stages x chunks, ...).
  Result<MemoryEstimate> EstimateMemory(const ModelSpec& model, const ParallelStrategy& strategy) const;
  // Simulates one iteration. Does not fail on out-of-memory: check memory.oom().
  Result<IterationPrediction> Predict(const ModelSpec& model, const ParallelStrategy& strategy) const;

  const HardwareSpec& hardware() const { return hw_; }
  const NetworkModel& network() const { return *network_; }
  const OperatorCostModel& cost_model() const { return *cost_; }

 private:
  HardwareSpec hw_;
  std::unique_ptr<OperatorCostModel> cost_;
  std::unique_ptr<NetworkModel> network_;
};

}  // namespace frugal::sim
