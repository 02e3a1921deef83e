// Elastic membership of a running job (docs/architecture.md, "Membership
// generations"). The coordinator runs a MembershipServer: it forms the first
// world like the rendezvous does, then keeps serving for the whole job. Every
// worker holds a MembershipClient, which registers for each generation and
// sends heartbeats from its own thread.
//
// A generation is one fixed world: its members, their ranks and endpoints.
// It changes when a worker joins (`frugal worker --join`), leaves (SIGTERM
// or `frugal job resize`), or dies (no heartbeat for `heartbeat_timeout`).
// The server only decides *that* the world changes and who is in the next
// one; where the workers switch is agreed among the workers (at a check
// gate, Note [Generation switch] in src/engine/worker_elastic.cc). A death
// also asks every worker to abort the old world at once ("abort").
//
// Protocol: one JSON frame each way over DEALER -> ROUTER, the frames of
// rendezvous.h extended with an "op" (docs/architecture.md lists them):
//   register   {id, endpoint, cluster, snapshots, join} -> the next table
//   heartbeat  {id, generation, iteration, member}      -> what is pending
//              (member: {rank, endpoint, cluster, world} in its generation,
//              from which a restarted coordinator adopts the running
//              generation: Note [Coordinator restart], membership_server.cc)
//   leave      {id}                                     -> ok
//   done       {id}                                     -> ok
//   status     {}                                       -> the membership
//   resize     {workers}                                -> ok / error
//   stop       {}                                       -> ok
// A registration without "op" is the plain rendezvous request (rendezvous.h)
// and gets its reply; a world of only such workers is not elastic: the
// server returns once the table is out, as RendezvousServer does.
//
// Thread safety: a MembershipServer is used by one thread. A
// MembershipClient's methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/comm/transport/zmq_transport.h"

namespace frugal::comm {

struct MembershipOptions {
  int world_size = 1;   // workers of the first generation
  int min_workers = 1;  // fewer than this after a change: the job fails
  // A member silent for this long is dead if its host refuses connections
  // to its transport's port (the process died), and a registration round
  // that waits on such a member drops it. Default: 2 s.
  std::chrono::milliseconds heartbeat_timeout{2000};
  // A silent member whose host does not answer (a link outage between
  // sites, a host down) is dead after this long instead (Note [Silent
  // members] in membership_forming.cc). Default: 30 s.
  std::chrono::milliseconds link_grace{30000};
  // Bound on forming the first world, and on each later registration round.
  std::chrono::milliseconds timeout{60000};
  ZmqOptions zmq;
  // Where the server reports membership events (joined, left, lost, formed).
  // Default: stderr "frugal coordinator: ...".
  std::function<void(const std::string& line)> log;
};

class MembershipServer {
 public:
  static Result<std::unique_ptr<MembershipServer>> Bind(const std::string& address, MembershipOptions options);
  ~MembershipServer();
  MembershipServer(const MembershipServer&) = delete;
  MembershipServer& operator=(const MembershipServer&) = delete;

  const std::string& endpoint() const;

  // Serves until the job is over: every member has finished or left (Ok),
  // or fewer than min_workers remain, or a registration round timed out
  // (the error, also sent to the workers). A world of plain rendezvous
  // registrations ends once its table is out. A server started where a
  // running job's coordinator was (a restart: same address and options)
  // adopts that job's generation from its workers' heartbeats and serves it
  // from there; ranks not heard within heartbeat_timeout are lost
  // (Note [Coordinator restart] in membership_server.cc).
  Status Serve();
  // Makes Serve return (Ok) at its next poll, from any thread.
  void Shutdown();

  struct Impl;

 private:
  explicit MembershipServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One generation's world as a member sees it.
struct Generation {
  int64_t number = 0;
  int rank = -1;
  std::vector<PeerInfo> peers;  // index = rank
  // The iteration whose snapshot every surviving member holds and restores
  // (Note [Generation switch]); -1 for the first generation.
  int64_t restore = -1;
  std::vector<int> joined;  // ranks that hold no state and receive it from rank 0
};

struct MembershipClientOptions {
  std::string server;                  // the coordinator's endpoint
  std::string cluster = "local";
  std::string listen = "tcp://127.0.0.1:*";
  std::string advertise_host;          // as JoinOptions::advertise_host
  bool join = false;                   // joining a running job
  // A joiner is refused (an error naming the limit) when the world would
  // grow beyond this many workers: its run's --global-batch. 0 = no limit.
  int max_world = 0;
  int rank = -1;                       // rank wanted in the first generation (-1: assigned)
  std::chrono::milliseconds heartbeat_interval{250};
  std::chrono::milliseconds timeout{60000};  // bound on each registration
  ZmqOptions zmq;
};

class MembershipClient {
 public:
  // Starts nothing yet; the heartbeat thread starts with the first Register.
  static Result<std::unique_ptr<MembershipClient>> Create(MembershipClientOptions options);
  ~MembershipClient();  // stops the heartbeat thread
  MembershipClient(const MembershipClient&) = delete;
  MembershipClient& operator=(const MembershipClient&) = delete;

  // Binds a new listener, registers for the next generation with the
  // iterations of the snapshots this worker holds, and waits for its table;
  // returns the generation and a transport connected to its world. Errors:
  // the server's (job failed, no common snapshot, timeout), Timeout.
  Result<Generation> Register(const std::vector<int64_t>& snapshots, std::unique_ptr<Transport>* transport);

  // The last completed iteration, sent with the next heartbeat.
  void ReportIteration(int64_t t);
  // What the heartbeats learnt. pending(): the number of a generation the
  // server is forming or wants to form (0: none).
  int64_t pending() const;
  bool leave_requested() const;  // this worker is asked to leave
  bool stop_requested() const;   // the job is asked to stop
  // Called on the heartbeat thread when the server asks to abort the
  // current world (a member died); also when the coordinator is gone for
  // good is NOT a reason (workers keep training without it).
  void OnAbort(std::function<void(const Status& why)> callback);
  // This worker wants to leave (SIGTERM): tells the server, which forms a
  // generation without it.
  Status RequestLeave();
  // Leaves the job at once as if this process had died: the others' waits
  // on it fail now and a new generation forms without it (best effort).
  void Withdraw();
  // After a failed wait on the generation: asks the coordinator to probe
  // the members that stopped beating now rather than after the heartbeat
  // timeout (best effort).
  void AskToProbe();
  // This worker finished the run (or left): tells the server, best effort.
  void Done();

  const std::string& id() const;

  struct Impl;

 private:
  explicit MembershipClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A request/reply to the coordinator's control API ({"op": "status"},
// {"op": "resize", "workers": N}, {"op": "stop"}); the reply's JSON text.
Result<std::string> MembershipRequest(const std::string& server, const std::string& request_json,
                                      std::chrono::milliseconds timeout, ZmqOptions options = {});

}  // namespace frugal::comm
