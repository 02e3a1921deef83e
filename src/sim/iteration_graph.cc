#include "iteration_graph.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace frugal::sim::internal {
namespace {

enum Category { kForwardCat = 0, kBackwardCat = 1, kP2PCat = 2, kDpCat = 3, kOptimizerCat = 4 };

}  // namespace

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

void IterationGraph::AddStreams() {
  const int p = plan_.p;
  compute_.assign(p, 0);
  send_fwd_.assign(p, 0);
  send_bwd_.assign(p, 0);
  dp_link_.assign(p, 0);
  for (int st = 0; st < p; ++st) {
    compute_[st] = graph_.AddResource("stage" + std::to_string(st) + ".compute");
  }
  if (p > 1) {
    for (int st = 0; st < p; ++st) {
      send_fwd_[st] = graph_.AddResource("stage" + std::to_string(st) + ".send_fwd");
      send_bwd_[st] = graph_.AddResource("stage" + std::to_string(st) + ".send_bwd");
    }
  }
  if (plan_.d > 1) {
    for (int st = 0; st < p; ++st) dp_link_[st] = graph_.AddResource("stage" + std::to_string(st) + ".dp_allreduce");
  }
}

void IterationGraph::SplitGradientBuckets() {
  const int vstages = plan_.p * plan_.v;
  const double bucket_bytes = std::max(1.0, s_.bucket_mb * 1e6);
  buckets_.assign(vstages, 1);
  for (int vs = 0; vs < vstages; ++vs) {
    const double bytes = plan_.chunks[vs].params * model_.bytes_per_value;
    buckets_[vs] = plan_.d > 1 ? std::clamp(static_cast<int>(std::ceil(bytes / bucket_bytes)), 1, 8) : 1;
  }
}

// Compute tasks in schedule order; the last micro-batch's backward in
// pieces, one per gradient bucket.
void IterationGraph::AddComputeTasks() {
  const int p = plan_.p, m = plan_.m;
  const size_t slots = static_cast<size_t>(p * plan_.v) * m;
  fwd_.assign(slots, -1);
  bwd_first_.assign(slots, -1);
  bwd_last_.assign(slots, -1);
  final_pieces_.assign(p * plan_.v, {});
  for (int st = 0; st < p; ++st) {
    for (const PipelineStep& step : plan_.steps[st]) {
      const int vs = step.chunk * p + st;
      const ChunkCost& c = plan_.chunks[vs];
      const size_t k = Slot(vs, step.microbatch);
      if (step.forward) {
        fwd_[k] = graph_.AddTask(compute_[st], c.fwd, kForwardCat);
        continue;
      }
      const int pieces = step.microbatch == m - 1 ? buckets_[vs] : 1;
      for (int i = 0; i < pieces; ++i) {
        const TaskId id = graph_.AddTask(compute_[st], c.bwd / pieces, kBackwardCat);
        if (i == 0) bwd_first_[k] = id;
        bwd_last_[k] = id;
        if (step.microbatch == m - 1) final_pieces_[vs].push_back(id);
      }
    }
  }
}

// Dependencies between compute tasks, and the point-to-point sends between
// stages in each sender's order.
void IterationGraph::AddPointToPointSends() {
  const int p = plan_.p, t = plan_.t, vstages = plan_.p * plan_.v;
  const int g = hw_.gpus_per_node;
  std::vector<double> p2p_seconds(p, 0.0);  // Boundary st -> st+1 (mod p).
  for (int st = 0; st < p; ++st) {
    const int next = (st + 1) % p;
    const int64_t stride = static_cast<int64_t>(t) * plan_.d;
    const bool inter = (st * stride) / g != (next * stride) / g;
    // Megatron's scatter-gather: each TP rank sends 1/t of the activation.
    p2p_seconds[st] = net_.PointToPointSeconds(plan_.workload.boundary_bytes / t, inter);
  }
  for (int st = 0; st < p; ++st) {
    for (const PipelineStep& step : plan_.steps[st]) {
      const int vs = step.chunk * p + st;
      const size_t k = Slot(vs, step.microbatch);
      if (step.forward) {
        if (vs + 1 < vstages) {
          const TaskId send = graph_.AddTask(send_fwd_[st], p2p_seconds[st], kP2PCat);
          graph_.AddDependency(fwd_[k], send);
          graph_.AddDependency(send, fwd_[Slot(vs + 1, step.microbatch)]);
        }
      } else {
        graph_.AddDependency(fwd_[k], bwd_first_[k]);
        if (vs > 0) {
          const TaskId send = graph_.AddTask(send_bwd_[st], p2p_seconds[(st + p - 1) % p], kP2PCat);
          graph_.AddDependency(bwd_last_[k], send);
          graph_.AddDependency(send, bwd_first_[Slot(vs - 1, step.microbatch)]);
        }
      }
    }
  }
}

