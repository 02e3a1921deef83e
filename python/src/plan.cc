// frugal._C.predict_frugal: the planner's prediction of Frugal's run
// (sim::PredictFrugalIteration, PredictFrugalMemory, HiddenLocalSteps) for a
// workload frugal.plan recorded from a user's module (Note [Recorded
// workloads] in src/sim/workload.cc). The job is built with the plan
// commands' defaults (sim::SetFrugalMode, compress's default wire), so the
// package and `frugal plan frugal` predict the same run.
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "frugal/compress/codec.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::python {

namespace {

// (name, kind, m, n, k, flops, bytes): kind "matmul", "conv" or "memory".
using RecordedOp = std::tuple<std::string, std::string, int64_t, int64_t, int64_t, double, double>;

sim::Operator ToOperator(const RecordedOp& r) {
  const auto& [name, kind, m, n, k, flops, bytes] = r;
  sim::Operator op;
  op.name = name;
  if (kind == "matmul") {
    op.kind = sim::OpKind::kMatmul;
  } else if (kind == "conv") {
    op.kind = sim::OpKind::kConv;
  } else if (kind == "memory") {
    op.kind = sim::OpKind::kMemoryBound;
  } else {
    throw py::value_error("operator '" + name + "': kind must be matmul, conv or memory, got '" + kind + "'");
  }
  if (m < 0 || n < 0 || k < 0 || !(flops >= 0) || !(bytes >= 0) || !std::isfinite(flops) || !std::isfinite(bytes)) {
    throw py::value_error("operator '" + name + "': sizes must be finite and >= 0");
  }
  op.m = m;
  op.n = n;
  op.k = k;
  op.fwd_flops = flops;
  op.fwd_bytes = bytes;
  return op;
}

void RequirePositive(double v, const char* what) {
  if (!(v > 0) || !std::isfinite(v)) throw py::value_error(std::string(what) + " must be a finite number > 0");
}

sim::HardwareSpec Hardware(const std::string& name) {
  Result<sim::HardwareSpec> hw = sim::LoadHardware(name);
  const bool path = name.find('/') != std::string::npos || name.size() > 5 && name.substr(name.size() - 5) == ".toml";
  if (!hw.ok() && hw.status().code() == Status::Code::kNotFound && !path) {
    throw py::value_error(hw.status().message());  // an unknown name is bad input, not a missing file
  }
  ThrowIfError(hw.status());
  return *hw;
}

py::list Parts(const std::vector<std::pair<std::string, double>>& parts) {
  py::list out;
  for (const auto& [name, bytes] : parts) out.append(py::make_tuple(name, bytes));
  return out;
}

sim::Workload Recorded(const std::vector<RecordedOp>& ops, double params, double act_bytes) {
  sim::Workload w;
  sim::Block blk;
  blk.name = "module";
  for (const RecordedOp& r : ops) blk.ops.push_back(ToOperator(r));
  blk.params = params;
  blk.act_bytes_none = blk.act_bytes_selective = blk.act_bytes_full = act_bytes;
  w.blocks.push_back(std::move(blk));
  w.total_params = params;
  return w;
}

// The prediction, the memory and the hidden local steps as a dict.
py::dict PredictionDict(const sim::FrugalJob& job, const sim::HardwareSpec& hw) {
  Result<sim::FrugalPrediction> p = sim::PredictFrugalIteration(job, hw);
  ThrowIfError(p.status());
  Result<sim::FrugalMemory> mem = sim::PredictFrugalMemory(job, hw);
  ThrowIfError(mem.status());
  py::dict d;
  d["hardware"] = hw.name;
  d["iteration_s"] = p->iteration_s;
  d["compute_s"] = p->gpu_s;
  d["copy_s"] = p->copy_s;
  d["sparsify_s"] = p->sparsify_s;
  d["exchange_s"] = p->exchange_s;
  d["optimizer_s"] = p->optimizer_s;
  d["combine_s"] = p->combine_s;
  d["sync_s"] = p->sync_s;
  d["cluster_average_s"] = p->cluster_average_s;
  d["samples_per_s"] = p->samples_per_s;
  d["bottleneck"] = p->bottleneck;
  d["local_steps"] = job.local_steps;
  d["local_fragments"] = job.local_fragments;
  d["density"] = job.density;
  d["bytes_per_value"] = job.bytes_per_selected;
  d["device_memory"] = Parts(mem->device);
  d["host_memory"] = Parts(mem->host);
  d["device_bytes"] = mem->device_bytes;
  d["device_capacity_bytes"] = mem->device_capacity_bytes;
  d["host_bytes"] = mem->host_bytes;
  d["host_node_bytes"] = mem->host_node_bytes;
  d["host_capacity_bytes"] = mem->host_capacity_bytes;
  d["device_oom"] = mem->device_oom();
  d["host_oom"] = mem->host_oom();
  if (job.local_steps > 0) {
    Result<int> hidden = sim::HiddenLocalSteps(job, hw);
    ThrowIfError(hidden.status());
    d["hidden_local_steps"] = *hidden;
  } else {
    d["hidden_local_steps"] = py::none();
  }
  return d;
}

py::dict Predict(const std::vector<RecordedOp>& ops, double params, double act_bytes, int64_t recorded_batch,
                 const std::string& hardware, const std::vector<int>& clusters, double intra_gbps, double inter_mbps,
                 int64_t batch_per_worker, double compute_s_per_sample, const std::string& sync, int local_steps,
                 int local_fragments, double density, int workers_per_host, double optimizer_state_bytes,
                 bool outer_momentum) {
  RequirePositive(params, "the parameter count");
  RequirePositive(intra_gbps, "intra_gbps");
  RequirePositive(inter_mbps, "link_mbps");
  if (!(act_bytes >= 0) || !std::isfinite(act_bytes)) throw py::value_error("activation bytes must be >= 0");
  if (recorded_batch < 1 || batch_per_worker < 1) throw py::value_error("batch sizes must be >= 1");
  if (!(compute_s_per_sample >= 0) || !std::isfinite(compute_s_per_sample)) {
    throw py::value_error("compute seconds per sample must be finite and >= 0");
  }
  if (clusters.empty()) throw py::value_error("sites must name at least one site's worker count");
  if (workers_per_host < 1) throw py::value_error("workers_per_host must be >= 1");
  auto recorded = std::make_shared<sim::Workload>(Recorded(ops, params, act_bytes));

  sim::FrugalJob job;
  job.model.name = "module";
  job.model.is_transformer = false;
  job.model.bytes_per_value = 4;
  job.model.recorded = recorded;
  job.model.recorded_batch = recorded_batch;
  job.batch_per_worker = batch_per_worker;
  job.clusters.clear();
  for (int w : clusters) {
    if (w < 1) throw py::value_error("every site needs at least one worker, got " + std::to_string(w));
    job.clusters.push_back(sim::ClusterSpec{w, intra_gbps});
  }
  job.inter_cluster_gbps = inter_mbps / 1000.0;
  ThrowIfError(sim::SetFrugalMode(&job, sync, local_steps, local_fragments, density));
  job.bytes_per_selected = compress::DefaultChunkBytesPerValue(job.density);
  job.merged_bytes_per_selected = compress::DefaultMergedBytesPerValue(job.density);
  job.compute_s_per_sample = compute_s_per_sample;
  job.workers_per_host = workers_per_host;
  job.optimizer_state_bytes = optimizer_state_bytes;
  job.outer_momentum = outer_momentum;
  return PredictionDict(job, Hardware(hardware));
}

}  // namespace

void BindPlan(py::module_& m) {
  m.def("predict_frugal", &Predict, py::arg("operators"), py::arg("params"), py::arg("activation_bytes"),
        py::arg("recorded_batch"), py::arg("hardware"), py::arg("clusters"), py::arg("intra_gbps"),
        py::arg("inter_mbps"), py::arg("batch_per_worker"), py::arg("compute_s_per_sample"), py::arg("sync"),
        py::arg("local_steps"), py::arg("local_fragments"), py::arg("density"), py::arg("workers_per_host"),
        py::arg("optimizer_state_bytes"), py::arg("outer_momentum"),
        "The planner's prediction for a recorded module (frugal.plan builds the arguments)");
}

}  // namespace frugal::python
