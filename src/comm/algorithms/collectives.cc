#include "frugal/comm/algorithms/collectives.h"

namespace frugal::comm {

Result<std::vector<Bytes>> AllGather(Transport& transport, Tag tag, Bytes mine, std::chrono::milliseconds timeout) {
  const int me = transport.rank();
  const int n = transport.world_size();
  auto shared = std::make_shared<const Bytes>(std::move(mine));
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) FRUGAL_RETURN_IF_ERROR(transport.Send(peer, tag, shared));
  }
  std::vector<Bytes> all(n);
  // Receive in rank order: the result is indexed by rank, never by arrival.
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) {
      all[peer] = *shared;
      continue;
    }
    FRUGAL_ASSIGN_OR_RETURN(Message msg, transport.Recv(peer, tag, timeout));
    all[peer] = std::move(msg.payload);
  }
  return all;
}

Result<Bytes> Broadcast(Transport& transport, Tag tag, int root, Bytes data, std::chrono::milliseconds timeout) {
  if (root < 0 || root >= transport.world_size()) {
    return Status::InvalidArgument("Broadcast: root rank " + std::to_string(root) + " is outside the world of " +
                                   std::to_string(transport.world_size()) + " ranks");
  }
  if (transport.rank() != root) {
    FRUGAL_ASSIGN_OR_RETURN(Message msg, transport.Recv(root, tag, timeout));
    return std::move(msg.payload);
  }
  auto shared = std::make_shared<const Bytes>(std::move(data));
  for (int peer = 0; peer < transport.world_size(); ++peer) {
    if (peer != root) FRUGAL_RETURN_IF_ERROR(transport.Send(peer, tag, shared));
  }
  return *shared;
}

Status Barrier(Transport& transport, Tag tag, std::chrono::milliseconds timeout) {
  return AllGather(transport, tag, Bytes(), timeout).status();
}

}  // namespace frugal::comm
