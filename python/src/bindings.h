// Shared declarations of the frugal._C extension (the Python package's C++
// side). Each Bind* function adds one part to the module; module.cc calls
// them. Status values become Python exceptions through ThrowIfError.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <thread>

#include <torch/extension.h>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/status.h"

namespace frugal::python {

namespace py = pybind11;

// InvalidArgument, Corruption -> ValueError, NotFound -> FileNotFoundError, Timeout ->
// TimeoutError, Unavailable -> ConnectionError, anything else ->
// RuntimeError; the message is the Status's. No-op for Ok.
void ThrowIfError(const Status& status);

// Releases the GIL around a blocking wait with CPython's own calls, not
// py::gil_scoped_release, whose bookkeeping lives in pybind11's internals:
// those are shared with torch's own pybind11, which on a pip wheel may be
// another version. On the torch 2.11 wheel every test that reached a
// gil_scoped_release crashed and every other one passed (docs/guide/gpu.md,
// "Python package"). Nothing inside may touch Python objects.
class ReleaseGil {
 public:
  ReleaseGil() : state_(PyEval_SaveThread()) {}
  ~ReleaseGil() { PyEval_RestoreThread(state_); }
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* state_;
};

// One rank's membership of a Frugal world: its transport (and, for the
// process that serves the rendezvous itself, nothing more once the table is
// out). Python objects that use the transport (replicas, hook states) keep
// their World alive.
class World {
 public:
  explicit World(std::unique_ptr<comm::Transport> transport) : transport_(std::move(transport)) {}
  // An elastic generation's world (elastic.cc): `on_close` runs before the
  // transport is destroyed, so that no heartbeat aborts it afterwards.
  World(std::unique_ptr<comm::Transport> transport, std::function<void()> on_close, int64_t generation)
      : transport_(std::move(transport)), on_close_(std::move(on_close)), generation_(generation) {}
  ~World() {
    if (on_close_) on_close_();
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  // The membership generation this world is (0: not elastic).
  int64_t generation() const { return generation_; }
  comm::Transport& transport() { return *transport_; }
  comm::Transport* transport_ptr() { return transport_.get(); }
  // The sequence number of the next user collective (frugal.all_reduce,
  // frugal.barrier): every rank makes them in the same order.
  int64_t NextCollective() { return collectives_++; }

 private:
  std::unique_ptr<comm::Transport> transport_;
  std::function<void()> on_close_;
  int64_t generation_ = 0;
  int64_t collectives_ = 0;
};

// A checkpoint's sections as a Python dict of bytes, and back (TypeError
// for anything but str keys and bytes values).
py::dict ToPy(const std::map<std::string, std::vector<uint8_t>>& sections);
std::map<std::string, std::vector<uint8_t>> FromPy(const py::dict& sections);

void BindPlan(py::module_& m);
void BindStatus(py::module_& m);
void BindWorld(py::module_& m);
void BindHook(py::module_& m);
void BindStats(py::module_& m);  // frugal._C.stat_fields() (stats.cc)
void BindReplica(py::module_& m);  // a no-op when built without the engine's Replica
void BindRunState(py::module_& m);
void BindElastic(py::module_& m);  // frugal._C.ElasticSession (elastic.cc); after BindReplica  // the reporter and checkpoint files (run_state.cc); after BindReplica

}  // namespace frugal::python
