// frugal._C.ElasticSession: engine::ElasticSession (the generation protocol
// of an elastic job, frugal/engine/elastic_session.h) for a user's script
// under `frugal run --elastic`. frugal.init() registers through it;
// frugal.DistributedModel snapshots its engine state (the local modes'
// LocalSync, the step mode's Replica) at the check gates and, on a change,
// rebuilds its replica on the next generation's World and restores the
// state this session hands it. The state is saved and restored with the
// engine's own sections (SaveLocalState / RestoreLocalState, SaveStepState
// / RestoreStepState, as frugal train's workers); the script's own objects
// (its torch optimizer and scheduler) travel as extra sections "user.*".
#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>

#include "bindings.h"
#include "local_binding.h"
#include "frugal/comm/membership/membership.h"
#include "frugal/comm/transport/security.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/elastic_session.h"
#include "frugal/engine/sync_strategy.h"

namespace frugal::python {

namespace {

constexpr const char kUserPrefix[] = "user.";
// The script's sections that are the rank's own, never sent to a joiner
// (Note [A joiner's own optimizer] in _model.py).
constexpr const char kOwnUserPrefix[] = "user.own.";

std::chrono::milliseconds Millis(double seconds, const char* what) {
  if (!(seconds > 0)) throw py::value_error(std::string(what) + " must be > 0, got " + std::to_string(seconds));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct PyElastic {
  std::shared_ptr<engine::ElasticSession> session;
};

// Note [Freed memory kept for the next world]: a switch drops the old
// world's engine and builds the next one's, the same buffers again (the
// anchor, the outer state, the residuals: about 0.5 GB for the 25 M language
// model). glibc serves allocations over 32 MB with mmap and returns them to
// the kernel when freed, so the new engine's buffers were fresh pages, and
// where the kernel runs under a hypervisor that takes freed pages back (the
// benchmarks' 2-core virtual machine) a fresh page costs far more than the
// copy into it: the restore into a new engine took 1.8 s. An elastic worker
// therefore has glibc serve every allocation from its heap and never trim
// it, so the next world's engine reuses the pages of the last one. What the
// process holds stays at its peak, which the snapshots' pooled buffers hold
// anyway; FRUGAL_KEEP_FREED_MEMORY=0 turns it off.
void KeepFreedMemory() {
  static const bool once = [] {
    const char* off = std::getenv("FRUGAL_KEEP_FREED_MEMORY");
    if (off != nullptr && std::string(off) == "0") return false;
#ifdef __GLIBC__  // other C libraries keep their own policy
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
    return true;
  }();
  (void)once;
}

std::unique_ptr<PyElastic> Create(const std::string& coordinator, const std::string& cluster,
                                  const std::string& listen, const std::string& advertise_host, bool join,
                                  int max_world, double timeout_s, double heartbeat_timeout_s, double link_grace_s,
                                  const std::string& key_file, const std::string& authorized_keys_file,
                                  bool insecure) {
  if (coordinator.empty()) throw py::value_error("no coordinator address to join");
  if (cluster.empty()) throw py::value_error("the cluster name must not be empty");
  if (!(link_grace_s >= 0 && link_grace_s <= 86400)) {
    throw py::value_error("link_grace_s must be in [0, 86400], got " + std::to_string(link_grace_s));
  }
  comm::MembershipClientOptions mo;
  mo.server = coordinator;
  mo.cluster = cluster;
  mo.listen = listen;
  mo.advertise_host = advertise_host;
  mo.join = join;
  if (max_world < 0) throw py::value_error("max_world must be >= 0, got " + std::to_string(max_world));
  mo.max_world = max_world;
  mo.timeout = Millis(timeout_s, "timeout_s");
  auto security = comm::ResolveSecuritySettings(key_file, authorized_keys_file, insecure, coordinator);
  ThrowIfError(security.status());
  mo.zmq.security = *security;
  mo.zmq.link_grace = std::chrono::milliseconds(static_cast<int64_t>(link_grace_s * 1000));
  // As frugal worker --elastic: a killed peer is noticed within a second.
  mo.zmq.linger = std::chrono::milliseconds(1000);
  KeepFreedMemory();
  auto client = comm::MembershipClient::Create(mo);
  ThrowIfError(client.status());
  auto out = std::make_unique<PyElastic>();
  out->session = std::make_shared<engine::ElasticSession>(std::move(*client), mo.timeout,
                                                          Millis(heartbeat_timeout_s, "heartbeat_timeout_s"));
  return out;
}

// The World of the generation just registered; it tells the session when it
// is destroyed, so that a heartbeat never aborts a freed transport.
std::unique_ptr<World> WorldOf(PyElastic& e, std::unique_ptr<comm::Transport> transport) {
  std::weak_ptr<engine::ElasticSession> weak = e.session;
  comm::Transport* raw = transport.get();
  e.session->Enter(raw);
  return std::make_unique<World>(
      std::move(transport),
      [weak, raw] {
        if (auto s = weak.lock()) s->Forget(raw);
      },
      e.session->generation().number);
}

std::unique_ptr<World> Register(PyElastic& e) {
  std::unique_ptr<comm::Transport> transport;
  Result<comm::Generation> g = Status::Internal("not registered");
  {
    ReleaseGil release;
    g = e.session->Register(&transport);
  }
  ThrowIfError(g.status().WithContext("registering with the elastic coordinator"));
  return WorldOf(e, std::move(transport));
}

// The next generation's World, or None when this worker leaves the job.
py::object Next(PyElastic& e) {
  std::unique_ptr<comm::Transport> transport;
  Result<comm::Generation> g = Status::Internal("not registered");
  {
    ReleaseGil release;
    g = e.session->Next(&transport);
  }
  if (!g.ok() && g.status().code() == Status::Code::kNotFound) return py::none();
  ThrowIfError(g.status().WithContext("registering for the next generation"));
  return py::cast(WorldOf(e, std::move(transport)));
}

// What an elastic script snapshots and restores: the engine state of its
// mode, as a frugal train worker's strategy saves it, restores it and
// prepares it for joiners.
struct EngineState {
  const comm::Transport* transport = nullptr;
  std::function<Status(engine::CheckpointSections*)> save;
  std::function<Status(const engine::CheckpointSections& shared, const engine::CheckpointSections* mine,
                       const std::string& what)>
      restore;
  std::function<void(engine::CheckpointSections*, std::set<std::string>*)> prepare_joiners;
};

// The local modes; sync='site' restarts every rank's round at the anchor
// (Note [Elastic site replicas] in sync_strategy.cc).
EngineState StateOf(PyLocal& l) {
  EngineState s;
  s.transport = l.transport;
  s.save = [&l](engine::CheckpointSections* out) {
    return engine::SaveLocalState(*l.sync, *l.replica, l.outer, engine::StateScope::kSnapshot, out);
  };
  s.restore = [&l](const engine::CheckpointSections& shared, const engine::CheckpointSections* mine,
                   const std::string& what) {
    return engine::RestoreLocalState(*l.sync, *l.transport, shared, mine, /*residuals=*/false,
                                     l.site ? engine::OwnPart::kDrop : engine::OwnPart::kKeep, what);
  };
  s.prepare_joiners = [](engine::CheckpointSections*, std::set<std::string>* skip) {
    engine::SkipLocalStateForJoiners(skip);
  };
  return s;
}

// The step mode: the pipeline's shared and own parts and the parameters.
EngineState StateOf(engine::Replica& r) {
  EngineState s;
  s.transport = &r.transport();
  s.save = [&r](engine::CheckpointSections* out) {
    return engine::SaveStepState(r, engine::StateScope::kSnapshot, out);
  };
  s.restore = [&r](const engine::CheckpointSections& shared, const engine::CheckpointSections* mine,
                   const std::string& what) {
    return engine::RestoreStepState(r, shared, mine, /*residuals=*/false, what);
  };
  s.prepare_joiners = [&r](engine::CheckpointSections* snapshot, std::set<std::string>* skip) {
    engine::PrepareStepStateForJoiners(r, snapshot, skip);
  };
  return s;
}

// The run state after t-1 at the gate of t: the mode's sections (as a
// frugal train worker's snapshot), "meta", the module's buffers and the
// script's sections.
void Snapshot(PyElastic& e, const EngineState& state, int64_t t, const std::vector<torch::Tensor>& buffers,
              const py::dict& user) {
  e.session->MakeRoomForSnapshot();  // before the sections take their buffers
  engine::CheckpointSections sections = FromPy(user);
  engine::CheckpointSections named;
  for (auto& [name, bytes] : sections) named[kUserPrefix + name] = std::move(bytes);
  Status st;
  {
    ReleaseGil release;
    st = state.save(&named);
    if (st.ok()) {
      engine::CheckpointMeta meta;
      meta.step = t;
      meta.world = state.transport->world_size();
      meta.rank = state.transport->rank();
      meta.generation = e.session->generation().number;
      named["meta"] = engine::EncodeCheckpointMeta(meta);
      named["buffers"] = engine::SaveBuffers(buffers);
      e.session->TakeSnapshot(t, std::move(named));
    }
  }
  ThrowIfError(st.WithContext("snapshot of step " + std::to_string(t)));
}

std::string Check(PyElastic& e, World& w, int64_t t) {
  Result<engine::GateDecision> d = Status::Internal("not checked");
  {
    ReleaseGil release;
    d = e.session->Check(w.transport(), t);
  }
  ThrowIfError(d.status());
  switch (*d) {
    case engine::GateDecision::kSwitch: return "switch";
    case engine::GateDecision::kStop: return "stop";
    default: return "continue";
  }
}

// Restores the generation's restore point into an engine state built
// without the initial broadcast and into the module's buffers; rank 0 then
// sends it to the joiners. Returns (step, the script's sections of the
// restored state as read-only memoryviews, bytes sent to each joiner).
py::tuple Restore(PyElastic& e, World& w, const EngineState& state, const std::vector<torch::Tensor>& buffers,
                  bool user_state) {
  Status st;
  engine::RestorePoint point;
  int64_t sent = 0;
  std::vector<std::pair<std::string, const std::vector<uint8_t>*>> user;
  {
    ReleaseGil release;
    st = [&]() -> Status {
      FRUGAL_ASSIGN_OR_RETURN(point, e.session->StateToRestore(w.transport()));
      const std::string what = point.joined ? "the state of step " + std::to_string(point.step) + " from rank 0"
                                            : "the snapshot of step " + std::to_string(point.step);
      for (const char* name : {"meta", "buffers"}) {
        if (!point.shared->count(name)) return Status::Corruption(what + " has no '" + name + "' section");
      }
      FRUGAL_RETURN_IF_ERROR(state.restore(*point.shared, point.mine, what));
      FRUGAL_RETURN_IF_ERROR(engine::RestoreBuffers(point.shared->at("buffers"), buffers, what));
      const size_t n = sizeof(kUserPrefix) - 1;
      for (const auto& [name, bytes] : *point.shared) {
        if (user_state && name.compare(0, n, kUserPrefix) == 0) user.emplace_back(name.substr(n), &bytes);
      }
      auto prepare = [&state](engine::CheckpointSections* snapshot, std::set<std::string>* skip) {
        if (state.prepare_joiners) state.prepare_joiners(snapshot, skip);
        for (const auto& [name, bytes] : *snapshot) {
          if (name.compare(0, sizeof(kOwnUserPrefix) - 1, kOwnUserPrefix) == 0) skip->insert(name);
        }
      };
      FRUGAL_ASSIGN_OR_RETURN(sent, e.session->SendToJoiners(w.transport(), prepare));
      return Status::Ok();
    }();
  }
  ThrowIfError(st);
  // Views of the restored snapshot's sections, not copies (Note [Switching
  // in place] in _model.py): valid until the next snapshot or restore, and
  // read at once by the caller.
  py::dict views;
  for (const auto& [name, bytes] : user) {
    views[py::str(name)] = py::memoryview::from_memory(static_cast<const void*>(bytes->data()),
                                                         static_cast<ssize_t>(bytes->size()));
  }
  return py::make_tuple(point.step, views, sent);
}

}  // namespace

void BindElastic(py::module_& m) {
  py::class_<PyElastic>(m, "ElasticSession",
                        "One worker's membership of an elastic job (engine::ElasticSession), for frugal run --elastic")
      .def(py::init(&Create), py::arg("coordinator"), py::arg("cluster") = "local",
           py::arg("listen") = "tcp://127.0.0.1:*", py::arg("advertise_host") = "", py::arg("join") = false, py::arg("max_world") = 0,
           py::arg("timeout_s") = 60.0, py::arg("heartbeat_timeout_s") = 2.0, py::arg("link_grace_s") = 30.0,
           py::arg("key_file") = "", py::arg("authorized_keys_file") = "", py::arg("insecure") = false)
      .def("register", &Register, "Registers for the first generation (or joins a running job); returns its World")
      .def("next", &Next, "The next generation's World, or None when this worker leaves the job")
      .def("leave_world", [](PyElastic& e, bool abort) { e.session->Leave(abort); }, py::arg("abort"),
           "Before the world is dropped: with abort, its waits are woken first")
      .def("snapshot", [](PyElastic& e, PyLocal& l, int64_t t, const std::vector<torch::Tensor>& buffers,
                          const py::dict& user) { Snapshot(e, StateOf(l), t, buffers, user); },
           py::arg("state"), py::arg("t"), py::arg("buffers"), py::arg("user"))
      .def("snapshot", [](PyElastic& e, engine::Replica& r, int64_t t, const std::vector<torch::Tensor>& buffers,
                          const py::dict& user) { Snapshot(e, StateOf(r), t, buffers, user); },
           py::arg("state"), py::arg("t"), py::arg("buffers"), py::arg("user"))
      .def("has_snapshot", [](PyElastic& e, int64_t t) { return e.session->HasSnapshot(t); }, py::arg("t"))
      .def("check", &Check, py::arg("world"), py::arg("t"), "The check gate of t: 'continue', 'switch' or 'stop'")
      .def("restore", [](PyElastic& e, World& w, PyLocal& l, const std::vector<torch::Tensor>& buffers,
                         bool user_state) { return Restore(e, w, StateOf(l), buffers, user_state); },
           py::arg("world"), py::arg("state"), py::arg("buffers"), py::arg("user_state") = true,
           "Restores the generation's restore point; without user_state the script's sections are not returned "
           "(the caller keeps its own)")
      .def("restore", [](PyElastic& e, World& w, engine::Replica& r, const std::vector<torch::Tensor>& buffers,
                         bool user_state) { return Restore(e, w, StateOf(r), buffers, user_state); },
           py::arg("world"), py::arg("state"), py::arg("buffers"), py::arg("user_state") = true)
      .def("await_change", [](PyElastic& e) {
        ReleaseGil release;
        return e.session->AwaitChange();
      }, "After a failed wait: whether the coordinator forms a new generation (a peer died)")
      .def("report_iteration", [](PyElastic& e, int64_t t) { e.session->ReportIteration(t); }, py::arg("t"))
      .def("request_leave", [](PyElastic& e) { e.session->RequestLeaveSoon(); },
           "Leave the job at the next check gate (what SIGTERM does)")
      .def_property_readonly("leaving", [](PyElastic& e) { return e.session->leaving(); })
      .def_property_readonly("generation", [](PyElastic& e) { return e.session->generation().number; })
      .def_property_readonly("restore_step", [](PyElastic& e) { return e.session->generation().restore; })
      .def("done", [](PyElastic& e) { e.session->Done(); }, "This worker finished the run or left (best effort)")
      .def("withdraw", [](PyElastic& e) {
        ReleaseGil release;
        e.session->Withdraw();
      }, "Out of the job now, as if this worker had died: the others switch without it");
}

}  // namespace frugal::python
