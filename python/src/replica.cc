// frugal._C.Replica and frugal._C.LocalSync: engine::Replica (one rank's
// model replica inside Frugal's pipeline) and engine::LocalSync (the local
// modes) for frugal.DistributedModel's sync strategies
// (python/frugal/_sync.py). Their options arrive as a frugal._C.RunOptions,
// whose keywords were validated at the edge (options.cc); below it the
// engine's own checks hold.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "local_binding.h"
#include "stats.h"
#include "options.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/cluster_average.h"
#include "frugal/engine/local_sync.h"
#include "frugal/engine/replica.h"
#include "frugal/engine/run_config.h"
#include "frugal/engine/sync_strategy.h"

namespace frugal::python {

namespace {

using engine::Replica;
using engine::ReplicaOptions;

ReplicaOptions ToEngine(const PyOptions& p, const std::string& device) {
  const double lr = p.config.train.lr;  // constant; DistributedModel.set_lr changes it through SetFrom
  return engine::MakeReplicaOptions(ToConfig(p, device), [lr](int64_t) { return lr; });
}

std::string DeviceOf(const std::vector<torch::Tensor>& params) {
  return params.empty() ? std::string("cpu") : params.front().device().str();
}

// The step pipeline's optimizer of each parameter from a torch optimizer's
// groups (DistributedModel reads them, frugal/_optim.py): `groups` holds each
// group's settings as keywords, validated like the run's; group_of[i] is
// parameter i's group. A group's lr is its share of the schedule's: the
// pipeline's lr (p's, the first group's) times the group's lr over it.
std::vector<optim::OptimizerSegment> ParameterOptimizers(const PyOptions& p,
                                                         const std::vector<PyOptions>& groups,
                                                         const std::vector<int>& group_of, size_t num_params,
                                                         const std::string& device) {
  if (groups.empty() && group_of.empty()) return {};
  if (group_of.size() != num_params) {
    throw py::value_error("group_of names " + std::to_string(group_of.size()) + " parameters, params has " +
                          std::to_string(num_params));
  }
  const double lr = p.config.train.lr;
  if (!(lr > 0)) throw py::value_error("with parameter groups the reference lr must be > 0");
  std::vector<optim::OptimizerSegment> per_group;
  for (const PyOptions& g : groups) {
    optim::OptimizerSegment seg;
    seg.options = engine::MakeOptimizerOptions(ToConfig(g, device).train);
    seg.lr_factor = g.config.train.lr / lr;
    per_group.push_back(seg);
  }
  std::vector<optim::OptimizerSegment> out;
  for (int g : group_of) {
    if (g < 0 || static_cast<size_t>(g) >= per_group.size()) {
      throw py::value_error("group_of holds " + std::to_string(g) + ", there are " + std::to_string(per_group.size()) +
                            " groups");
    }
    out.push_back(per_group[g]);
  }
  return out;
}

// broadcast_initial false: the state is restored next (an elastic
// generation's, Note [No broadcast on restore] in worker_elastic.cc).
std::unique_ptr<Replica> Create(World& world, std::vector<std::pair<std::string, torch::Tensor>> params,
                                const PyOptions& p, bool broadcast_initial,
                                const std::vector<PyOptions>& groups, const std::vector<int>& group_of) {
  const std::string device = params.empty() ? std::string("cpu") : params.front().second.device().str();
  ReplicaOptions options = ToEngine(p, device);
  options.broadcast_initial = broadcast_initial;
  options.parameter_optimizers = ParameterOptimizers(p, groups, group_of, params.size(), device);
  Result<std::unique_ptr<Replica>> replica = Status::Internal("not created");
  {
    ReleaseGil release;  // the initial broadcast waits for the peers
    replica = Replica::Create(options, std::move(params), world.transport_ptr());
  }
  ThrowIfError(replica.status());
  return std::move(*replica);
}

// The step mode's pipeline; a local mode's replica has none (its LocalSync
// steps and counts).
engine::GradientPipeline& PipelineOf(Replica& r) {
  if (r.pipeline() == nullptr) throw py::value_error("this Replica has no gradient pipeline (sync='local' or 'site')");
  return *r.pipeline();
}

// Runs `f` (returning a Status) without the GIL; LibTorch errors become
// RuntimeError.
template <typename F>
void NoGil(F&& f) {
  Status s;
  {
    ReleaseGil release;
    try {
      s = f();
    } catch (const c10::Error& e) {
      s = Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
    }
  }
  ThrowIfError(s);
}

torch::Tensor ToTensor(const std::vector<uint8_t>& bytes) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}

std::vector<uint8_t> FromTensor(const torch::Tensor& t, const char* what) {
  if (!t.defined() || t.scalar_type() != torch::kUInt8 || t.dim() != 1) {
    throw py::value_error(std::string(what) + " must be a 1-D uint8 tensor (from DistributedModel.state_dict())");
  }
  torch::Tensor c = t.to(torch::kCPU).contiguous();
  return std::vector<uint8_t>(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel());
}

// Host bytes by buffer, in the engine's order.
py::dict MemoryDict(const engine::HostMemory& m) {
  py::dict d;
  for (const auto& [name, bytes] : m) d[py::str(name)] = bytes;
  return d;
}

engine::StateScope ScopeOf(bool rank0_file) {
  return rank0_file ? engine::StateScope::kRank0File : engine::StateScope::kOwnFile;
}

// A checkpoint's sections from Python: rank 0's shared ones and this rank's
// own (None: not given).
struct PySections {
  PySections(const py::dict& shared_sections, const py::object& own_sections)
      : shared(FromPy(shared_sections)), has_own(!own_sections.is_none()) {
    if (has_own) own = FromPy(own_sections.cast<py::dict>());
  }
  const engine::CheckpointSections* mine() const { return has_own ? &own : nullptr; }

