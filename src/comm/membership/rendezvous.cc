#include "frugal/comm/membership/rendezvous.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "frugal/comm/transport/address.h"
#include "rendezvous_wire.h"
#include "transport/zmq/rate_limited_log.h"
#include "transport/zmq/zap_handler.h"
#include "transport/zmq/zmq_socket_setup.h"

namespace frugal::comm {

namespace {

using nlohmann::json;
using wire::ClockOf;
using wire::kMaxMessageBytes;
using wire::PeerToJson;
using wire::ReceiveMessage;
using wire::Remaining;
using wire::Reply;

std::string ToFrame(const json& j) { return j.dump(); }

}  // namespace

struct RendezvousServer::Impl {
  int world_size = 0;
  ZmqOptions options;
  zmq::context_t context{1};
  std::unique_ptr<ZapHandler> zap;  // kCurve only. After context: stopped before it.
  zmq::socket_t router;             // After context: closed before it.
  std::string endpoint;
};

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousServer::~RendezvousServer() = default;
const std::string& RendezvousServer::endpoint() const { return impl_->endpoint; }

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Bind(const std::string& address, int world_size,
                                                                 ZmqOptions options) {
  if (world_size < 1) return Status::InvalidArgument("rendezvous: world size must be at least 1");
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.security));
  auto impl = std::make_unique<Impl>();
  impl->world_size = world_size;
  impl->options = options;
  FRUGAL_RETURN_IF_ERROR(BindListener(
      impl->context, address, options, "rendezvous: cannot listen on " + address,
      [](zmq::socket_t& router) { router.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes); }, &impl->zap,
      &impl->router, &impl->endpoint));
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

