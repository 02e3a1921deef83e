// frugal._C.World: joining a world through the rendezvous (what `frugal
// worker` does), or a world of one without any network.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bindings.h"
#include "frugal/comm/algorithms/collectives.h"
#include "frugal/comm/transport/inproc_transport.h"
#include "frugal/common/allocator.h"
#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/transport/security.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::python {

namespace {

std::chrono::milliseconds Millis(double seconds) {
  if (!(seconds > 0)) throw py::value_error("timeout_s must be > 0, got " + std::to_string(seconds));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::unique_ptr<World> Single() {
  auto topo = comm::Topology::FromClusterNames({"local"});
  ThrowIfError(topo.status());
  comm::InProcHub hub(*topo);  // the transport keeps the hub's state alive
  auto transport = hub.CreateTransport(0);
  ThrowIfError(transport.status());
  return std::make_unique<World>(std::move(*transport));
}

// Registers with `rendezvous`; with serve_world > 0 this process first binds
// the rendezvous server at `serve_address` and serves it on a thread (the
// torchrun fallback: rank 0 is the coordinator).
std::unique_ptr<World> Join(const std::string& rendezvous, int rank, const std::string& cluster,
                            const std::string& listen, const std::string& advertise_host, double timeout_s,
                            int serve_world, const std::string& serve_address, const std::string& key_file,
                            const std::string& authorized_keys_file, bool insecure) {
  comm::JoinOptions jo;
  jo.rendezvous = rendezvous;
  jo.rank = rank;
  jo.cluster = cluster;
  jo.listen = listen;
  jo.advertise_host = advertise_host;
  jo.timeout = Millis(timeout_s);
  if (rendezvous.empty()) throw py::value_error("no coordinator address to join");
  if (cluster.empty()) throw py::value_error("the cluster name must not be empty");
  // The CLI's resolution and refusal (frugal worker --key ...): one message.
  auto security = comm::ResolveSecuritySettings(key_file, authorized_keys_file, insecure, rendezvous);
  ThrowIfError(security.status());
  jo.zmq.security = *security;
  // frugal run --link-grace-s (ZmqOptions::link_grace).
  if (const char* grace = std::getenv("FRUGAL_LINK_GRACE_S"); grace != nullptr && *grace != '\0') {
    char* end = nullptr;
    const double s = std::strtod(grace, &end);
    if (*end != '\0' || !(s >= 0 && s <= 86400)) {
      throw py::value_error(std::string("FRUGAL_LINK_GRACE_S must be seconds in [0, 86400], got '") + grace + "'");
    }
    jo.zmq.link_grace = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  std::unique_ptr<comm::RendezvousServer> server;
  if (serve_world > 0) {
    auto bound = comm::RendezvousServer::Bind(serve_address, serve_world, jo.zmq);
    ThrowIfError(bound.status().WithContext("serving the rendezvous at " + serve_address));
    server = std::move(*bound);
  }
  Result<std::unique_ptr<comm::Transport>> transport = Status::Internal("not joined");
  {
    ReleaseGil release;
    Status served;
    std::thread serving;
    if (server) serving = std::thread([&] { served = server->Serve(jo.timeout).status(); });
    transport = comm::JoinZmqWorld(jo);
    if (serving.joinable()) serving.join();
    if (transport.ok() && !served.ok()) transport = served;
  }
  ThrowIfError(transport.status().WithContext("joining " + rendezvous));
  return std::make_unique<World>(std::move(*transport));
}

// A user collective's tag: the engine's control kind for it
// (engine/control_kinds.h, kUserCollective), the call's sequence number in
// the iteration field, so it never meets a tag of the training's.
constexpr uint32_t kUserCollective = 13;

// The sum over the ranks of each rank's `values`, added in rank order so
// every rank gets the same bits.
std::vector<double> AllReduceSum(World& w, const std::vector<double>& values, double timeout_s) {
  const std::chrono::milliseconds timeout = Millis(timeout_s);
  const comm::Tag tag = engine::ControlTag(w.NextCollective(), kUserCollective);
  comm::Bytes mine(values.size() * sizeof(double));
  if (!values.empty()) std::memcpy(mine.data(), values.data(), mine.size());
  Result<std::vector<comm::Bytes>> all = Status::Internal("not run");
  {
    ReleaseGil release;
    all = comm::AllGather(w.transport(), tag, std::move(mine), timeout);
  }
  ThrowIfError(all.status().WithContext("frugal.all_reduce"));
  std::vector<double> sum(values.size(), 0.0);
  for (size_t r = 0; r < all->size(); ++r) {
    const comm::Bytes& b = (*all)[r];
    if (b.size() != values.size() * sizeof(double)) {
      throw py::value_error("frugal.all_reduce: rank " + std::to_string(r) + " passed " +
                            std::to_string(b.size() / sizeof(double)) + " values, this rank " +
                            std::to_string(values.size()) + " (every rank must pass as many)");
    }
    for (size_t i = 0; i < values.size(); ++i) {
      double v;
      std::memcpy(&v, b.data() + i * sizeof(double), sizeof(double));
      sum[i] += v;
    }
  }
  return sum;
}

void Barrier(World& w, double timeout_s) {
  const std::chrono::milliseconds timeout = Millis(timeout_s);
  const comm::Tag tag = engine::ControlTag(w.NextCollective(), kUserCollective);
  Status st;
  {
    ReleaseGil release;
    st = comm::Barrier(w.transport(), tag, timeout);
  }
  ThrowIfError(st.WithContext("frugal.barrier"));
}

}  // namespace

void BindWorld(py::module_& m) {
  py::class_<World>(m, "World", "One rank's membership of a Frugal world (its transport)")
      .def_property_readonly("rank", [](World& w) { return w.transport().rank(); })
      .def_property_readonly("world_size", [](World& w) { return w.transport().world_size(); })
      .def_property_readonly("cluster", [](World& w) { return w.transport().cluster(); })
      .def_property_readonly("generation", &World::generation,
                             "The membership generation of an elastic job's world (0: a fixed world)")
      .def("bytes_sent", [](World& w) {
        auto s = w.transport().stats();
        return s.intra_cluster.bytes_sent + s.inter_cluster.bytes_sent;
      }, "Payload bytes this rank has sent so far")
      .def("all_reduce_sum", &AllReduceSum, py::arg("values"), py::arg("timeout_s") = 60.0,
           "The sum over every rank of each rank's values (added in rank order: equal bits on every rank)")
      .def("barrier", &Barrier, py::arg("timeout_s") = 60.0, "Returns once every rank has called it")
      .def("__repr__", [](World& w) {
        return "<frugal.World rank " + std::to_string(w.transport().rank()) + " of " +
               std::to_string(w.transport().world_size()) + ", cluster " + w.transport().cluster() + ">";
      });
  m.def("retain_heap_between_steps", &RetainHeapBetweenSteps,
        "Keeps freed tensor memory in the process between steps (glibc); returns what was done, '' if nothing");
  m.def("curve_available", &comm::CurveAvailable,
        "Whether the linked libzmq has CurveZMQ (encrypted, key-authenticated sockets; docs/design/security.md)");
  m.def("single_world", &Single, "A world of one rank, without network");
  m.def("join_world", &Join, py::arg("rendezvous"), py::arg("rank") = -1, py::arg("cluster") = "local",
        py::arg("listen") = "tcp://127.0.0.1:*", py::arg("advertise_host") = "", py::arg("timeout_s") = 60.0,
        py::arg("serve_world") = 0, py::arg("serve_address") = "", py::arg("key_file") = "",
        py::arg("authorized_keys_file") = "", py::arg("insecure") = false,
        "Registers with the coordinator at `rendezvous` and connects to every peer");
}

}  // namespace frugal::python