// One data-parallel all-reduce per gradient bucket, after its backward
// piece (overlap_dp) or after the stage's last piece.
void IterationGraph::AddDataParallelAllReduces() {
  const int p = plan_.p, m = plan_.m, d = plan_.d, t = plan_.t;
  const int g = hw_.gpus_per_node;
  CommGroup dp_group;
  dp_group.size = d;
  dp_group.local_size = t >= g ? 1 : std::min(d, g / t);
  last_piece_of_stage_.assign(p, -1);
  for (int st = 0; st < p; ++st) {
    // Backward order on the stage decides which chunk finishes last.
    for (const PipelineStep& step : plan_.steps[st]) {
      if (!step.forward && step.microbatch == m - 1) last_piece_of_stage_[st] = final_pieces_[step.chunk * p + st].back();
    }
  }
  stage_allreduces_.assign(p, {});
  for (int st = 0; st < p; ++st) {
    double stage_dp = 0;
    if (d > 1) {
      for (const PipelineStep& step : plan_.steps[st]) {
        if (step.forward || step.microbatch != m - 1) continue;
        const int vs = step.chunk * p + st;
        const double bytes = plan_.chunks[vs].params * static_cast<double>(model_.bytes_per_value) / buckets_[vs];
        const double secs = net_.AllReduceSeconds(bytes, dp_group, s_.dp_algorithm);
        for (TaskId piece : final_pieces_[vs]) {
          const TaskId ar = graph_.AddTask(dp_link_[st], secs, kDpCat);
          graph_.AddDependency(s_.overlap_dp ? piece : last_piece_of_stage_[st], ar);
          stage_allreduces_[st].push_back(ar);
          stage_dp += secs;
        }
      }
    }
    dp_seconds_per_stage_ = std::max(dp_seconds_per_stage_, stage_dp);
  }
}

// The optimizer step of each stage: memory-bound over its (sharded)
// parameters, after the stage's backward and all-reduces.
void IterationGraph::AddOptimizerSteps() {
  const int p = plan_.p;
  const double opt_bytes_per_param = 2.0 * OptimizerStateBytes(model_) + 2.0 * model_.bytes_per_value;
  optimizer_.assign(p, 0);
  for (int st = 0; st < p; ++st) {
    double params = 0;
    for (int c = 0; c < plan_.v; ++c) params += plan_.chunks[c * p + st].params;
    if (s_.distributed_optimizer) params /= plan_.d;
    const double secs = params * opt_bytes_per_param / (hw_.device.memory_bandwidth_gbs * 1e9 * hw_.efficiency.memory) +
                        hw_.efficiency.kernel_overhead_us * 1e-6 + hw_.efficiency.iteration_overhead_us * 1e-6;
    optimizer_[st] = graph_.AddTask(compute_[st], secs, kOptimizerCat);
    graph_.AddDependency(last_piece_of_stage_[st], optimizer_[st]);
    for (TaskId ar : stage_allreduces_[st]) graph_.AddDependency(ar, optimizer_[st]);
  }
}

IterationPrediction IterationGraph::Summarize(const EngineResult& run) const {
  const int p = plan_.p, v = plan_.v, m = plan_.m, d = plan_.d, t = plan_.t;
  IterationPrediction out;
  out.iteration_s = run.makespan;
  out.events = run.events_processed;
  double pipeline_end = 0;
  for (int st = 0; st < p; ++st) pipeline_end = std::max(pipeline_end, run.tasks[last_piece_of_stage_[st]].end);
  double bubble = 0;
  for (int st = 0; st < p; ++st) {
    const TaskTiming& opt = run.tasks[optimizer_[st]];
    const double busy = run.resource_busy[compute_[st]] - (opt.end - opt.start);
    if (pipeline_end > 0) bubble += 1.0 - busy / pipeline_end;
    out.compute_s = std::max(out.compute_s, run.resource_busy[compute_[st]]);
    if (d > 1) out.dp_exposed_s = std::max(out.dp_exposed_s, opt.start - run.tasks[last_piece_of_stage_[st]].end);
    double tp = 0;
    for (int c = 0; c < v; ++c) tp += plan_.chunks[c * p + st].tp_comm * m;
    out.tp_comm_s = std::max(out.tp_comm_s, tp);
    if (p > 1) {
      out.pp_comm_s = std::max(out.pp_comm_s, std::max(run.resource_busy[send_fwd_[st]], run.resource_busy[send_bwd_[st]]));
    }
  }
  out.bubble_fraction = p > 1 ? bubble / p : 0.0;
  out.dp_comm_s = dp_seconds_per_stage_;
  double flops = 0, model_flops = 0;
  for (const ChunkCost& c : plan_.chunks) {
    flops += c.flops * m;
    model_flops += c.model_flops * m;
  }
  // Per-device FLOPs x devices per stage group (t x d), over all t p d GPUs.
  const double gpus = static_cast<double>(t) * p * d;
  out.achieved_tflops_per_gpu = flops * t * d / gpus / out.iteration_s / 1e12;
  out.model_tflops_per_gpu = model_flops * t * d / gpus / out.iteration_s / 1e12;
  for (size_t r = 0; r < graph_.num_resources(); ++r) {
    out.resource_busy.emplace_back(graph_.resource_name(static_cast<ResourceId>(r)), run.resource_busy[r]);
  }
  return out;
}

}  // namespace frugal::sim::internal