  engine::CheckpointSections shared, own;
  bool has_own;
};

// The sections that save(sections) fills, without the GIL, as a Python dict.
template <typename F>
py::dict SaveSections(F&& save) {
  engine::CheckpointSections sections;
  NoGil([&] { return save(&sections); });
  return ToPy(sections);
}

// caller_steps: the user's torch optimizer takes the inner steps
// (Note [Inner steps by the caller] in local_sync.cc); lr then tracks its
// first group's lr, for the outer annealing only.
std::unique_ptr<PyLocal> CreateLocal(World& world, Replica& replica, std::vector<torch::Tensor> params,
                                     const PyOptions& p, int64_t total_steps, bool caller_steps,
                                     bool broadcast_initial) {
  engine::RunConfig c = ToConfig(p, DeviceOf(params));
  if (!engine::IsLocalUpdates(c.distributed.sync)) throw py::value_error("LocalSync needs sync='local' or 'site'");
  std::vector<torch::Tensor> model_order = params;
  // The outer step: as frugal train's when the run's length is known, else
  // DiLoCo's Nesterov step (total_steps 0, a long run's choice).
  const engine::OuterStep outer = engine::OuterOf(c.distributed, total_steps);
  c.distributed.outer_lr = outer.lr;
  c.distributed.outer_momentum = outer.momentum;
  auto local = std::make_unique<PyLocal>();
  local->lr = std::make_shared<LrTrack>(p.config.train.lr);
  std::shared_ptr<LrTrack> lr = local->lr;
  Result<std::unique_ptr<engine::LocalSync>> sync = Status::Internal("not created");
  {
    ReleaseGil release;  // the initial broadcast waits for the peers
    sync = engine::LocalSync::Create(c, [lr](int64_t t) { return lr->At(t); }, replica.layout(), std::move(params),
                                     world.transport_ptr(), broadcast_initial,
                                     caller_steps ? engine::InnerSteps::kCaller : engine::InnerSteps::kOwn);
  }
  ThrowIfError(sync.status());
  local->sync = std::move(*sync);
  local->replica = &replica;
  local->transport = world.transport_ptr();
  local->outer = outer;
  local->site = c.distributed.sync == engine::SyncMode::kSite;
  if (c.distributed.sync == engine::SyncMode::kSite) {
    local->average = std::make_unique<engine::ClusterAverage>(world.transport_ptr(), std::move(model_order),
                                                              engine::TimeoutOf(c.distributed),
                                                              c.distributed.site_values);
  }
  return local;
}

// The local mode's state: whole (DistributedModel.state_dict) or as a
// checkpoint's sections (frugal.save, frugal.load).
void BindLocalState(py::class_<PyLocal>& local) {
  local
      .def("save_state", [](PyLocal& l) {
        engine::CheckpointSections sections;
        NoGil([&] { return l.sync->SaveSections(/*shared=*/true, &sections); });  // waits for rounds in flight
        return ToTensor(engine::EncodeCheckpoint(sections));
      }, "The mode's whole state (shared and this rank's own) as a uint8 tensor")
      .def("load_state", [](PyLocal& l, const torch::Tensor& state, bool own) {
        const std::string what = "_frugal.local";
        auto sections = engine::ParseCheckpoint(FromTensor(state, what.c_str()), what);
        ThrowIfError(sections.status());
        const std::vector<uint8_t>* mine = nullptr;
        if (own) {
          auto it = sections->find("local_sync_own");
          if (it == sections->end()) ThrowIfError(Status::Corruption(what + " has no 'local_sync_own' section"));
          mine = &it->second;
        }
        NoGil([&] { return l.sync->RestoreSections(*sections, mine, what); });
      }, py::arg("state"), py::arg("own") = true,
         "Restores save_state's tensor before the first begin_iteration; own=False starts this rank at the anchor "
         "with fresh inner state and no residual")
      .def("save_sections", [](PyLocal& l, bool rank0_file) {
        return SaveSections([&](engine::CheckpointSections* s) {
          return engine::SaveLocalState(*l.sync, *l.replica, l.outer, ScopeOf(rank0_file), s);
        });
      }, py::arg("rank0_file"), "This rank's state as a checkpoint's sections (engine::SaveLocalState, as frugal train's)")
      .def("restore_sections", [](PyLocal& l, const py::dict& shared, const py::object& mine, bool residuals,
                                  const std::string& what) {
        const PySections s(shared, mine);
        NoGil([&] {
          return engine::RestoreLocalState(*l.sync, *l.transport, s.shared, s.mine(), residuals,
                                           l.site ? engine::OwnPart::kKeepSameSeat : engine::OwnPart::kKeep, what);
        });
      }, py::arg("shared"), py::arg("mine"), py::arg("residuals"), py::arg("what"),
         "Restores rank 0's sections and this rank's own (engine::RestoreLocalState); before the first begin_iteration");
}

void BindLocal(py::module_& m) {
  py::class_<PyLocal> local(m, "LocalSync", "The local-update mode (engine::LocalSync) for DistributedModel(sync='local')");
  local.def(py::init(&CreateLocal), py::arg("world"), py::arg("replica"), py::arg("params"), py::arg("options"),
           py::arg("total_steps") = 0, py::arg("caller_steps") = false, py::arg("broadcast_initial") = true,
           py::keep_alive<1, 2>(),
           py::keep_alive<1, 3>())
      .def("begin_iteration",
           [](PyLocal& l, int64_t t, bool check) { NoGil([&] { return l.sync->BeginIteration(t, check); }); },
           py::arg("t"), py::arg("check_replicas") = false)
      .def("settle", [](PyLocal& l, int64_t t) { NoGil([&] { return l.sync->Settle(t); }); }, py::arg("t"),
           "Takes the outer steps due before iteration t, not t's round: a save then waits for no round at a sync "
           "point (Note [State at rest] in sync_strategy.h)")
      .def("average_gradients", [](PyLocal& l, int64_t t) {
        if (l.average) NoGil([&] { return l.average->Average(t); });
      }, py::arg("t"), "sync='site': replaces the gradients by their mean over this rank's cluster; else nothing")
      .def("end_backward", [](PyLocal& l, int64_t t) { NoGil([&] { return l.sync->EndBackward(t); }); },
           py::arg("t"))
      .def("finish", [](PyLocal& l, int64_t t) { NoGil([&] { return l.sync->Finish(t); }); }, py::arg("t"))
      .def("check_replicas", [](PyLocal& l, int64_t t) {
        uint64_t checksum = 0;
        NoGil([&] {
          auto c = l.sync->CheckReplicas(t);
          if (c.ok()) checksum = *c;
          return c.status();
        });
        return checksum;
      }, py::arg("t"))
      .def("on_anchor", [](PyLocal& l, const py::function& fn) {
        std::optional<py::error_already_set> error;  // this rank's parameters go back in first
        py::object result = l.sync->OnAnchor([&]() -> py::object {
          try {
            return fn();
          } catch (py::error_already_set& e) {
            error.emplace(std::move(e));
            return py::none();
          }
        });
        if (error) throw std::move(*error);
        return result;
      }, py::arg("fn"), "fn() with the synced parameters (the anchor) in the module; this rank's are put back after")
      .def("set_lr", [](PyLocal& l, int64_t t, double lr) { l.lr->Set(t, lr); }, py::arg("t"), py::arg("lr"))
      .def("pipeline_stats", [](PyLocal& l) { return l.sync->stats(); })
      .def_property_readonly("rounds", [](PyLocal& l) { return l.sync->rounds(); })
      .def_property_readonly("inner_on_device", [](PyLocal& l) { return l.sync->inner_on_device(); })
      .def("host_memory", [](PyLocal& l) { return MemoryDict(l.sync->host_memory()); })
      .def("stats", [](PyLocal& l) {
        py::dict d = StatsDict(l.sync->stats());
        d["rounds"] = l.sync->rounds();
        return d;
      });
  BindLocalState(local);
}

}  // namespace

