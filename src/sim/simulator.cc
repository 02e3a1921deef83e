#include "frugal/sim/simulator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "frugal/sim/event_engine.h"

namespace frugal::sim {
namespace {

enum Category { kForwardCat = 0, kBackwardCat = 1, kP2PCat = 2, kDpCat = 3, kOptimizerCat = 4 };

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
};

// Everything one model chunk (virtual pipeline stage) needs per micro-batch.
struct ChunkCost {
  double fwd = 0;        // Task duration of a forward (compute + TP comm).
  double bwd = 0;        // Task duration of a backward (incl. recomputation).
  double tp_comm = 0;    // TP all-reduce share of fwd + bwd.
  double flops = 0;      // Executed FLOPs per micro-batch.
  double model_flops = 0;
  double params = 0;
  double activation = 0;     // Saved activation bytes per micro-batch.
  double working_set = 0;    // Extra bytes while one block is recomputed.
};

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

// The per-strategy facts shared by memory estimation and simulation.
struct Plan {
  Workload workload;
  int t = 1, p = 1, d = 1, v = 1, m = 1;
  std::vector<ChunkCost> chunks;  // By virtual stage, chunk * p + stage.
  std::vector<std::vector<PipelineStep>> steps;
};

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
        c.fwd += bc.fwd_compute + bc.tp_fwd;
        c.bwd += bc.bwd_compute + bc.tp_fwd + bc.recompute + bc.recompute_tp;
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
    }
    return plan;
  }

 private:
  BlockCost CostOf(const Block& blk, Recompute r) const {
    BlockCost bc;
    for (const Operator& op : blk.ops) {
      if (op.kind == OpKind::kTensorParallelAllReduce) {
        const double ar = net_.AllReduceSeconds(op.comm_bytes, tp_group_, CollectiveAlgorithm::kRing);
        bc.tp_fwd += ar;
        if (r == Recompute::kFull) bc.recompute_tp += ar;
        continue;
      }
      const double f = cost_->Seconds(op, Pass::kForward);
      bc.fwd_compute += f;
      bc.bwd_compute += cost_->Seconds(op, Pass::kBackward);
      bc.fwd_flops += op.fwd_flops;
      bc.bwd_flops += op.bwd_flops;
      if (r == Recompute::kFull || (r == Recompute::kSelective && op.selective_recompute)) {
        bc.recompute += f;
        bc.recompute_flops += op.fwd_flops;
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

int OptimizerStateBytes(const ModelSpec& model) {
  // Mixed precision keeps fp32 master weights + Adam m and v (12 bytes);
  // fp32 training keeps m and v (8 bytes).
  return model.bytes_per_value <= 2 ? 12 : 8;
}

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

// Note [Iteration task graph]
// Streams: one compute stream per pipeline stage (this device stands for all
// its TP and DP peers, which run in lock-step), one forward and one backward
// point-to-point link per stage, and one data-parallel link per stage.
// Compute tasks are added to their stream in the schedule's order, so the
// stream runs them in that order. A forward of virtual stage vs waits for the
// send from vs-1; a backward waits for the send from vs+1 and its own forward.
// The last backward of each chunk is split into gradient buckets: bucket i's
// all-reduce waits for piece i (overlap_dp) or for the stage's last piece
// (no overlap). The optimizer step waits for all of the stage's all-reduces.
// Tensor-parallel all-reduces are serial with the kernels around them in
// Megatron, so they are folded into the compute task durations.
Result<IterationPrediction> Simulator::Predict(const ModelSpec& model, const ParallelStrategy& s) const {
  PlanBuilder builder(hw_, cost_.get(), *network_);
  FRUGAL_ASSIGN_OR_RETURN(Plan plan, builder.Build(model, s));
  const int p = plan.p, v = plan.v, m = plan.m, d = plan.d, t = plan.t;
  const int vstages = p * v;
  const int g = hw_.gpus_per_node;

  TaskGraph graph;
  std::vector<ResourceId> compute(p), send_fwd(p), send_bwd(p), dp_link(p);
  for (int st = 0; st < p; ++st) {
    compute[st] = graph.AddResource("stage" + std::to_string(st) + ".compute");
  }
  if (p > 1) {
    for (int st = 0; st < p; ++st) {
      send_fwd[st] = graph.AddResource("stage" + std::to_string(st) + ".send_fwd");
      send_bwd[st] = graph.AddResource("stage" + std::to_string(st) + ".send_bwd");
    }
  }
  if (d > 1) {
    for (int st = 0; st < p; ++st) dp_link[st] = graph.AddResource("stage" + std::to_string(st) + ".dp_allreduce");
  }

  // Gradient buckets per chunk.
  const double grad_bytes_per_param = model.bytes_per_value;
  const double bucket_bytes = std::max(1.0, s.bucket_mb * 1e6);
  std::vector<int> buckets(vstages, 1);
  for (int vs = 0; vs < vstages; ++vs) {
    const double bytes = plan.chunks[vs].params * grad_bytes_per_param;
    buckets[vs] = d > 1 ? std::clamp(static_cast<int>(std::ceil(bytes / bucket_bytes)), 1, 8) : 1;
  }

  const size_t slots = static_cast<size_t>(vstages) * m;
  std::vector<TaskId> fwd(slots, -1), bwd_first(slots, -1), bwd_last(slots, -1);
  std::vector<std::vector<TaskId>> final_pieces(vstages);
  auto slot = [m](int vs, int mb) { return static_cast<size_t>(vs) * m + mb; };

  // Pass 1: compute tasks in schedule order.
  for (int st = 0; st < p; ++st) {
    for (const PipelineStep& step : plan.steps[st]) {
      const int vs = step.chunk * p + st;
      const ChunkCost& c = plan.chunks[vs];
      const size_t k = slot(vs, step.microbatch);
      if (step.forward) {
        fwd[k] = graph.AddTask(compute[st], c.fwd, kForwardCat);
        continue;
      }
      const int pieces = step.microbatch == m - 1 ? buckets[vs] : 1;
      for (int i = 0; i < pieces; ++i) {
        const TaskId id = graph.AddTask(compute[st], c.bwd / pieces, kBackwardCat);
        if (i == 0) bwd_first[k] = id;
        bwd_last[k] = id;
        if (step.microbatch == m - 1) final_pieces[vs].push_back(id);
      }
    }
  }
  // Pass 2: dependencies and point-to-point sends in each sender's order.
  std::vector<double> p2p_seconds(p, 0.0);  // Boundary st -> st+1 (mod p).
  for (int st = 0; st < p; ++st) {
    const int next = (st + 1) % p;
    const int64_t stride = static_cast<int64_t>(t) * d;
    const bool inter = (st * stride) / g != (next * stride) / g;
    // Megatron's scatter-gather: each TP rank sends 1/t of the activation.
    p2p_seconds[st] = network_->PointToPointSeconds(plan.workload.boundary_bytes / t, inter);
  }
  for (int st = 0; st < p; ++st) {
    for (const PipelineStep& step : plan.steps[st]) {
      const int vs = step.chunk * p + st;
      const size_t k = slot(vs, step.microbatch);
      if (step.forward) {
        if (vs + 1 < vstages) {
          const TaskId send = graph.AddTask(send_fwd[st], p2p_seconds[st], kP2PCat);
          graph.AddDependency(fwd[k], send);
          graph.AddDependency(send, fwd[slot(vs + 1, step.microbatch)]);
        }
      } else {
        graph.AddDependency(fwd[k], bwd_first[k]);
        if (vs > 0) {
          const TaskId send = graph.AddTask(send_bwd[st], p2p_seconds[(st + p - 1) % p], kP2PCat);
          graph.AddDependency(bwd_last[k], send);
          graph.AddDependency(send, bwd_first[slot(vs - 1, step.microbatch)]);
        }
      }
    }
  }
  // Data-parallel all-reduce and the optimizer step.
  CommGroup dp_group;
  dp_group.size = d;
  dp_group.local_size = t >= g ? 1 : std::min(d, g / t);
  double dp_seconds_per_stage = 0;
  std::vector<TaskId> last_piece_of_stage(p, -1);
  for (int st = 0; st < p; ++st) {
    // Backward order on the stage decides which chunk finishes last.
    for (const PipelineStep& step : plan.steps[st]) {
      if (!step.forward && step.microbatch == m - 1) last_piece_of_stage[st] = final_pieces[step.chunk * p + st].back();
    }
  }
  std::vector<std::vector<TaskId>> stage_allreduces(p);
  for (int st = 0; st < p; ++st) {
    double stage_dp = 0;
    if (d > 1) {
      for (const PipelineStep& step : plan.steps[st]) {
        if (step.forward || step.microbatch != m - 1) continue;
        const int vs = step.chunk * p + st;
        const double bytes = plan.chunks[vs].params * grad_bytes_per_param / buckets[vs];
        const double secs = network_->AllReduceSeconds(bytes, dp_group, s.dp_algorithm);
        for (TaskId piece : final_pieces[vs]) {
          const TaskId ar = graph.AddTask(dp_link[st], secs, kDpCat);
          graph.AddDependency(s.overlap_dp ? piece : last_piece_of_stage[st], ar);
          stage_allreduces[st].push_back(ar);
          stage_dp += secs;
        }
      }
    }
    dp_seconds_per_stage = std::max(dp_seconds_per_stage, stage_dp);
  }
  const double opt_bytes_per_param = 2.0 * OptimizerStateBytes(model) + 2.0 * model.bytes_per_value;
  std::vector<TaskId> optimizer(p);
  for (int st = 0; st < p; ++st) {
    double params = 0;
    for (int c = 0; c < v; ++c) params += plan.chunks[c * p + st].params;
    if (s.distributed_optimizer) params /= d;
    const double secs = params * opt_bytes_per_param / (hw_.device.memory_bandwidth_gbs * 1e9 * hw_.efficiency.memory) +
                        hw_.efficiency.kernel_overhead_us * 1e-6;
    optimizer[st] = graph.AddTask(compute[st], secs, kOptimizerCat);
    graph.AddDependency(last_piece_of_stage[st], optimizer[st]);
    for (TaskId ar : stage_allreduces[st]) graph.AddDependency(ar, optimizer[st]);
  }

  FRUGAL_ASSIGN_OR_RETURN(EngineResult run, RunTaskGraph(graph));

  IterationPrediction out;
  out.iteration_s = run.makespan;
  out.events = run.events_processed;
  double pipeline_end = 0;
  for (int st = 0; st < p; ++st) pipeline_end = std::max(pipeline_end, run.tasks[last_piece_of_stage[st]].end);
  double bubble = 0;
  for (int st = 0; st < p; ++st) {
    const double busy = run.resource_busy[compute[st]] - (run.tasks[optimizer[st]].end - run.tasks[optimizer[st]].start);
    if (pipeline_end > 0) bubble += 1.0 - busy / pipeline_end;
    out.compute_s = std::max(out.compute_s, run.resource_busy[compute[st]]);
    if (d > 1) {
      out.dp_exposed_s = std::max(out.dp_exposed_s, run.tasks[optimizer[st]].start - run.tasks[last_piece_of_stage[st]].end);
    }
    double tp = 0;
    for (int c = 0; c < v; ++c) tp += plan.chunks[c * p + st].tp_comm * m;
    out.tp_comm_s = std::max(out.tp_comm_s, tp);
    if (p > 1) {
      out.pp_comm_s = std::max(out.pp_comm_s, std::max(run.resource_busy[send_fwd[st]], run.resource_busy[send_bwd[st]]));
    }
  }
  out.bubble_fraction = p > 1 ? bubble / p : 0.0;
  out.dp_comm_s = dp_seconds_per_stage;
  double flops = 0, model_flops = 0;
  for (const ChunkCost& c : plan.chunks) {
    flops += c.flops * m;
    model_flops += c.model_flops * m;
  }
  // Per-device FLOPs x devices per stage group (t x d), over all t p d GPUs.
  const double gpus = static_cast<double>(t) * p * d;
  out.achieved_tflops_per_gpu = flops * t * d / gpus / out.iteration_s / 1e12;
  out.model_tflops_per_gpu = model_flops * t * d / gpus / out.iteration_s / 1e12;
  out.memory = EstimateFromPlan(plan, model, s, hw_);
  for (size_t r = 0; r < graph.num_resources(); ++r) {
    out.resource_busy.emplace_back(graph.resource_name(static_cast<ResourceId>(r)), run.resource_busy[r]);
  }
  return out;
}

}  // namespace frugal::sim
