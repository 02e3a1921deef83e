#include "frugal/comm/rendezvous.h"

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "zmq/zmq_socket_setup.h"

namespace frugal::comm {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kProtocolVersion = 1;

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

std::string ToFrame(const json& j) { return j.dump(); }

json PeerToJson(const PeerInfo& p) { return json{{"rank", p.rank}, {"endpoint", p.endpoint}, {"cluster", p.cluster}}; }

}  // namespace

struct RendezvousServer::Impl {
  int world_size = 0;
  ZmqOptions options;
  zmq::context_t context{1};
  zmq::socket_t router;  // After context: closed before it.
  std::string endpoint;
};

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousServer::~RendezvousServer() = default;
const std::string& RendezvousServer::endpoint() const { return impl_->endpoint; }

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Bind(const std::string& address, int world_size,
                                                                 ZmqOptions options) {
  if (world_size < 1) return Status::InvalidArgument("rendezvous: world size must be at least 1");
  auto impl = std::make_unique<Impl>();
  impl->world_size = world_size;
  impl->options = options;
  try {
    impl->router = zmq::socket_t(impl->context, zmq::socket_type::router);
    FRUGAL_RETURN_IF_ERROR(ConfigureSocket(impl->router, SocketRole::kListener, options));
    impl->router.bind(address);
    impl->endpoint = impl->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError("rendezvous: cannot listen on " + address, e);
  }
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

Result<std::vector<PeerInfo>> RendezvousServer::Serve(std::chrono::milliseconds timeout) {
  struct Registration {
    zmq::message_t id;
    PeerInfo info;  // info.rank = -1 until assigned.
  };
  const int n = impl_->world_size;
  const auto deadline = Clock::now() + timeout;
  zmq::socket_t& router = impl_->router;
  std::vector<Registration> regs;
  std::vector<bool> taken(n, false);

  auto reply = [&](const zmq::message_t& id, const json& body) {
    zmq::message_t id_frame(id.data(), id.size());
    SendRetrying(router, id_frame, zmq::send_flags::sndmore);
    zmq::message_t body_frame(ToFrame(body));
    SendRetrying(router, body_frame, zmq::send_flags::none);
  };

  try {
    while (static_cast<int>(regs.size()) < n) {
      auto left = Remaining(deadline);
      if (left.count() == 0) {
        std::string missing;
        int unassigned = n - static_cast<int>(regs.size());
        for (int r = 0; r < n; ++r) {
          if (!taken[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        std::string msg = "rendezvous at " + impl_->endpoint + ": only " + std::to_string(regs.size()) + " of " +
                          std::to_string(n) + " ranks registered within " + std::to_string(timeout.count()) +
                          " ms; " + std::to_string(unassigned) + " missing (free ranks: " + missing + ")";
        for (const Registration& r : regs) reply(r.id, json{{"error", msg}, {"code", "timeout"}});
        return Status::Timeout(msg);
      }
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      if (PollRetrying(&item, 1, left) == 0) continue;
      std::vector<zmq::message_t> parts;
      try {
        if (!zmq::recv_multipart(router, std::back_inserter(parts), zmq::recv_flags::dontwait)) continue;
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;  // Note [Signals] in zmq/zmq_socket_setup.cc.
        throw;
      }
      if (parts.size() != 2) continue;  // Not a rendezvous client; nothing to answer.
      json req = json::parse(parts[1].to_string(), nullptr, /*allow_exceptions=*/false);
      auto reject = [&](const std::string& why) { reply(parts[0], json{{"error", why}}); };
      if (req.is_discarded() || !req.is_object() || !req.contains("rank") || !req["rank"].is_number_integer() ||
          !req.contains("endpoint") || !req["endpoint"].is_string() || !req.contains("cluster") ||
          !req["cluster"].is_string()) {
        reject("malformed registration; expected {\"rank\", \"endpoint\", \"cluster\"}");
        continue;
      }
      PeerInfo info{req["rank"].get<int>(), req["endpoint"].get<std::string>(), req["cluster"].get<std::string>()};
      if (info.rank < -1 || info.rank >= n) {
        reject("rank " + std::to_string(info.rank) + " is outside the world of " + std::to_string(n) + " ranks");
        continue;
      }
      if (info.rank >= 0 && taken[info.rank]) {
        reject("rank " + std::to_string(info.rank) + " is already registered");
        continue;
      }
      if (info.endpoint.empty() || info.cluster.empty()) {
        reject("registration needs a non-empty endpoint and cluster");
        continue;
      }
      if (info.rank >= 0) taken[info.rank] = true;
      regs.push_back(Registration{std::move(parts[0]), std::move(info)});
    }

    // Ranks that asked for any rank get the free ones in arrival order.
    int next_free = 0;
    for (Registration& r : regs) {
      if (r.info.rank >= 0) continue;
      while (taken[next_free]) ++next_free;
      r.info.rank = next_free;
      taken[next_free] = true;
    }
    std::vector<PeerInfo> table(n);
    for (const Registration& r : regs) table[r.info.rank] = r.info;
    json peers = json::array();
    for (const PeerInfo& p : table) peers.push_back(PeerToJson(p));
    for (const Registration& r : regs) {
      reply(r.id, json{{"version", kProtocolVersion}, {"rank", r.info.rank}, {"peers", peers}});
    }
    return table;
  } catch (const zmq::error_t& e) {
    return ZmqError("rendezvous at " + impl_->endpoint, e);
  }
}

Result<WorldTable> RegisterWithRendezvous(const std::string& server, const PeerInfo& self,
                                          std::chrono::milliseconds timeout, ZmqOptions options) {
  const std::string where = "rendezvous server at " + server;
  zmq::context_t context(1);
  zmq::socket_t dealer;
  std::string answer;
  try {
    dealer = zmq::socket_t(context, zmq::socket_type::dealer);
    FRUGAL_RETURN_IF_ERROR(ConfigureSocket(dealer, SocketRole::kConnector, options));
    // Nothing left to flush once we have the answer or gave up.
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(server);
    json req{{"rank", self.rank}, {"endpoint", self.endpoint}, {"cluster", self.cluster}};
    zmq::message_t request(ToFrame(req));
    SendRetrying(dealer, request, zmq::send_flags::none);
    const auto deadline = Clock::now() + timeout;
    zmq::message_t msg;
    while (true) {
      auto left = Remaining(deadline);
      if (left.count() == 0) {
        return Status::Timeout("no answer from " + where + " within " + std::to_string(timeout.count()) + " ms");
      }
      zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
      if (PollRetrying(&item, 1, left) == 0) continue;
      try {
        if (dealer.recv(msg, zmq::recv_flags::dontwait)) break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
    answer = msg.to_string();
  } catch (const zmq::error_t& e) {
    return ZmqError(where, e);
  }

  json rep = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (rep.is_discarded() || !rep.is_object()) return Status::Corruption(where + " sent a reply that is not JSON");
  if (rep.contains("error") && rep["error"].is_string()) {
    const std::string msg = rep["error"].get<std::string>();
    // The server's own timeout is a timeout for this rank too.
    if (rep.value("code", "") == "timeout") return Status::Timeout(where + ": " + msg);
    return Status::InvalidArgument(where + " rejected the registration: " + msg);
  }
  WorldTable table;
  try {
    if (rep.value("version", 0) != kProtocolVersion) {
      return Status::Corruption(where + " speaks rendezvous version " + std::to_string(rep.value("version", 0)));
    }
    table.rank = rep.at("rank").get<int>();
    for (const json& p : rep.at("peers")) {
      table.peers.push_back(
          PeerInfo{p.at("rank").get<int>(), p.at("endpoint").get<std::string>(), p.at("cluster").get<std::string>()});
    }
  } catch (const json::exception& e) {
    return Status::Corruption(where + " sent a malformed table: " + e.what());
  }
  if (table.rank < 0 || table.rank >= static_cast<int>(table.peers.size())) {
    return Status::Corruption(where + " assigned rank " + std::to_string(table.rank) + " outside its table");
  }
  return table;
}

Result<std::unique_ptr<Transport>> JoinZmqWorld(const JoinOptions& options) {
  if (options.rendezvous.empty()) return Status::InvalidArgument("JoinZmqWorld: no rendezvous endpoint given");
  FRUGAL_ASSIGN_OR_RETURN(auto listener, ZmqListener::Bind(options.listen, options.zmq));
  std::string endpoint = listener->endpoint();
  if (!options.advertise_host.empty()) {
    // tcp://HOST:PORT -> tcp://ADVERTISE:PORT
    size_t scheme = endpoint.find("://");
    size_t colon = endpoint.rfind(':');
    if (scheme == std::string::npos || colon == std::string::npos || colon < scheme + 3) {
      return Status::InvalidArgument("JoinZmqWorld: cannot replace the host of endpoint " + endpoint);
    }
    endpoint = endpoint.substr(0, scheme + 3) + options.advertise_host + endpoint.substr(colon);
  }
  FRUGAL_ASSIGN_OR_RETURN(
      WorldTable table,
      RegisterWithRendezvous(options.rendezvous, PeerInfo{options.rank, endpoint, options.cluster}, options.timeout,
                             options.zmq));
  return ConnectZmqTransport(std::move(listener), table.rank, table.peers);
}

}  // namespace frugal::comm
