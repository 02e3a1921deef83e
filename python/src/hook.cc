// frugal._C.CompressedAllReduce: the engine of the DDP comm hook
// (frugal.sparse_hook). Takes DDP's flat bucket tensor, averages it over the
// world in place through engine::CompressedAllReduce.
#include "bindings.h"
#include "stats.h"
#include "frugal/engine/compressed_allreduce.h"
#include "frugal/engine/run_config.h"

namespace frugal::python {

namespace {

using engine::CompressedAllReduce;
using engine::CompressedAllReduceOptions;

std::unique_ptr<CompressedAllReduce> Create(World& world, double density, const std::string& sparsifier,
                                            const std::string& value_encoding, const std::string& exchange,
                                            double dgc_momentum, double timeout_s, uint64_t seed, uint32_t instance,
                                            bool deflate) {
  // Names and the wire format come from the run configuration's tables, as
  // for frugal train and DistributedModel.
  auto kind = ParseEnum<compress::SparsifierKind>(sparsifier);
  if (!kind) {
    throw py::value_error("sparsifier must be one of " + EnumChoices<compress::SparsifierKind>() + ", got '" +
                          sparsifier + "'");
  }
  auto values = ParseEnum<compress::ValueEncoding>(value_encoding);
  if (!values) throw py::value_error("value_encoding must be fp32, fp16, bf16, int8 or int4, got '" + value_encoding + "'");
  auto algorithm = ParseEnum<comm::ExchangeAlgorithm>(exchange);
  if (!algorithm) throw py::value_error("exchange must be auto, flat, hierarchical or sharded, got '" + exchange + "'");
  CompressedAllReduceOptions o;
  o.density = density;
  o.sparsifier = *kind;
  o.wire = engine::WireFormatOf(*kind, *values);
  o.wire.deflate = deflate;
  o.exchange.algorithm = *algorithm;
  if (!(timeout_s > 0)) throw py::value_error("timeout_s must be > 0");
  o.exchange.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  o.dgc_momentum = static_cast<float>(dgc_momentum);
  o.seed = seed;
  o.instance = instance;
  auto ar = CompressedAllReduce::Create(o, world.transport_ptr());
  ThrowIfError(ar.status());
  return std::move(*ar);
}

// Averages `bucket` in place. A CPU float32 contiguous tensor is worked on
// directly; anything else (a CUDA bucket, fp16) goes through a CPU float32
// copy and is copied back.
void Run(CompressedAllReduce& ar, uint64_t index, torch::Tensor bucket) {
  if (!bucket.defined()) throw py::value_error("the gradient bucket is undefined");
  if (!bucket.is_floating_point()) throw py::value_error("the gradient bucket is not floating point");
  torch::Tensor work = bucket;
  const bool direct = bucket.device().is_cpu() && bucket.scalar_type() == torch::kFloat32 && bucket.is_contiguous();
  Status s;
  {
    ReleaseGil release;
    try {
      if (!direct) work = bucket.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      s = ar.Run(index, Span<float>(work.data_ptr<float>(), static_cast<size_t>(work.numel())));
      if (s.ok() && !direct) bucket.copy_(work);
    } catch (const c10::Error& e) {
      s = Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
    }
  }
  ThrowIfError(s);
}

}  // namespace

void BindHook(py::module_& m) {
  py::class_<CompressedAllReduce>(m, "CompressedAllReduce",
                                  "Sparse, error-fed mean of gradient buckets over a Frugal world")
      .def(py::init(&Create), py::arg("world"), py::arg("density"), py::arg("sparsifier") = "block",
           py::arg("value_encoding") = "int4", py::arg("exchange") = "auto", py::arg("dgc_momentum") = 0.0,
           py::arg("timeout_s") = 60.0, py::arg("seed") = 1, py::arg("instance") = 0, py::arg("deflate") = true,
           py::keep_alive<1, 2>())
      .def("run", &Run, py::arg("index"), py::arg("bucket"),
           "Replaces `bucket` by its sparse, error-fed mean over the world")
      .def_property_readonly("rank", &CompressedAllReduce::rank)
      .def_property_readonly("world_size", &CompressedAllReduce::world_size)
      .def("stats", [](const CompressedAllReduce& ar) { return StatsDict(ar.stats()); });
}

}  // namespace frugal::python
