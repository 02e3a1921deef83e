// The worker's side of elastic membership (membership.h): registrations
// for each generation, and a heartbeat thread that reports progress and
// learns what the coordinator wants (a pending generation, abort, leave,
// stop).
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "frugal/comm/membership/membership.h"
#include "frugal/comm/transport/address.h"
#include "membership_wire.h"
#include "rendezvous_wire.h"
#include "transport/zmq/zmq_socket_setup.h"

namespace frugal::comm {

using nlohmann::json;

struct MembershipClient::Impl {
  MembershipClientOptions options;
  std::string id;
  std::string where;
  std::string server_key;  // the coordinator's key under CURVE, once known

  std::atomic<int64_t> generation{0};
  std::atomic<int64_t> iteration{-1};
  std::atomic<int64_t> pending{0};
  std::atomic<bool> leave{false};
  std::atomic<bool> stop{false};
  int64_t aborted_for = 0;  // heartbeat thread only: the pending generation already aborted for

  std::mutex mu;
  std::condition_variable cv;
  PeerInfo self;                                  // GUARDED_BY(mu): this member in its generation's table
  int64_t world = 0;                              // GUARDED_BY(mu): that table's size
  bool stopping = false;                          // GUARDED_BY(mu)
  std::function<void(const Status&)> on_abort;    // GUARDED_BY(mu)
  std::thread heartbeat;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }

  Status StartHeartbeats();
  void HeartbeatLoop();
  void HandleReply(const std::string& text);
  Result<std::string> Request(const json& req, std::chrono::milliseconds timeout) {
    return wire::RequestReply(options.server, req.dump(), timeout, options.zmq, where,
                              server_key.empty() ? &server_key : nullptr);
  }
};

namespace {

std::string NewMemberId() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  return buf;
}

}  // namespace

MembershipClient::MembershipClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MembershipClient::~MembershipClient() = default;

Result<std::unique_ptr<MembershipClient>> MembershipClient::Create(MembershipClientOptions options) {
  if (options.server.empty()) return Status::InvalidArgument("membership: no coordinator endpoint given");
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.zmq.security));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->id = NewMemberId();
  impl->where = "coordinator at " + impl->options.server;
  if (!impl->options.zmq.security.server_key.empty()) impl->server_key = impl->options.zmq.security.server_key;
  return std::unique_ptr<MembershipClient>(new MembershipClient(std::move(impl)));
}

const std::string& MembershipClient::id() const { return impl_->id; }
void MembershipClient::ReportIteration(int64_t t) { impl_->iteration = t; }
int64_t MembershipClient::pending() const { return impl_->pending; }
bool MembershipClient::leave_requested() const { return impl_->leave; }
bool MembershipClient::stop_requested() const { return impl_->stop; }

void MembershipClient::OnAbort(std::function<void(const Status& why)> callback) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->on_abort = std::move(callback);
}

void MembershipClient::AskToProbe() {
  (void)impl_->Request(json{{"op", "probe"}, {"id", impl_->id}}, std::chrono::milliseconds(1000));
}

void MembershipClient::Withdraw() {
  (void)impl_->Request(json{{"op", "withdraw"}, {"id", impl_->id}}, std::chrono::milliseconds(2000));
}

Status MembershipClient::RequestLeave() {
  FRUGAL_ASSIGN_OR_RETURN(std::string reply, impl_->Request(json{{"op", "leave"}, {"id", impl_->id}}, impl_->options.timeout));
  json rep = json::parse(reply, nullptr, false);
  if (!rep.is_object() || rep.contains("error") || !rep.contains("ok")) return Status::Unavailable(impl_->where + " refused the leave: " + reply);
  impl_->leave = true;
  return Status::Ok();
}

void MembershipClient::Done() {
  (void)impl_->Request(json{{"op", "done"}, {"id", impl_->id}}, std::chrono::milliseconds(2000));
}

