#include "frugal/sim/simulator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "frugal/sim/event_engine.h"

#include "iteration_graph.h"
#include "iteration_plan.h"

namespace frugal::sim {
namespace {

using internal::ChunkCost;
using internal::IterationGraph;
using internal::OptimizerStateBytes;
using internal::Plan;

// Costs of one block (layer) on one device for one micro-batch.
struct BlockCost {
  double fwd_compute = 0;
  double bwd_compute = 0;
  double tp_fwd = 0;        // TP all-reduces in forward (and again in backward).
  double recompute = 0;     // Extra forward work before backward, incl. its TP all-reduces.
  double recompute_tp = 0;
  double fwd_flops = 0;
  double bwd_flops = 0;
  double recompute_flops = 0;
  // Host dispatch time (Note [Overheads and latency]).
  double fwd_dispatch = 0;
  double bwd_dispatch = 0;
  double recompute_dispatch = 0;

  // Task durations: the GPU work (with its serial TP all-reduces) or the
  // host's dispatch of it, whichever is longer.
  double Forward() const { return std::max(fwd_compute + tp_fwd, fwd_dispatch); }
  double Backward() const {
    return std::max(bwd_compute + tp_fwd + recompute + recompute_tp, bwd_dispatch + recompute_dispatch);
  }
};

// Note [Overheads and latency]
// Costs that do not scale with FLOPs or bytes, each a parameter of
// the hardware description ([overheads], docs/design/planner.md):
// - dispatch_us: the framework's host time per operator (one per forward
//   operator, two per backward one, one per collective). Launches are
//   asynchronous, so within a layer the GPU and the host overlap and the
//   layer takes the longer of the two (BlockCost::Forward/Backward). The
//   floor binds at small micro-batches and wide TP (GPU work shrinks, the
//   operator count does not) and vanishes for large GEMMs: at Megatron's
//   sizes a layer's kernels take milliseconds against tens of microseconds
//   of dispatch, so the published tables are unaffected (tested).
// - collective_latency_us, p2p_latency_us: the fixed part of each
//   collective and pipeline send (network_model.cc).
// - microbatch_overhead_us: per micro-batch and stage, on the stage's first
//   forward chunk.
// - iteration_overhead_us: per iteration and stage, with the optimizer step.
// Skinny-GEMM efficiency is the roofline's per-dimension curve
// d / (d + matmul_half_dim) (cost_model.cc).

double ActBytes(const Block& blk, Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return blk.act_bytes_none;
    case Recompute::kSelective:
      return blk.act_bytes_selective;
    case Recompute::kFull:
      return blk.act_bytes_full;
  }
  return blk.act_bytes_none;
}

Status CheckStrategy(const ModelSpec& model, const ParallelStrategy& s) {
  if (s.tensor_parallel <= 0 || s.pipeline_parallel <= 0 || s.data_parallel <= 0 || s.micro_batch <= 0 ||
      s.global_batch <= 0 || s.chunks <= 0) {
    return Status::InvalidArgument("parallel degrees, micro-batch and global batch must be positive");
  }
  if (s.global_batch % (s.data_parallel * s.micro_batch) != 0) {
    return Status::InvalidArgument("global batch " + std::to_string(s.global_batch) +
                                   " is not a multiple of data parallelism x micro-batch = " +
                                   std::to_string(s.data_parallel * s.micro_batch));
  }
  if (s.schedule != PipelineSchedule::kInterleaved1F1B && s.chunks != 1) {
    return Status::InvalidArgument("chunks > 1 needs the interleaved schedule");
  }
  // The task graph has ~4 tasks per micro-batch, stage and chunk; keep it in memory.
  const double tasks = 4.0 * s.pipeline_parallel * s.chunks * (s.global_batch / (s.data_parallel * s.micro_batch));
  if (tasks > 5e7) {
    return Status::InvalidArgument("too many micro-batches x stages to simulate (" + std::to_string(tasks) +
                                   " tasks); use a larger micro-batch");
  }
  if (!model.is_transformer && s.pipeline_parallel > 1) {
    // Zoo models are tiny; they are only simulated data parallel.
    return Status::InvalidArgument("model '" + model.name + "' supports data parallelism only");
  }
  return Status::Ok();
}

}  // namespace

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Result<Recompute> ParseRecompute(const std::string& text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "none") return Recompute::kNone;
  if (t == "selective") return Recompute::kSelective;
  if (t == "full") return Recompute::kFull;
  return Status::InvalidArgument("unknown recomputation '" + text + "' (expected none, selective or full)");
}

