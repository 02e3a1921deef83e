#include "membership_wire.h"

#include <cstdint>

#include "rendezvous_wire.h"

namespace frugal::comm::membership_wire {

using nlohmann::json;
using wire::IntField;
using wire::PeerFromJson;

namespace {

bool IsShortString(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() && !j[key].get<std::string>().empty() &&
         j[key].get<std::string>().size() <= 256;
}

}  // namespace

bool ParseRegistration(const json& req, bool plain, RegistrationRequest* out, std::string* why) {
  if (!IsShortString(req, "endpoint") || !IsShortString(req, "cluster")) {
    *why = "malformed registration; expected \"endpoint\" and \"cluster\" of 1 to 256 characters";
    return false;
  }
  int64_t rank = -1;
  if (req.contains("rank")) {
    // IntField: 18446744073709551615 is not rank -1 (an unsigned JSON
    // number read as int64_t wraps).
    auto r = IntField(req, "rank", -1, 65535, "registration");
    if (!r.ok()) {
      *why = "malformed registration: \"rank\" must be an integer from -1 to 65535";
      return false;
    }
    rank = *r;
  }
  out->info = PeerInfo{static_cast<int>(rank), req["endpoint"].get<std::string>(), req["cluster"].get<std::string>(), ""};
  if (plain) return true;
  if (!IsShortString(req, "id")) {
    *why = "malformed registration: \"id\" must be a string of 1 to 256 characters";
    return false;
  }
  out->id = req["id"].get<std::string>();
  if (req.contains("join") && !req["join"].is_boolean()) {
    *why = "malformed registration: \"join\" must be true or false";
    return false;
  }
  out->join = req.contains("join") && req["join"].get<bool>();
  out->max_world = 0;
  if (req.contains("max_world")) {
    auto m = IntField(req, "max_world", 1, 1 << 30, "registration");
    if (!m.ok()) {
      *why = "malformed registration: \"max_world\" must be a positive integer";
      return false;
    }
    out->max_world = *m;
  }
  out->snapshots.clear();
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
      out->snapshots.push_back(s.get<int64_t>());
    }
  }
  return true;
}

json RegistrationJson(const RegistrationRequest& r) {
  json j{{"op", "register"},          {"id", r.id},         {"rank", r.info.rank}, {"endpoint", r.info.endpoint},
         {"cluster", r.info.cluster}, {"snapshots", r.snapshots}, {"join", r.join}};
  if (r.max_world > 0) j["max_world"] = r.max_world;
  return j;
}

bool ParseHeartbeat(const json& req, Heartbeat* out, std::string* why) {
  *out = Heartbeat{};
  if (!IsShortString(req, "id")) {
    *why = "malformed heartbeat: \"id\" must be a string of 1 to 256 characters";
    return false;
  }
  out->id = req["id"].get<std::string>();
  if (req.contains("iteration")) {
    auto it = IntField(req, "iteration", -1, INT64_MAX, "heartbeat");
    if (!it.ok()) {
      *why = "malformed heartbeat: \"iteration\" must be an integer of at least -1";
      return false;
    }
    out->iteration = *it;
  }
  if (req.contains("generation")) {
    auto g = IntField(req, "generation", 0, INT64_MAX, "heartbeat");
    if (!g.ok()) {
      *why = "malformed heartbeat: \"generation\" must be a non-negative integer";
      return false;
    }
    out->generation = *g;
  }
  if (!req.contains("member")) return true;
  const json& m = req["member"];
  if (!m.is_object() || !IsShortString(m, "endpoint") || !IsShortString(m, "cluster") || out->generation < 1) {
    *why = "malformed heartbeat: \"member\" needs \"endpoint\" and \"cluster\" of 1 to 256 characters, and "
           "\"generation\" at least 1";
    return false;
  }
  if (m.contains("world")) {
    auto w = IntField(m, "world", 1, 65536, "heartbeat");
    if (!w.ok()) {
      *why = "malformed heartbeat: the member's \"world\" must be an integer from 1 to 65536";
      return false;
    }
    out->world = *w;
  }
  auto rank = IntField(m, "rank", 0, (out->world > 0 ? out->world : 65536) - 1, "heartbeat");
  if (!rank.ok()) {
    *why = "malformed heartbeat: the member's \"rank\" must be an integer from 0 to its world size - 1";
    return false;
  }
  out->info = PeerInfo{static_cast<int>(*rank), m["endpoint"].get<std::string>(), m["cluster"].get<std::string>(), ""};
  return true;
}

json HeartbeatJson(const Heartbeat& h) {
  json j{{"op", "heartbeat"}, {"id", h.id}, {"generation", h.generation}, {"iteration", h.iteration}};
  if (h.info.rank >= 0) {
    j["member"] = {{"rank", h.info.rank}, {"endpoint", h.info.endpoint}, {"cluster", h.info.cluster}};
    if (h.world > 0) j["member"]["world"] = h.world;
  }
  return j;
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
    // Not rep.value("version", 0): a float such as 1e32 read as an int is
    // undefined behaviour (found by fuzz/rendezvous_fuzz.cc).
    if (!IntField(rep, "version", kProtocolVersion, kProtocolVersion, where).ok()) {
      return Status::Corruption(where + " speaks membership version " + rep.value("version", json()).dump());
    }
    if (!rep.contains("peers") || !rep["peers"].is_array() || rep["peers"].empty() || rep["peers"].size() > 65536) {
      return Status::Corruption(where + " sent a table without peers");
    }
    const int64_t world = static_cast<int64_t>(rep["peers"].size());
    FRUGAL_ASSIGN_OR_RETURN(g.number, IntField(rep, "generation", 1, INT64_MAX, where));
    FRUGAL_ASSIGN_OR_RETURN(int64_t rank, IntField(rep, "rank", 0, world - 1, where));
    g.rank = static_cast<int>(rank);
    FRUGAL_ASSIGN_OR_RETURN(g.restore, IntField(rep, "restore", -1, INT64_MAX, where));
    if (rep.contains("joined")) {
      if (!rep["joined"].is_array()) return Status::Corruption(where + " sent a malformed \"joined\"");
      for (const json& r : rep["joined"]) {
        FRUGAL_ASSIGN_OR_RETURN(int64_t j, IntField(json{{"joined", r}}, "joined", 0, world - 1, where));
        g.joined.push_back(static_cast<int>(j));
      }
    }
    for (const json& p : rep["peers"]) {
      FRUGAL_ASSIGN_OR_RETURN(PeerInfo info, PeerFromJson(p, world, where));
      g.peers.push_back(std::move(info));
    }
  } catch (const json::exception& e) {
    return Status::Corruption(where + " sent a malformed table: " + e.what());
  }
  for (size_t r = 0; r < g.peers.size(); ++r) {
    if (g.peers[r].rank != static_cast<int>(r)) return Status::Corruption(where + " sent a table out of rank order");
  }
  return g;
}

}  // namespace frugal::comm::membership_wire
