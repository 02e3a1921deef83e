// Rendezvous: how ZeroMQ ranks learn each other's endpoints and clusters.
// A server (the coordinator, or rank 0) binds a well-known address; every
// rank binds its own ZmqListener on an ephemeral port, registers
// (rank, endpoint, cluster) with the server, and gets back the full table
// once all `world_size` ranks have registered. Ranks may ask for a specific
// rank or let the server assign one (rank = -1).
//
// Protocol: one JSON frame each way over DEALER -> ROUTER (docs/design/comm.md).
// Every wait is bounded: the server gives up after its timeout and tells
// the ranks that did register; a rank gives up if the server does not
// answer in time.
//
// The world is fixed once the table is out; join/leave would extend the
// server with a new table version (the reply carries "version": 1).
//
// Thread safety: a RendezvousServer is used by one thread. JoinZmqWorld and
// RegisterWithRendezvous may run concurrently in different threads.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/comm/transport/zmq_transport.h"

namespace frugal::comm {

struct WorldTable {
  int rank = -1;                // This rank, as assigned.
  std::vector<PeerInfo> peers;  // Index = rank.
};

class RendezvousServer {
 public:
  // Binds `address` ("tcp://0.0.0.0:29500", or "tcp://127.0.0.1:*").
  // REQUIRES: world_size >= 1.
  static Result<std::unique_ptr<RendezvousServer>> Bind(const std::string& address, int world_size,
                                                        ZmqOptions options = {});
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  const std::string& endpoint() const;

  // Waits until `world_size` ranks registered, assigns ranks to those that
  // asked for any, sends the table to everyone and returns it. A bad
  // registration (rank out of range or taken, empty cluster) is answered
  // with an error and does not count. Errors: Timeout listing the missing
  // ranks (registered ranks are told so).
  Result<std::vector<PeerInfo>> Serve(std::chrono::milliseconds timeout);

  struct Impl;

 private:
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Registers `self` (self.rank = -1 to have one assigned) with the server at
// `server` and waits for the table. Errors: Timeout (server silent),
// InvalidArgument (the server rejected the registration), Corruption (bad
// reply).
Result<WorldTable> RegisterWithRendezvous(const std::string& server, const PeerInfo& self,
                                          std::chrono::milliseconds timeout, ZmqOptions options = {});

// What a launcher asks of the server: ranks for `workers` processes, and
// where torch.distributed's store would be if one of them is rank 0 (its
// host and a free port there; MASTER_ADDR / MASTER_PORT of every rank).
struct RankReservationRequest {
  int workers = 1;
  std::string master_host;
  int master_port = 0;
};

struct RankReservation {
  std::vector<int> ranks;  // this launcher's ranks, ascending
  int world_size = 0;
  // The store of the launcher that holds rank 0; empty (port 0) when rank 0
  // is no launcher's (a `frugal worker --rank 0` took it).
  std::string master_host;
  int master_port = 0;
};

// Reserves ranks with the server at `server`; answered at once (the server
// does not wait for the world). The reserved ranks are then registered by
// the launcher's children with their explicit ranks. Errors: Timeout
// (server silent), InvalidArgument (refused: fewer free ranks than asked,
// or a server that does not take reservations, such as an elastic
// coordinator), Corruption (bad reply).
Result<RankReservation> ReserveRanks(const std::string& server, const RankReservationRequest& request,
                                     std::chrono::milliseconds timeout, ZmqOptions options = {});

struct JoinOptions {
  std::string rendezvous;                   // Server endpoint. Required.
  int rank = -1;                            // -1: let the server assign.
  std::string cluster = "local";            // This rank's cluster name.
  std::string listen = "tcp://127.0.0.1:*";  // Where this rank receives.
  // Host to publish instead of the bound one. Default: the bound endpoint,
  // or for a wildcard `listen` (tcp://0.0.0.0:*) this host's address on the
  // route to the rendezvous (comm::AdvertisedEndpoint, address.h).
  std::string advertise_host;
  std::chrono::milliseconds timeout{60000};  // Bound on the rendezvous.
  ZmqOptions zmq;
};

// Bind + rendezvous + connect: a ready ZeroMQ transport for this rank.
Result<std::unique_ptr<Transport>> JoinZmqWorld(const JoinOptions& options);

}  // namespace frugal::comm
