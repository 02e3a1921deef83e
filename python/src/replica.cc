// frugal._C.Replica: engine::Replica (one rank's model replica inside
// Frugal's pipeline) for frugal.DistributedModel. Options arrive as Python
// keyword arguments and are validated here, with the keyword names in the
// messages; below this edge the engine's own checks hold.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "bindings.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/engine/replica.h"
#include "frugal/engine/run_config.h"

namespace frugal::python {

namespace {

using engine::Replica;
using engine::ReplicaOptions;

struct PyReplicaOptions {
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double density = 0.03;
  std::string sparsifier = "block";
  std::string value_encoding = "int4";
  int staleness = 0;
  double bucket_mb = 4.0;
  int cpu_threads = 0;  // auto, as frugal train: resolved in Create from the parameters' device
  std::string exchange = "auto";
  double dgc_momentum = 0.0;
  bool overlap_device_copies = true;
  double timeout_s = 60.0;
  uint64_t seed = 1;
};

// The keywords are the run configuration's field names (engine/run_config.h):
// they are set and validated through its field list, so Python takes the
// same values, ranges and names as `frugal train`; messages name the
// keyword instead of the flag.
std::string KeywordMessage(std::string msg) {
  std::vector<std::pair<std::string, std::string>> names;  // flag, keyword
  engine::RunConfig probe;
  engine::VisitFields(probe, [&](const Field& f, const auto&) { names.emplace_back(f.Flag(), f.key); });
  // Longest first, so --lr-schedule is not read as --lr.
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [flag, key] : names) {
    for (size_t pos; (pos = msg.find(flag)) != std::string::npos;) msg.replace(pos, flag.size(), key);
  }
  return msg;
}

template <class T>
void Set(engine::RunConfig* c, const char* key, const T& value) {
  Status s = engine::SetOption(c, key, FieldToText(value));
  if (!s.ok()) throw py::value_error(KeywordMessage(s.message()));
}

// Workers of this host: frugal run and torchrun set LOCAL_WORLD_SIZE; 1 when
// neither started the process.
int LocalWorkers() {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  const int n = v == nullptr ? 1 : std::atoi(v);
  return n > 0 ? n : 1;
}

ReplicaOptions ToEngine(const PyReplicaOptions& p, const std::string& device) {
  engine::RunConfig c;
  c.train.device = device;
  Set(&c, "optimizer", p.optimizer);
  Set(&c, "lr", p.lr);
  Set(&c, "momentum", p.momentum);
  Set(&c, "dampening", p.dampening);
  Set(&c, "nesterov", p.nesterov);
  Set(&c, "weight_decay", p.weight_decay);
  Set(&c, "beta1", p.beta1);
  Set(&c, "beta2", p.beta2);
  Set(&c, "eps", p.eps);
  Set(&c, "density", p.density);
  Set(&c, "sparsifier", p.sparsifier);
  Set(&c, "value_encoding", p.value_encoding);
  Set(&c, "staleness", p.staleness);
  Set(&c, "bucket_mb", p.bucket_mb);
  Set(&c, "cpu_threads", p.cpu_threads);
  // 0 = auto, resolved as frugal train does (1-4 per worker on a GPU, from
  // the host's cores and its workers).
  if (p.cpu_threads == 0) c.distributed.cpu_threads = engine::ResolveCpuThreads(c, LocalWorkers());
  Set(&c, "exchange", p.exchange);
  Set(&c, "dgc_momentum", p.dgc_momentum);
  Set(&c, "overlap_device_copies", p.overlap_device_copies);
  Set(&c, "timeout_s", p.timeout_s);
  Set(&c, "seed", p.seed);
  if (Status s = engine::Validate(c); !s.ok()) throw py::value_error(KeywordMessage(s.message()));
  const double lr = p.lr;  // constant; DistributedModel.set_lr changes it through SetFrom
  return engine::MakeReplicaOptions(c, [lr](int64_t) { return lr; });
}

std::unique_ptr<Replica> Create(World& world, std::vector<std::pair<std::string, torch::Tensor>> params,
                                const PyReplicaOptions& p) {
  const std::string device = params.empty() ? std::string("cpu") : params.front().second.device().str();
  ReplicaOptions options = ToEngine(p, device);
  Result<std::unique_ptr<Replica>> replica = Status::Internal("not created");
  {
    ReleaseGil release;  // the initial broadcast waits for the peers
    replica = Replica::Create(options, std::move(params), world.transport_ptr());
  }
  ThrowIfError(replica.status());
  return std::move(*replica);
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

}  // namespace

void BindReplica(py::module_& m) {
  py::class_<PyReplicaOptions>(m, "ReplicaOptions")
      .def(py::init<>())
      .def_readwrite("optimizer", &PyReplicaOptions::optimizer)
      .def_readwrite("lr", &PyReplicaOptions::lr)
      .def_readwrite("momentum", &PyReplicaOptions::momentum)
      .def_readwrite("dampening", &PyReplicaOptions::dampening)
      .def_readwrite("nesterov", &PyReplicaOptions::nesterov)
      .def_readwrite("weight_decay", &PyReplicaOptions::weight_decay)
      .def_readwrite("beta1", &PyReplicaOptions::beta1)
      .def_readwrite("beta2", &PyReplicaOptions::beta2)
      .def_readwrite("eps", &PyReplicaOptions::eps)
      .def_readwrite("density", &PyReplicaOptions::density)
      .def_readwrite("sparsifier", &PyReplicaOptions::sparsifier)
      .def_readwrite("value_encoding", &PyReplicaOptions::value_encoding)
      .def_readwrite("staleness", &PyReplicaOptions::staleness)
      .def_readwrite("bucket_mb", &PyReplicaOptions::bucket_mb)
      .def_readwrite("cpu_threads", &PyReplicaOptions::cpu_threads)
      .def_readwrite("exchange", &PyReplicaOptions::exchange)
      .def_readwrite("dgc_momentum", &PyReplicaOptions::dgc_momentum)
      .def_readwrite("overlap_device_copies", &PyReplicaOptions::overlap_device_copies)
      .def_readwrite("timeout_s", &PyReplicaOptions::timeout_s)
      .def_readwrite("seed", &PyReplicaOptions::seed)
      .def("validate", [](const PyReplicaOptions& p) { ToEngine(p, "cpu"); }, "Raises ValueError on a bad option");

  py::class_<Replica>(m, "Replica", "One rank's model replica inside Frugal's pipeline (engine::Replica)")
      .def(py::init(&Create), py::arg("world"), py::arg("params"), py::arg("options"), py::keep_alive<1, 2>())
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
        ThrowIfError(r.pipeline().SetFrom(t, density, lr_scale));
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
      .def_property_readonly("iteration", &Replica::iteration)
      .def_property_readonly("num_buckets", &Replica::num_buckets)
      .def_property_readonly("bucket_names", [](Replica& r) { return r.layout().bucket_names; })
      .def("stats", [](Replica& r) {
        auto s = r.pipeline().stats();
        py::dict d;
        d["sparsify_s"] = s.sparsify_s;
        d["exchange_s"] = s.exchange_s;
        d["optimizer_s"] = s.optimizer_s;
        d["wait_s"] = s.wait_s;
        d["tasks"] = s.tasks;
        d["sent_values"] = s.sent_values;
        d["total_values"] = s.total_values;
        d["merged_values"] = s.merged_values;
        return d;
      });
}

}  // namespace frugal::python
