#include "rendezvous_wire.h"

#include <algorithm>
#include <zmq_addon.hpp>

#include "transport/zmq/zmq_socket_setup.h"

namespace frugal::comm::wire {

using nlohmann::json;

namespace {

std::string ToFrame(const json& j) { return j.dump(); }

}  // namespace

namespace {

// Note [Server key]
// A CURVE client must know the server's public key before it connects. A
// worker is given the job's allow-list, which holds the coordinator's key
// among others; rather than asking for one more flag, it connects once per
// candidate key and sends its registration on each. Only the connection
// with the right key completes the handshake (the server cannot decrypt the
// others' HELLO); as soon as one does, the others are closed so they stop
// retrying. With SecurityOptions::server_key set there is one candidate.
std::vector<std::string> ServerKeyCandidates(const SecurityOptions& security) {
  if (security.mechanism != SecurityOptions::Mechanism::kCurve) return {""};
  if (!security.server_key.empty()) return {security.server_key};
  std::vector<std::string> keys = security.authorized_keys;
  if (std::find(keys.begin(), keys.end(), security.keys.public_key) == keys.end()) {
    keys.push_back(security.keys.public_key);
  }
  return keys;
}

}  // namespace

std::chrono::milliseconds Remaining(const Clock& clock, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.Now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}


Result<std::string> Advertised(const std::string& endpoint, const std::string& host) {
  if (host.empty()) return endpoint;
  const size_t scheme = endpoint.find("://");
  const size_t colon = endpoint.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon < scheme + 3) {
    return Status::InvalidArgument("cannot replace the host of endpoint " + endpoint);
  }
  return endpoint.substr(0, scheme + 3) + host + endpoint.substr(colon);
}

Result<int64_t> IntField(const json& j, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) return Status::Corruption(where + " sent no \"" + key + "\"");
  const json& v = j[key];
  bool ok = false;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = hi >= 0 && u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
  } else if (v.is_number_integer()) {
    ok = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  }
  if (!ok) {
    return Status::Corruption(where + " sent \"" + key + "\" = " + v.dump().substr(0, 40) + ", not an integer in [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
}

Result<PeerInfo> PeerFromJson(const json& p, int64_t world, const std::string& where) {
  FRUGAL_ASSIGN_OR_RETURN(int64_t rank, IntField(p, "rank", 0, world - 1, where));
  if (!p.contains("endpoint") || !p["endpoint"].is_string() || !p.contains("cluster") || !p["cluster"].is_string()) {
    return Status::Corruption(where + " sent a table entry without endpoint or cluster");
  }
  std::string key;
  if (p.contains("public_key") && p["public_key"].is_string()) key = p["public_key"].get<std::string>();
  return PeerInfo{static_cast<int>(rank), p["endpoint"].get<std::string>(), p["cluster"].get<std::string>(), key};
}

bool ParseRendezvousRegistration(const std::string& body, const std::string& key, const std::vector<bool>& taken,
                                 PeerInfo* info, std::string* why) {
  const int n = static_cast<int>(taken.size());
  json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object() || !req.contains("rank") || !req["rank"].is_number_integer() ||
      !req.contains("endpoint") || !req["endpoint"].is_string() || !req.contains("cluster") ||
      !req["cluster"].is_string()) {
    *why = "malformed registration; expected {\"rank\", \"endpoint\", \"cluster\"}";
    return false;
  }
  const json& rank = req["rank"];
  const bool in_range = rank.is_number_unsigned() ? rank.get<uint64_t>() < static_cast<uint64_t>(n)
                                                  : rank.get<int64_t>() >= -1 && rank.get<int64_t>() < n;
  if (!in_range) {
    *why = "rank " + rank.dump() + " is outside the world of " + std::to_string(n) + " ranks";
    return false;
  }
  // With CURVE the key is the one ZAP admitted on this connection: a
  // rank cannot claim another's key.
  *info = PeerInfo{rank.get<int>(), req["endpoint"].get<std::string>(), req["cluster"].get<std::string>(), key};
  if (info->rank >= 0 && taken[info->rank]) {
    *why = "rank " + std::to_string(info->rank) + " is already registered";
    return false;
  }
  if (info->endpoint.empty() || info->cluster.empty() || info->endpoint.size() > 256 || info->cluster.size() > 256) {
    *why = "registration needs an endpoint and a cluster name of 1 to 256 characters";
    return false;
  }
  return true;
}

