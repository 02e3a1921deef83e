// Small collectives over a Transport for the engine's control plane:
// parameter checksums, batch-norm statistics, start/stop barriers. Plain
// direct sends (one message per peer); meant for small payloads. Gradient
// buckets go through SparseExchange instead.
//
// Every rank of the world must call the same collective with the same tag.
// Each wait is bounded by `timeout`; errors name the peer (see
// transport.h). Thread safety: as Transport; concurrent collectives need
// distinct tags.
#pragma once

#include <chrono>
#include <vector>

#include "frugal/comm/transport/transport.h"

namespace frugal::comm {

// Every rank gets every rank's `mine`, index = rank. Bytes per rank: sends
// (N-1)*|mine|, receives the sum of the others.
Result<std::vector<Bytes>> AllGather(Transport& transport, Tag tag, Bytes mine, std::chrono::milliseconds timeout);

// Every rank gets `root`'s `data` (ignored on other ranks). The root sends
// N-1 messages. REQUIRES: 0 <= root < world_size.
Result<Bytes> Broadcast(Transport& transport, Tag tag, int root, Bytes data, std::chrono::milliseconds timeout);

// Returns once every rank has entered the barrier (an AllGather of empty
// messages).
Status Barrier(Transport& transport, Tag tag, std::chrono::milliseconds timeout);

}  // namespace frugal::comm
