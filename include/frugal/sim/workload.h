// Workload description for the training-time simulator: what must run.
//
// A model is described by a ModelSpec (a GPT-style decoder, or one of the
// built-in zoo models). BuildWorkload() expands it, for a given tensor-parallel
// degree and micro-batch, into per-device operators with FLOPs, bytes moved,
// parameters and saved activations for forward, backward and recomputation.
// The workload says nothing about time: that is the cost model's job
// (cost_model.h), and scheduling onto devices is the simulator's
// (simulator.h). See docs/design/planner.md.
//
// Thread safety: value types.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::sim {

enum class OpKind {
  kMatmul,        // (batched) GEMM, [batch x] M x K times K x N; compute bound.
  kMemoryBound,   // elementwise, normalisation, softmax, pooling; bandwidth bound.
  kConv,          // convolution, costed like an implicit GEMM of dims m/n/k.
  kTensorParallelAllReduce,  // Megatron's all-reduce of one activation (bytes).
};

// One operator on one device for one micro-batch.
struct Operator {
  std::string name;
  OpKind kind = OpKind::kMemoryBound;
  // GEMM shape (kMatmul, kConv): batch x [m x k] * [k x n].
  int64_t batch = 1, m = 0, n = 0, k = 0;
  double fwd_flops = 0;
  double bwd_flops = 0;   // Usually 2 x forward for GEMMs.
  double fwd_bytes = 0;   // Bytes read + written by the forward kernel(s).
  double bwd_bytes = 0;
  double comm_bytes = 0;  // kTensorParallelAllReduce: payload per all-reduce.
  // True when selective recomputation recomputes this op (attention core).
  bool selective_recompute = false;
};

// A repeated unit (a transformer layer, a conv block, an MLP layer).
struct Block {
  std::string name;
  std::vector<Operator> ops;
  double params = 0;  // Parameters held by this device for the block.
  // Activation bytes saved for backward per micro-batch, per recomputation
  // mode: all saved / attention core dropped / only the block input.
  double act_bytes_none = 0;
  double act_bytes_selective = 0;
  double act_bytes_full = 0;
};

// One device's share of the model: pre (embedding), blocks, post (head+loss).
struct Workload {
  Block pre;
  std::vector<Block> blocks;
  Block post;
  // Bytes of the activation passed between pipeline stages per micro-batch.
  double boundary_bytes = 0;
  double total_params = 0;  // Whole model, all devices.
  bool is_transformer = false;
};

// A GPT-style decoder (Megatron-LM layout: pre-LN, 4h MLP, tied embedding).
struct TransformerSpec {
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int64_t seq_len = 2048;
  int64_t vocab = 51200;
};

struct ModelSpec {
  std::string name;
  bool is_transformer = true;
  TransformerSpec transformer;  // When is_transformer.
  // Zoo models: "mlp", "cnn", "resnet18" (1x28x28 inputs, 10 classes).
  std::string zoo_name;
  int bytes_per_value = 2;  // Activation/weight element size (fp16 mixed precision).
  // A workload recorded from a user's module (frugal.plan's profile: its
  // matrix products and convolutions with their shapes, its parameters and
  // saved activations) for `recorded_batch` samples. BuildWorkload scales it
  // to the micro-batch (Note [Recorded workloads] in workload.cc). Data
  // parallelism only; null for the built-in models.
  std::shared_ptr<const Workload> recorded;
  int64_t recorded_batch = 0;

  // 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) for transformers.
  double ParameterCount() const;
};

// Built-in names: gpt-125m, gpt-350m, gpt-1.3b, gpt-1.7b, gpt-2.7b, gpt-3.6b,
// gpt-6.7b, gpt-7.5b, gpt-13b, gpt-18b, gpt-22b, gpt-39b, gpt-76b, gpt-145b,
// gpt-175b, gpt-310b, gpt-530b, gpt-1t, and the zoo models mlp, cnn, resnet18.
Result<ModelSpec> BuiltinModel(const std::string& name);
std::vector<std::string> BuiltinModelNames();

ModelSpec MakeTransformer(const std::string& name, int layers, int64_t hidden, int heads,
                          int64_t seq_len, int64_t vocab);

struct WorkloadOptions {
  int tensor_parallel = 1;      // Megatron TP degree; must divide heads.
  int64_t micro_batch = 1;
  bool sequence_parallel = false;  // Korthikanti 2022: LN/dropout split over TP.
  // See ParallelStrategy::fused_softmax_any_batch. Default false.
  bool fused_softmax_any_batch = false;
};

// Whether Megatron's fused causal softmax kernel takes b x heads/t attention
// batches of `seq` keys (Note [Unfused softmax] in workload.cc).
bool FusedSoftmaxAvailable(int64_t attention_batches, int64_t seq);

// REQUIRES nothing; returns InvalidArgument for impossible shapes (TP not
// dividing heads, TP > 1 for a zoo model, non-positive sizes).
Result<Workload> BuildWorkload(const ModelSpec& model, const WorkloadOptions& options);

// The distinct compute operators of a workload (equal OperatorKey counted
// once), in first-use order: the shapes a profiler has to time.
std::vector<Operator> DistinctOperators(const Workload& workload);

// Model FLOPs per training sample (forward + backward, no recomputation):
// what "achieved TFLOP/s" is measured against, summed over all devices.
double ModelFlopsPerSample(const ModelSpec& model);

}  // namespace frugal::sim
