#include "membership_wire.h"

#include "rendezvous_wire.h"

namespace frugal::comm::membership_wire {

using nlohmann::json;

namespace {

bool IsShortString(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() && !j[key].get<std::string>().empty() &&
         j[key].get<std::string>().size() <= 256;
}

}  // namespace

bool ParseRegistration(const json& req, bool plain, std::string* id, PeerInfo* info, std::vector<int64_t>* snapshots,
                       bool* join, std::string* why) {
  if (!IsShortString(req, "endpoint") || !IsShortString(req, "cluster")) {
    *why = "malformed registration; expected \"endpoint\" and \"cluster\" of 1 to 256 characters";
    return false;
  }
  int64_t rank = -1;
  if (req.contains("rank")) {
    if (!req["rank"].is_number_integer() || req["rank"].get<int64_t>() < -1 || req["rank"].get<int64_t>() > 65535) {
      *why = "malformed registration: \"rank\" must be an integer from -1 to 65535";
      return false;
    }
    rank = req["rank"].get<int64_t>();
  }
  *info = PeerInfo{static_cast<int>(rank), req["endpoint"].get<std::string>(), req["cluster"].get<std::string>(), ""};
  if (plain) return true;
  if (!IsShortString(req, "id")) {
    *why = "malformed registration: \"id\" must be a string of 1 to 256 characters";
    return false;
  }
  *id = req["id"].get<std::string>();
  *join = req.value("join", false);
  snapshots->clear();
  if (req.contains("snapshots")) {
    if (!req["snapshots"].is_array() || req["snapshots"].size() > 64) {
      *why = "malformed registration: \"snapshots\" must be a list of at most 64 iterations";
      return false;
    }
    for (const json& s : req["snapshots"]) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0) {
        *why = "malformed registration: a snapshot iteration is not a non-negative integer";
        return false;
      }
      snapshots->push_back(s.get<int64_t>());
    }
  }
  return true;
}

json RegistrationJson(const std::string& id, const PeerInfo& self, const std::vector<int64_t>& snapshots, bool join) {
  return json{{"op", "register"},       {"id", id},           {"rank", self.rank}, {"endpoint", self.endpoint},
              {"cluster", self.cluster}, {"snapshots", snapshots}, {"join", join}};
}

json TableJson(const Generation& g) {
  json peers = json::array();
  for (const PeerInfo& p : g.peers) peers.push_back(wire::PeerToJson(p));
  return json{{"version", kProtocolVersion}, {"generation", g.number}, {"rank", g.rank},
              {"peers", peers},              {"restore", g.restore},   {"joined", g.joined}};
}

Result<Generation> ParseTable(const std::string& answer, const std::string& where) {
  json rep = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (rep.is_discarded() || !rep.is_object()) return Status::Corruption(where + " sent a reply that is not JSON");
  Generation g;
  try {
    if (rep.contains("error") && rep["error"].is_string()) {
      const std::string msg = rep["error"].get<std::string>();
      if (rep.value("code", std::string()) == "timeout") return Status::Timeout(where + ": " + msg);
      if (rep.value("code", std::string()) == "failed") return Status::Unavailable(where + ": " + msg);
      if (rep.value("code", std::string()) == "left") return Status::NotFound(where + ": " + msg);
      return Status::InvalidArgument(where + " rejected the registration: " + msg);
    }
    if (rep.value("version", 0) != kProtocolVersion) {
      return Status::Corruption(where + " speaks membership version " + rep.value("version", json()).dump());
    }
    g.number = rep.value("generation", int64_t{1});
    g.rank = rep.at("rank").get<int>();
    g.restore = rep.value("restore", int64_t{-1});
    g.joined = rep.value("joined", std::vector<int>());
    for (const json& p : rep.at("peers")) {
      g.peers.push_back(PeerInfo{p.at("rank").get<int>(), p.at("endpoint").get<std::string>(),
                                 p.at("cluster").get<std::string>(), p.value("public_key", std::string())});
    }
  } catch (const json::exception& e) {
    return Status::Corruption(where + " sent a malformed table: " + e.what());
  }
  if (g.rank < 0 || g.rank >= static_cast<int>(g.peers.size())) {
    return Status::Corruption(where + " assigned rank " + std::to_string(g.rank) + " outside its table");
  }
  for (int r : g.joined) {
    if (r < 0 || r >= static_cast<int>(g.peers.size())) return Status::Corruption(where + " sent a bad joined rank");
  }
  return g;
}

}  // namespace frugal::comm::membership_wire