Result<WorldTable> ParseWorldTable(const std::string& answer, const std::string& where) {
  json rep = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (rep.is_discarded() || !rep.is_object()) return Status::Corruption(where + " sent a reply that is not JSON");
  WorldTable table;
  try {
    if (rep.contains("error") && rep["error"].is_string()) {
      const std::string msg = rep["error"].get<std::string>();
      // The server's own timeout is a timeout for this rank too.
      if (rep.contains("code") && rep["code"] == "timeout") return Status::Timeout(where + ": " + msg);
      return Status::InvalidArgument(where + " rejected the registration: " + msg);
    }
    // Not rep.value("version", 0): a float such as 1e32 read as an int is
    // undefined behaviour (found by fuzz/rendezvous_fuzz.cc).
    if (!IntField(rep, "version", kRendezvousVersion, kRendezvousVersion, where).ok()) {
      return Status::Corruption(where + " speaks rendezvous version " + rep.value("version", json()).dump());
    }
    if (!rep.contains("peers") || !rep["peers"].is_array() || rep["peers"].empty() || rep["peers"].size() > 65536) {
      return Status::Corruption(where + " sent a table without peers");
    }
    const int64_t world = static_cast<int64_t>(rep["peers"].size());
    FRUGAL_ASSIGN_OR_RETURN(int64_t rank, IntField(rep, "rank", 0, world - 1, where));
    table.rank = static_cast<int>(rank);
    for (const json& p : rep["peers"]) {
      FRUGAL_ASSIGN_OR_RETURN(PeerInfo info, PeerFromJson(p, world, where));
      table.peers.push_back(std::move(info));
    }
  } catch (const json::exception& e) {
    return Status::Corruption(where + " sent a malformed table: " + e.what());
  }
  for (size_t r = 0; r < table.peers.size(); ++r) {
    if (table.peers[r].rank != static_cast<int>(r)) return Status::Corruption(where + " sent a table out of rank order");
  }
  return table;
}

std::string ReservationRequestFrame(const RankReservationRequest& request) {
  return ToFrame(json{{"op", "reserve"},
                      {"workers", request.workers},
                      {"master_host", request.master_host},
                      {"master_port", request.master_port}});
}

bool ParseReservationRequest(const json& req, RankReservationRequest* out, std::string* why) {
  const std::string where = "the reservation";
  auto workers = IntField(req, "workers", 1, 65536, where);
  auto port = IntField(req, "master_port", 0, 65535, where);
  if (!workers.ok() || !port.ok()) {
    *why = !workers.ok() ? workers.status().message() : port.status().message();
    return false;
  }
  if (!req.contains("master_host") || !req["master_host"].is_string() || req["master_host"].get<std::string>().size() > 256) {
    *why = "a reservation needs \"master_host\", a string of at most 256 characters";
    return false;
  }
  *out = RankReservationRequest{static_cast<int>(*workers), req["master_host"].get<std::string>(),
                                static_cast<int>(*port)};
  return true;
}

json ReservationReply(const RankReservation& r) {
  return json{{"version", kRendezvousVersion},
              {"ranks", r.ranks},
              {"world_size", r.world_size},
              {"master_addr", r.master_host},
              {"master_port", r.master_port}};
}

Result<RankReservation> ParseReservationReply(const std::string& answer, const std::string& where) {
  json rep = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (rep.is_discarded() || !rep.is_object()) return Status::Corruption(where + " sent a reply that is not JSON");
  if (rep.contains("error") && rep["error"].is_string()) {
    return Status::InvalidArgument(where + " refused the rank reservation: " + rep["error"].get<std::string>());
  }
  if (!IntField(rep, "version", kRendezvousVersion, kRendezvousVersion, where).ok()) {
    return Status::Corruption(where + " speaks rendezvous version " + rep.value("version", json()).dump());
  }
  RankReservation r;
  FRUGAL_ASSIGN_OR_RETURN(int64_t world, IntField(rep, "world_size", 1, 65536, where));
  FRUGAL_ASSIGN_OR_RETURN(int64_t port, IntField(rep, "master_port", 0, 65535, where));
  r.world_size = static_cast<int>(world);
  r.master_port = static_cast<int>(port);
  if (!rep.contains("master_addr") || !rep["master_addr"].is_string() || !rep.contains("ranks") ||
      !rep["ranks"].is_array() || rep["ranks"].empty() || rep["ranks"].size() > static_cast<size_t>(world)) {
    return Status::Corruption(where + " sent a reservation without ranks or master_addr");
  }
  r.master_host = rep["master_addr"].get<std::string>();
  for (const json& v : rep["ranks"]) {
    json holder = json{{"rank", v}};
    FRUGAL_ASSIGN_OR_RETURN(int64_t rank, IntField(holder, "rank", 0, world - 1, where));
    if (!r.ranks.empty() && rank <= r.ranks.back()) return Status::Corruption(where + " sent reserved ranks out of order");
    r.ranks.push_back(static_cast<int>(rank));
  }
  return r;
}