void BindReplica(py::module_& m) {
  BindOptions(m);
  py::class_<engine::PipelineStats>(m, "PipelineStats",
                                    "A pipeline's cumulative counters (for frugal._C.RunReporter.close_window)");

  py::class_<Replica>(m, "Replica", "One rank's model replica inside Frugal's pipeline (engine::Replica)")
      .def(py::init(&Create), py::arg("world"), py::arg("params"), py::arg("options"),
           py::arg("broadcast_initial") = true, py::arg("groups") = std::vector<PyOptions>(),
           py::arg("group_of") = std::vector<int>(), py::keep_alive<1, 2>())
      .def("begin_iteration",
           [](Replica& r, int64_t t, bool check) { NoGil([&] { return r.BeginIteration(t, check); }); },
           py::arg("t"), py::arg("check_replicas") = false)
      .def("end_backward", [](Replica& r) { NoGil([&] { return r.EndBackward(); }); })
      .def("finish", [](Replica& r) { NoGil([&] { return r.Finish(); }); })
      .def("check_replicas", [](Replica& r, int64_t t) {
        uint64_t checksum = 0;
        NoGil([&] {
          auto c = r.CheckReplicas(t);
          if (c.ok()) checksum = *c;
          return c.status();
        });
        return checksum;
      }, py::arg("t"))
      .def("average_buffers", [](Replica& r, int64_t t, std::vector<torch::Tensor> buffers) {
        NoGil([&] { return r.AverageBuffers(t, buffers); });
      }, py::arg("t"), py::arg("buffers"))
      .def("set_from", [](Replica& r, int64_t t, double density, double lr_scale) {
        ThrowIfError(PipelineOf(r).SetFrom(t, density, lr_scale));
      }, py::arg("t"), py::arg("density"), py::arg("lr_scale"),
         "From iteration t on, sparsify at `density` and scale the learning rate by `lr_scale`")
      .def("save_state", [](Replica& r) {
        std::vector<uint8_t> pipeline;
        NoGil([&] {
          auto s = r.SavePipelineState();  // drains the pipeline
          if (s.ok()) pipeline = std::move(*s);
          return s.status();
        });
        return py::make_tuple(ToTensor(pipeline), ToTensor(r.SaveParameters()));
      }, "(pipeline state, parameters) as uint8 tensors; right after begin_iteration or finish")
      .def("load_state", [](Replica& r, const torch::Tensor& pipeline, const torch::Tensor& parameters,
                            bool residuals) {
        std::vector<uint8_t> p = FromTensor(pipeline, "_frugal.pipeline");
        std::vector<uint8_t> q = FromTensor(parameters, "_frugal.parameters");
        NoGil([&] { return r.LoadState(p, q, residuals); });
      }, py::arg("pipeline"), py::arg("parameters"), py::arg("residuals") = true,
         "Restores save_state's tensors; before the first begin_iteration")
      .def("save_sections", [](Replica& r, bool rank0_file) {
        return SaveSections([&](engine::CheckpointSections* s) {
          return engine::SaveStepState(r, ScopeOf(rank0_file), s);  // drains the pipeline
        });
      }, py::arg("rank0_file"), "This rank's state as a checkpoint's sections (engine::SaveStepState, as frugal train's)")
      .def("restore_sections", [](Replica& r, const py::dict& shared, const py::object& mine, bool residuals,
                                  const std::string& what) {
        const PySections s(shared, mine);
        NoGil([&] { return engine::RestoreStepState(r, s.shared, s.mine(), residuals, what); });
      }, py::arg("shared"), py::arg("mine"), py::arg("residuals"), py::arg("what"),
         "Restores rank 0's sections and this rank's own (engine::RestoreStepState); before the first begin_iteration")
      .def("pipeline_stats", [](Replica& r) { return PipelineOf(r).stats(); })
      .def_property_readonly("iteration", &Replica::iteration)
      .def_property_readonly("num_buckets", &Replica::num_buckets)
      .def_property_readonly("bucket_names", [](Replica& r) { return r.layout().bucket_names; })
      .def("stats", [](Replica& r) {
        return StatsDict(PipelineOf(r).stats());
      })
      .def("host_memory", [](Replica& r) { return MemoryDict(PipelineOf(r).host_memory()); });
  BindLocal(m);
}

}  // namespace frugal::python