namespace {

struct Registration {
  zmq::message_t id;
  PeerInfo info;  // info.rank = -1 until assigned.
};


std::string TimeoutMessage(const std::string& endpoint, size_t registered, const std::vector<bool>& taken,
                           const std::vector<bool>& reserved, std::chrono::milliseconds timeout) {
  const int n = static_cast<int>(taken.size());
  std::string missing;
  std::string awaited;
  int unassigned = n - static_cast<int>(registered);
  for (int r = 0; r < n; ++r) {
    if (taken[r]) continue;
    std::string& list = reserved[r] ? awaited : missing;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  std::string msg = "rendezvous at " + endpoint + ": only " + std::to_string(registered) + " of " + std::to_string(n) +
                    " ranks registered within " + std::to_string(timeout.count()) + " ms; " +
                    std::to_string(unassigned) + " missing (free ranks: " + missing + ")";
  if (!awaited.empty()) msg += "; reserved by a frugal run but not registered: " + awaited;
  return msg;
}

// Note [Rank reservations]
// `frugal run` starts its children with torch.distributed's environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as torchrun does, so it must
// know their global ranks before they start. It reserves them here first:
// the lowest free ranks, answered at once, in arrival order, so the first
// launcher to ask holds rank 0 and its host serves torch's store (the
// request carries its host and a free port there; every later reservation
// is told them). The children then register with those explicit ranks, as
// `frugal worker --rank R` does: the table, and when the world is complete,
// are as before, so the server still needs only --world. A reserved rank
// is never handed to a rank -1 registration, and a reservation never takes
// a rank one of those is owed. Nothing waits on a reservation: a launcher
// whose children never register leaves its ranks missing at the timeout
// (named as reserved). The world size stays the server's: a launcher learns
// it from the reply.
json Reserve(const RankReservationRequest& req, const std::vector<bool>& taken, int owed_to_any,
             std::vector<bool>* reserved, RankReservation* master) {
  const int n = static_cast<int>(taken.size());
  std::vector<int> free;
  for (int r = 0; r < n; ++r) {
    if (!taken[r] && !(*reserved)[r]) free.push_back(r);
  }
  const int available = static_cast<int>(free.size()) - owed_to_any;
  if (available < req.workers) {
    return json{{"error", "this launcher asked for " + std::to_string(req.workers) + " ranks, the world of " +
                              std::to_string(n) + " has " + std::to_string(std::max(available, 0)) +
                              " left (is the coordinator's --world the sum of every host's --workers?)"}};
  }
  RankReservation out;
  out.world_size = n;
  out.ranks.assign(free.begin(), free.begin() + req.workers);
  for (int r : out.ranks) (*reserved)[r] = true;
  if (out.ranks.front() == 0) {
    master->master_host = req.master_host;
    master->master_port = req.master_port;
  }
  out.master_host = master->master_host;
  out.master_port = master->master_port;
  return wire::ReservationReply(out);
}

// The answer to a frame with an "op": a reservation is the only one.
json AnswerOp(const json& op, const std::vector<bool>& taken, int owed_to_any, std::vector<bool>* reserved,
              RankReservation* master) {
  if (op["op"] != "reserve") {
    return json{{"error", "unknown op " + op["op"].dump().substr(0, 40) +
                              " (this server takes registrations and {\"op\": \"reserve\"})"}};
  }
  RankReservationRequest req;
  std::string why;
  if (!wire::ParseReservationRequest(op, &req, &why)) return json{{"error", why}};
  return Reserve(req, taken, owed_to_any, reserved, master);
}

// Ranks that asked for any rank get the free ones in arrival order; returns
// the table indexed by rank.
std::vector<PeerInfo> AssignRanks(std::vector<Registration>* regs, std::vector<bool>* taken,
                                  const std::vector<bool>& reserved) {
  int next_free = 0;
  for (Registration& r : *regs) {
    if (r.info.rank >= 0) continue;
    while ((*taken)[next_free] || reserved[next_free]) ++next_free;
    r.info.rank = next_free;
    (*taken)[next_free] = true;
  }
  std::vector<PeerInfo> table(taken->size());
  for (const Registration& r : *regs) table[r.info.rank] = r.info;
  return table;
}

}  // namespace

Result<std::vector<PeerInfo>> RendezvousServer::Serve(std::chrono::milliseconds timeout) {
  const int n = impl_->world_size;
  const Clock& clock = ClockOf(impl_->options);
  const auto deadline = clock.Now() + timeout;
  const std::string& endpoint = impl_->endpoint;
  zmq::socket_t& router = impl_->router;
  std::vector<Registration> regs;
  std::vector<bool> taken(n, false);
  std::vector<bool> reserved(n, false);  // Note [Rank reservations]
  RankReservation master;                // rank 0's launcher's store, once reserved
  int owed_to_any = 0;                   // registrations with rank -1
  RateLimitedLog log(impl_->options.log, clock);

  try {
    while (static_cast<int>(regs.size()) < n) {
      auto left = Remaining(clock, deadline);
      if (left.count() == 0) {
        std::string msg = TimeoutMessage(endpoint, regs.size(), taken, reserved, timeout);
        for (const Registration& r : regs) Reply(router, r.id, json{{"error", msg}, {"code", "timeout"}});
        return Status::Timeout(msg);
      }
      std::vector<zmq::message_t> parts;
      if (!ReceiveMessage(router, left, &parts)) continue;
      const std::string from = parts.empty() ? std::string("unknown address") : PeerAddressOf(parts.back());
      if (parts.size() != 2) {  // Not a rendezvous client (Note [Strangers] in zmq_transport.cc).
        log.Report("rendezvous at " + endpoint + " dropped a message of " + std::to_string(parts.size()) +
                   " frames from " + from);
        continue;
      }
      PeerInfo info;
      std::string why;
      const std::string body = parts[1].to_string();
      const json op = json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (op.is_object() && op.contains("op")) {
        const json answer = AnswerOp(op, taken, owed_to_any, &reserved, &master);
        if (answer.contains("error")) {
          log.Report("rendezvous at " + endpoint + " refused a reservation from " + from + ": " +
                     answer["error"].get<std::string>());
        }
        Reply(router, parts[0], answer);
        continue;
      }
      if (!wire::ParseRendezvousRegistration(body, PeerKeyOf(parts[1]), taken, &info, &why)) {
        log.Report("rendezvous at " + endpoint + " rejected a registration from " + from + ": " + why);
        Reply(router, parts[0], json{{"error", why}});
        continue;
      }
      if (info.rank < 0) {
        int unclaimed = -owed_to_any;
        for (int r = 0; r < n; ++r) unclaimed += !taken[r] && !reserved[r];
        if (unclaimed <= 0) {
          why = "no rank is left to assign: the free ranks are reserved by frugal run launchers";
          log.Report("rendezvous at " + endpoint + " rejected a registration from " + from + ": " + why);
          Reply(router, parts[0], json{{"error", why}});
          continue;
        }
        ++owed_to_any;
      }
      if (info.rank >= 0) taken[info.rank] = true;
      regs.push_back(Registration{std::move(parts[0]), std::move(info)});
    }

    std::vector<PeerInfo> table = AssignRanks(&regs, &taken, reserved);
    json peers = json::array();
    for (const PeerInfo& p : table) peers.push_back(PeerToJson(p));
    for (const Registration& r : regs) {
      Reply(router, r.id, json{{"version", wire::kRendezvousVersion}, {"rank", r.info.rank}, {"peers", peers}});
    }
    return table;
  } catch (const zmq::error_t& e) {
    return ZmqError("rendezvous at " + endpoint, e);
  }
}

Result<WorldTable> RegisterWithRendezvous(const std::string& server, const PeerInfo& self,
                                          std::chrono::milliseconds timeout, ZmqOptions options) {
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.security));
  const std::string where = "rendezvous server at " + server;
  const std::string request =
      ToFrame(json{{"rank", self.rank}, {"endpoint", self.endpoint}, {"cluster", self.cluster}});
  FRUGAL_ASSIGN_OR_RETURN(std::string answer, wire::RequestReply(server, request, timeout, options, where));
  return wire::ParseWorldTable(answer, where);
}