json PeerToJson(const PeerInfo& p) {
  return json{{"rank", p.rank}, {"endpoint", p.endpoint}, {"cluster", p.cluster}, {"public_key", p.public_key}};
}

void Reply(zmq::socket_t& router, const zmq::message_t& id, const json& body) {
  zmq::message_t id_frame(id.data(), id.size());
  SendRetrying(router, id_frame, zmq::send_flags::sndmore);
  zmq::message_t body_frame(ToFrame(body));
  SendRetrying(router, body_frame, zmq::send_flags::none);
}

// Waits up to `left` for one message; false when none arrived (or a signal
// interrupted the receive) and the caller should poll again.
bool ReceiveMessage(zmq::socket_t& router, std::chrono::milliseconds left, std::vector<zmq::message_t>* parts) {
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  if (PollRetrying(&item, 1, left) == 0) return false;
  try {
    if (!zmq::recv_multipart(router, std::back_inserter(*parts), zmq::recv_flags::dontwait)) return false;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;  // Note [Signals] in zmq/zmq_socket_setup.cc.
    throw;
  }
  return true;
}

Result<std::string> RequestReply(const std::string& server, const std::string& request,
                                 std::chrono::milliseconds timeout, const ZmqOptions& options, const std::string& where,
                                 std::string* server_key) {
  const std::vector<std::string> keys = ServerKeyCandidates(options.security);
  const bool watch_handshakes = keys.size() > 1;
  zmq::context_t context(1);
  std::vector<zmq::socket_t> dealers(keys.size());
  std::vector<zmq::socket_t> monitors(keys.size());
  try {
    for (size_t i = 0; i < keys.size(); ++i) {
      dealers[i] = zmq::socket_t(context, zmq::socket_type::dealer);
      FRUGAL_RETURN_IF_ERROR(ConfigureSocket(dealers[i], SocketRole::kConnector, options, keys[i]));
      // Nothing left to flush once we have the answer or gave up.
      dealers[i].set(zmq::sockopt::linger, 0);
      dealers[i].set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
      if (watch_handshakes) {
        const std::string monitor = "inproc://frugal-request-monitor-" + std::to_string(i);
        if (zmq_socket_monitor(dealers[i].handle(), monitor.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
          throw zmq::error_t();
        }
        monitors[i] = zmq::socket_t(context, zmq::socket_type::pair);
        monitors[i].set(zmq::sockopt::linger, 0);
        monitors[i].connect(monitor);
      }
      dealers[i].connect(server);
      zmq::message_t frame(request);
      SendRetrying(dealers[i], frame, zmq::send_flags::none);
    }
    const Clock& clock = ClockOf(options);
    const auto deadline = clock.Now() + timeout;
    while (true) {
      auto left = Remaining(clock, deadline);
      if (left.count() == 0) {
        std::string why = "no answer from " + where + " within " + std::to_string(timeout.count()) + " ms";
        if (options.security.mechanism == SecurityOptions::Mechanism::kCurve) {
          why += " (with CURVE: is the server's key on the authorised list, and ours on the server's?)";
        }
        return Status::Timeout(why);
      }
      std::vector<zmq::pollitem_t> items;
      std::vector<std::pair<size_t, bool>> owner;  // (candidate, is monitor) of items[k].
      for (size_t i = 0; i < keys.size(); ++i) {
        if (dealers[i].handle() == nullptr) continue;
        items.push_back({dealers[i].handle(), 0, ZMQ_POLLIN, 0});
        owner.emplace_back(i, false);
        if (monitors[i].handle() != nullptr) {
          items.push_back({monitors[i].handle(), 0, ZMQ_POLLIN, 0});
          owner.emplace_back(i, true);
        }
      }
      if (PollRetrying(items.data(), items.size(), left) == 0) continue;
      for (size_t k = 0; k < items.size(); ++k) {
        if ((items[k].revents & ZMQ_POLLIN) == 0) continue;
        const size_t i = owner[k].first;
        if (owner[k].second) {
          // The handshake with keys[i] succeeded: it is the server's key.
          for (size_t j = 0; j < keys.size(); ++j) {
            if (j == i) continue;
            if (monitors[j].handle() != nullptr) monitors[j].close();
            if (dealers[j].handle() != nullptr) dealers[j].close();
          }
          monitors[i].close();
          break;  // The item list is stale now.
        }
        zmq::message_t msg;
        try {
          if (dealers[i].recv(msg, zmq::recv_flags::dontwait)) {
            if (server_key != nullptr) *server_key = keys[i];
            return msg.to_string();
          }
        } catch (const zmq::error_t& e) {
          if (e.num() != EINTR) throw;
        }
      }
    }
  } catch (const zmq::error_t& e) {
    return ZmqError(where, e);
  }
}

}  // namespace frugal::comm::wire