std::string ParallelStrategy::ToString() const {
  std::ostringstream out;
  out << "tp" << tensor_parallel << " pp" << pipeline_parallel << " dp" << data_parallel << " mb" << micro_batch << " "
      << ScheduleName(schedule);
  if (schedule == PipelineSchedule::kInterleaved1F1B) out << ":" << chunks;
  out << " " << RecomputeName(recompute);
  if (sequence_parallel) out << " sp";
  if (distributed_optimizer) out << " zero1";
  return out.str();
}

Simulator::Simulator(HardwareSpec hw, std::unique_ptr<OperatorCostModel> cost, std::unique_ptr<NetworkModel> network)
    : hw_(std::move(hw)), cost_(std::move(cost)), network_(std::move(network)) {
  if (!network_) network_ = CreateAnalyticNetworkModel(hw_);
}

namespace {

class PlanBuilder {
 public:
  PlanBuilder(const HardwareSpec& hw, const OperatorCostModel* cost, const NetworkModel& net)
      : hw_(hw), cost_(cost), net_(net) {}

  Result<Plan> Build(const ModelSpec& model, const ParallelStrategy& s) {
    FRUGAL_RETURN_IF_ERROR(CheckStrategy(model, s));
    if (cost_ == nullptr) {
      owned_cost_ = CreateRooflineCostModel(hw_, model.bytes_per_value <= 2);
      cost_ = owned_cost_.get();
    }
    Plan plan;
    plan.t = s.tensor_parallel;
    plan.p = s.pipeline_parallel;
    plan.d = s.data_parallel;
    plan.v = s.chunks;
    plan.m = static_cast<int>(s.global_batch / (s.data_parallel * s.micro_batch));
    WorkloadOptions wopt;
    wopt.tensor_parallel = s.tensor_parallel;
    wopt.micro_batch = s.micro_batch;
    wopt.sequence_parallel = s.sequence_parallel;
    wopt.fused_softmax_any_batch = s.fused_softmax_any_batch;
    FRUGAL_ASSIGN_OR_RETURN(plan.workload, BuildWorkload(model, wopt));
    const Workload& w = plan.workload;
    const int vstages = plan.p * plan.v;
    const int blocks = static_cast<int>(w.blocks.size());
    if (blocks % vstages != 0) {
      return Status::InvalidArgument(std::to_string(blocks) + " layers do not split evenly into " +
                                     std::to_string(plan.p) + " stages x " + std::to_string(plan.v) + " chunks");
    }
    FRUGAL_ASSIGN_OR_RETURN(plan.steps, BuildPipelineSchedule(s.schedule, plan.p, plan.m, plan.v));

    tp_group_.size = plan.t;
    tp_group_.local_size = std::min(plan.t, hw_.gpus_per_node);
    const int per_chunk = blocks / vstages;
    std::vector<BlockCost> block_costs(blocks);
    for (int i = 0; i < blocks; ++i) {
      // Decoder layers are identical: cost the first and reuse it.
      block_costs[i] = (w.is_transformer && i > 0) ? block_costs[0] : CostOf(w.blocks[i], s.recompute);
    }
    const BlockCost pre = CostOf(w.pre, Recompute::kNone);
    const BlockCost post = CostOf(w.post, Recompute::kNone);
    plan.chunks.resize(vstages);
    for (int vs = 0; vs < vstages; ++vs) {
      ChunkCost& c = plan.chunks[vs];
      auto add = [&c](const BlockCost& bc, const Block& blk, double act) {
        c.fwd += bc.Forward();
        c.bwd += bc.Backward();
        c.tp_comm += 2 * bc.tp_fwd + bc.recompute_tp;
        c.flops += bc.fwd_flops + bc.bwd_flops + bc.recompute_flops;
        c.model_flops += bc.fwd_flops + bc.bwd_flops;
        c.params += blk.params;
        c.activation += act;
      };
      if (vs == 0) add(pre, w.pre, w.pre.act_bytes_none);
      for (int i = vs * per_chunk; i < (vs + 1) * per_chunk; ++i) {
        add(block_costs[i], w.blocks[i], ActBytes(w.blocks[i], s.recompute));
        if (s.recompute == Recompute::kFull) c.working_set = std::max(c.working_set, w.blocks[i].act_bytes_none);
      }
      if (vs == vstages - 1) add(post, w.post, 0.0);
      if (vs < plan.p) c.fwd += hw_.efficiency.microbatch_overhead_us * 1e-6;
    }
    return plan;
  }