Result<Generation> MembershipClient::Register(const std::vector<int64_t>& snapshots,
                                              std::unique_ptr<Transport>* transport) {
  Impl& s = *impl_;
  if (!s.heartbeat.joinable()) {
    // Learn the coordinator's key (and that it is there) before the
    // heartbeats start; the registration itself may wait a long time.
    FRUGAL_RETURN_IF_ERROR(s.Request(json{{"op", "status"}}, s.options.timeout).status());
    FRUGAL_RETURN_IF_ERROR(s.StartHeartbeats());
  }
  FRUGAL_ASSIGN_OR_RETURN(auto listener, ZmqListener::Bind(s.options.listen, s.options.zmq));
  FRUGAL_ASSIGN_OR_RETURN(std::string endpoint,
                          AdvertisedEndpoint(listener->endpoint(), s.options.advertise_host, s.options.server));
  const bool join = s.options.join && s.generation == 0;
  const int rank = s.generation == 0 && !join ? s.options.rank : -1;
  membership_wire::RegistrationRequest mine;
  mine.id = s.id;
  mine.info = PeerInfo{rank, endpoint, s.options.cluster, ""};
  mine.snapshots = snapshots;
  mine.join = join;
  mine.max_world = join ? s.options.max_world : 0;
  const json req = membership_wire::RegistrationJson(mine);
  FRUGAL_ASSIGN_OR_RETURN(std::string answer, s.Request(req, s.options.timeout));
  FRUGAL_ASSIGN_OR_RETURN(Generation g, membership_wire::ParseTable(answer, s.where));
  FRUGAL_ASSIGN_OR_RETURN(*transport, ConnectZmqTransport(std::move(listener), g.rank, g.peers));
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.self = g.peers[g.rank];
    s.world = static_cast<int64_t>(g.peers.size());
    s.generation = g.number;  // under mu: a heartbeat sends the generation with its entry
  }
  if (s.pending <= g.number) s.pending = 0;
  return g;
}

Status MembershipClient::Impl::StartHeartbeats() {
  heartbeat = std::thread([this] { HeartbeatLoop(); });
  return Status::Ok();
}

void MembershipClient::Impl::HandleReply(const std::string& text) {
  json rep = json::parse(text, nullptr, false);
  if (!rep.is_object()) return;
  if (rep.contains("error")) {
    // The job failed or forgot us: what is pending cannot be joined; the
    // worker's next registration gets the error in full.
    pending = generation + 1;
    return;
  }
  auto flag = [&](const char* key) { return rep.contains(key) && rep[key].is_boolean() && rep[key].get<bool>(); };
  auto pending_field = wire::IntField(rep, "pending", 0, INT64_MAX, where);
  const int64_t want = pending_field.ok() ? *pending_field : 0;
  // Leave and stop first: a worker that sees the change must also see why.
  leave = leave || flag("leave");
  stop = stop || flag("stop");
  pending = want > generation ? want : 0;
  if (flag("abort") && want > generation && want > aborted_for) {
    aborted_for = want;
    std::function<void(const Status&)> callback;
    {
      std::lock_guard<std::mutex> lock(mu);
      callback = on_abort;
    }
    if (callback) callback(Status::Unavailable("the coordinator lost a worker; generation " + std::to_string(want) + " is forming"));
  }
}

void MembershipClient::Impl::HeartbeatLoop() {
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  bool warned = false;
  auto last_reply = wire::ClockOf(options.zmq).Now();
  try {
    if (!ConfigureSocket(dealer, SocketRole::kConnector, options.zmq, server_key).ok()) return;
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::maxmsgsize, wire::kMaxMessageBytes);
    dealer.connect(options.server);
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (cv.wait_for(lock, options.heartbeat_interval, [this] { return stopping; })) return;
      }
      membership_wire::Heartbeat hb;
      hb.id = id;
      hb.iteration = iteration.load();
      {
        // Who we are in our generation: a restarted coordinator rebuilds
        // the membership from these (Note [Coordinator restart]).
        std::lock_guard<std::mutex> lock(mu);
        hb.generation = generation;
        hb.info = self;
        hb.world = world;
      }
      zmq::message_t frame(membership_wire::HeartbeatJson(hb).dump());
      (void)dealer.send(frame, zmq::send_flags::dontwait);  // dropped while the coordinator is away
      zmq::message_t reply;
      while (dealer.recv(reply, zmq::recv_flags::dontwait)) {
        HandleReply(reply.to_string());
        last_reply = wire::ClockOf(options.zmq).Now();
        if (warned) std::fprintf(stderr, "frugal worker: %s answers again\n", where.c_str());
        warned = false;
      }
      if (!warned && wire::ClockOf(options.zmq).Now() - last_reply > options.timeout / 4) {
        std::fprintf(stderr, "frugal worker: %s is silent; training on in generation %lld\n", where.c_str(),
                     static_cast<long long>(generation.load()));
        warned = true;
      }
    }
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "frugal worker: heartbeats to %s stopped: %s\n", where.c_str(), e.what());
  }
}

Result<std::string> MembershipRequest(const std::string& server, const std::string& request_json,
                                      std::chrono::milliseconds timeout, ZmqOptions options) {
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.security));
  return wire::RequestReply(server, request_json, timeout, options, "coordinator at " + server);
}

}  // namespace frugal::comm
