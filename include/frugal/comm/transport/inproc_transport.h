// InProcHub: N ranks as threads in one process. Each rank gets its own
// Transport from the hub; a Send copies the payload straight into the
// receiver's queue. Used by tests and by single-process simulations of a
// distributed run. There is nothing process-wide: several hubs can coexist.
//
// A rank whose transport is destroyed is "closed": Recv from it (once its
// queued messages are drained) and Send to it return Unavailable.
//
// Thread safety: CreateTransport may be called from any thread. The hub's
// state is shared with its transports, so transports may outlive the hub
// object.
#pragma once

#include <memory>

#include "frugal/comm/transport/transport.h"

namespace frugal::comm {

class InProcHub {
 public:
  // The transports' receive timeouts and busy time run on `clock`, which
  // outlives every transport of the hub.
  explicit InProcHub(Topology topology, const Clock& clock = Env::Default());
  ~InProcHub();
  InProcHub(const InProcHub&) = delete;
  InProcHub& operator=(const InProcHub&) = delete;

  const Topology& topology() const;

  // The transport of `rank`. Fails with InvalidArgument if `rank` is out of
  // range or already has a transport.
  Result<std::unique_ptr<Transport>> CreateTransport(int rank);

  struct State;  // Internal, shared with the transports.

 private:
  std::shared_ptr<State> state_;
};

}  // namespace frugal::comm
