// The JSON frames of the membership protocol (membership.h), parsed in one
// place for the server and the client. Internal to comm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/comm/membership/membership.h"

namespace frugal::comm::membership_wire {

inline constexpr int kProtocolVersion = 1;

// A registration: the plain rendezvous one ({rank, endpoint, cluster}) or
// an elastic one (plus id, snapshots, join, max_world).
struct RegistrationRequest {
  std::string id;  // empty: a plain rendezvous registration
  PeerInfo info;
  std::vector<int64_t> snapshots;
  bool join = false;
  // A joiner's limit on the world it joins (its run's --global-batch: one
  // sample per worker at least); 0 = none. Absent from older peers.
  int64_t max_world = 0;
};

// False with `why` on bad input.
bool ParseRegistration(const nlohmann::json& req, bool plain, RegistrationRequest* out, std::string* why);

nlohmann::json RegistrationJson(const RegistrationRequest& r);

// A heartbeat: who beats, in which generation, how far it got, and its
// entry in that generation's table with the table's size, from which a
// restarted coordinator rebuilds the membership (Note [Coordinator restart]
// in membership_server.cc). A worker not yet in a generation sends no
// entry (rank -1); an older worker sends no "world" (0).
struct Heartbeat {
  std::string id;
  int64_t generation = 0;
  int64_t iteration = -1;
  PeerInfo info;  // rank -1: no entry
  int64_t world = 0;
};

// False with `why` on bad input. A heartbeat without an entry is accepted
// with only `id` checked; the other fields keep their defaults when absent.
bool ParseHeartbeat(const nlohmann::json& req, Heartbeat* out, std::string* why);

nlohmann::json HeartbeatJson(const Heartbeat& h);

// The table of a generation as sent to the member of rank `rank`.
nlohmann::json TableJson(const Generation& g);
// Parses a table; errors carried by the reply become the Status.
Result<Generation> ParseTable(const std::string& answer, const std::string& where);

}  // namespace frugal::comm::membership_wire