Result<RankReservation> ReserveRanks(const std::string& server, const RankReservationRequest& request,
                                     std::chrono::milliseconds timeout, ZmqOptions options) {
  if (request.workers < 1) return Status::InvalidArgument("ReserveRanks: workers must be at least 1");
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.security));
  const std::string where = "coordinator at " + server;
  FRUGAL_ASSIGN_OR_RETURN(std::string answer, wire::RequestReply(server, wire::ReservationRequestFrame(request),
                                                                 timeout, options, where));
  FRUGAL_ASSIGN_OR_RETURN(RankReservation r, wire::ParseReservationReply(answer, where));
  if (static_cast<int>(r.ranks.size()) != request.workers) {
    return Status::Corruption(where + " reserved " + std::to_string(r.ranks.size()) + " ranks, " +
                              std::to_string(request.workers) + " were asked for");
  }
  return r;
}

Result<std::unique_ptr<Transport>> JoinZmqWorld(const JoinOptions& options) {
  if (options.rendezvous.empty()) return Status::InvalidArgument("JoinZmqWorld: no rendezvous endpoint given");
  FRUGAL_ASSIGN_OR_RETURN(auto listener, ZmqListener::Bind(options.listen, options.zmq));
  FRUGAL_ASSIGN_OR_RETURN(std::string endpoint,
                          AdvertisedEndpoint(listener->endpoint(), options.advertise_host, options.rendezvous));
  FRUGAL_ASSIGN_OR_RETURN(
      WorldTable table,
      RegisterWithRendezvous(options.rendezvous, PeerInfo{options.rank, endpoint, options.cluster, ""}, options.timeout,
                             options.zmq));
  return ConnectZmqTransport(std::move(listener), table.rank, table.peers);
}

}  // namespace frugal::comm