 private:
  BlockCost CostOf(const Block& blk, Recompute r) const {
    BlockCost bc;
    const double dispatch = hw_.efficiency.dispatch_us * 1e-6;
    for (const Operator& op : blk.ops) {
      if (op.kind == OpKind::kTensorParallelAllReduce) {
        const double ar = net_.AllReduceSeconds(op.comm_bytes, tp_group_, CollectiveAlgorithm::kAuto);
        bc.tp_fwd += ar;
        if (tp_group_.size > 1) {
          bc.fwd_dispatch += dispatch;
          bc.bwd_dispatch += dispatch;
        }
        if (r == Recompute::kFull) {
          bc.recompute_tp += ar;
          if (tp_group_.size > 1) bc.recompute_dispatch += dispatch;
        }
        continue;
      }
      bc.fwd_dispatch += dispatch;
      bc.bwd_dispatch += 2 * dispatch;
      const double f = cost_->Seconds(op, Pass::kForward);
      bc.fwd_compute += f;
      bc.bwd_compute += cost_->Seconds(op, Pass::kBackward);
      bc.fwd_flops += op.fwd_flops;
      bc.bwd_flops += op.bwd_flops;
      if (r == Recompute::kFull || (r == Recompute::kSelective && op.selective_recompute)) {
        bc.recompute += f;
        bc.recompute_flops += op.fwd_flops;
        bc.recompute_dispatch += dispatch;
      }
    }
    return bc;
  }

  const HardwareSpec& hw_;
  const OperatorCostModel* cost_;
  std::unique_ptr<OperatorCostModel> owned_cost_;  // Roofline when no model was given.
  const NetworkModel& net_;
  CommGroup tp_group_;
};

MemoryEstimate EstimateFromPlan(const Plan& plan, const ModelSpec& model, const ParallelStrategy& s,
                                const HardwareSpec& hw) {
  MemoryEstimate worst;
  const int bytes = model.bytes_per_value;
  for (int stage = 0; stage < plan.p; ++stage) {
    double params = 0, act_per_mb = 0, working = 0, post_act = 0;
    for (int c = 0; c < plan.v; ++c) {
      const int vs = c * plan.p + stage;
      params += plan.chunks[vs].params;
      act_per_mb = std::max(act_per_mb, plan.chunks[vs].activation);
      working = std::max(working, plan.chunks[vs].working_set);
      if (vs == plan.p * plan.v - 1) post_act = plan.workload.post.act_bytes_none;
    }
    MemoryEstimate e;
    e.max_in_flight = MaxInFlight(plan.steps[stage]);
    e.weights_bytes = params * bytes;
    e.gradients_bytes = params * bytes;
    e.optimizer_bytes = params * OptimizerStateBytes(model) / (s.distributed_optimizer ? plan.d : 1);
    // Note: the last stage runs each micro-batch's backward right after its
    // forward, so logits are live for one micro-batch only.
    e.activation_bytes = e.max_in_flight * act_per_mb + working + post_act;
    e.reserved_bytes = hw.efficiency.reserved_memory_gb * 1073741824.0;
    e.total_bytes = e.weights_bytes + e.gradients_bytes + e.optimizer_bytes + e.activation_bytes + e.reserved_bytes;
    e.capacity_bytes = hw.device.memory_gb * 1073741824.0;
    e.worst_stage = stage;
    if (stage == 0 || e.total_bytes > worst.total_bytes) worst = e;
  }
  return worst;
}

}  // namespace

Result<MemoryEstimate> Simulator::EstimateMemory(const ModelSpec& model, const ParallelStrategy& s) const {
  PlanBuilder builder(hw_, cost_.get(), *network_);
  FRUGAL_ASSIGN_OR_RETURN(Plan plan, builder.Build(model, s));
  return EstimateFromPlan(plan, model, s, hw_);
}

// Builds the plan, then the iteration's task graph
// (Note [Iteration task graph] in iteration_graph.cc), runs it and summarises
// the run.
Result<IterationPrediction> Simulator::Predict(const ModelSpec& model, const ParallelStrategy& s) const {
  PlanBuilder builder(hw_, cost_.get(), *network_);
  FRUGAL_ASSIGN_OR_RETURN(Plan plan, builder.Build(model, s));
  const IterationGraph iteration(plan, model, s, hw_, *network_);
  FRUGAL_ASSIGN_OR_RETURN(EngineResult run, RunTaskGraph(iteration.graph()));
  IterationPrediction out = iteration.Summarize(run);
  out.memory = EstimateFromPlan(plan, model, s, hw_);
  return out;
}

}  // namespace frugal::sim
