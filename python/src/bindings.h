// Shared declarations of the frugal._C extension (the Python package's C++
// side). Each Bind* function adds one part to the module; module.cc calls
// them. Status values become Python exceptions through ThrowIfError.
#pragma once

#include <memory>
#include <thread>

#include <torch/extension.h>

#include "frugal/comm/transport.h"
#include "frugal/common/status.h"

namespace frugal::python {

namespace py = pybind11;

// InvalidArgument, Corruption -> ValueError, NotFound -> FileNotFoundError, Timeout ->
// TimeoutError, Unavailable -> ConnectionError, anything else ->
// RuntimeError; the message is the Status's. No-op for Ok.
void ThrowIfError(const Status& status);

// One rank's membership of a Frugal world: its transport (and, for the
// process that serves the rendezvous itself, nothing more once the table is
// out). Python objects that use the transport (replicas, hook states) keep
// their World alive.
class World {
 public:
  explicit World(std::unique_ptr<comm::Transport> transport) : transport_(std::move(transport)) {}
  comm::Transport& transport() { return *transport_; }
  comm::Transport* transport_ptr() { return transport_.get(); }

 private:
  std::unique_ptr<comm::Transport> transport_;
};

void BindStatus(py::module_& m);
void BindWorld(py::module_& m);
void BindHook(py::module_& m);
void BindReplica(py::module_& m);  // a no-op when built without the engine's Replica

}  // namespace frugal::python
