#include "frugal/comm/rendezvous.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "rendezvous_wire.h"
#include "zmq/rate_limited_log.h"
#include "zmq/zap_handler.h"
#include "zmq/zmq_socket_setup.h"

namespace frugal::comm {

namespace {

using nlohmann::json;
using wire::Clock;
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
                           std::chrono::milliseconds timeout) {
  const int n = static_cast<int>(taken.size());
  std::string missing;
  int unassigned = n - static_cast<int>(registered);
  for (int r = 0; r < n; ++r) {
    if (!taken[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  return "rendezvous at " + endpoint + ": only " + std::to_string(registered) + " of " + std::to_string(n) +
         " ranks registered within " + std::to_string(timeout.count()) + " ms; " + std::to_string(unassigned) +
         " missing (free ranks: " + missing + ")";
}


// Ranks that asked for any rank get the free ones in arrival order; returns
// the table indexed by rank.
std::vector<PeerInfo> AssignRanks(std::vector<Registration>* regs, std::vector<bool>* taken) {
  int next_free = 0;
  for (Registration& r : *regs) {
    if (r.info.rank >= 0) continue;
    while ((*taken)[next_free]) ++next_free;
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
  const auto deadline = Clock::now() + timeout;
  const std::string& endpoint = impl_->endpoint;
  zmq::socket_t& router = impl_->router;
  std::vector<Registration> regs;
  std::vector<bool> taken(n, false);
  RateLimitedLog log(impl_->options.log);

  try {
    while (static_cast<int>(regs.size()) < n) {
      auto left = Remaining(deadline);
      if (left.count() == 0) {
        std::string msg = TimeoutMessage(endpoint, regs.size(), taken, timeout);
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
      if (!wire::ParseRendezvousRegistration(parts[1].to_string(), PeerKeyOf(parts[1]), taken, &info, &why)) {
        log.Report("rendezvous at " + endpoint + " rejected a registration from " + from + ": " + why);
        Reply(router, parts[0], json{{"error", why}});
        continue;
      }
      if (info.rank >= 0) taken[info.rank] = true;
      regs.push_back(Registration{std::move(parts[0]), std::move(info)});
    }

    std::vector<PeerInfo> table = AssignRanks(&regs, &taken);
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

Result<std::unique_ptr<Transport>> JoinZmqWorld(const JoinOptions& options) {
  if (options.rendezvous.empty()) return Status::InvalidArgument("JoinZmqWorld: no rendezvous endpoint given");
  FRUGAL_ASSIGN_OR_RETURN(auto listener, ZmqListener::Bind(options.listen, options.zmq));
  FRUGAL_ASSIGN_OR_RETURN(std::string endpoint, wire::Advertised(listener->endpoint(), options.advertise_host));
  FRUGAL_ASSIGN_OR_RETURN(
      WorldTable table,
      RegisterWithRendezvous(options.rendezvous, PeerInfo{options.rank, endpoint, options.cluster, ""}, options.timeout,
                             options.zmq));
  return ConnectZmqTransport(std::move(listener), table.rank, table.peers);
}

}  // namespace frugal::comm
