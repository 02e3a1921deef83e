// Internals shared by the rendezvous (rendezvous.cc) and the elastic
// membership service (membership_*.cc): JSON frames over a ROUTER socket
// and one request/reply exchange from a DEALER, with every wait bounded.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/transport/zmq_transport.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"

namespace frugal::comm::wire {

// The clock the rendezvous and membership waits run on: the options'
// (ZmqOptions::clock), the real one where it is null.
inline const Clock& ClockOf(const ZmqOptions& options) {
  return options.clock != nullptr ? *options.clock : Env::Default();
}

// A registration or a table is a few hundred bytes per rank; anything much
// larger is not ours, and ZeroMQ drops the connection before buffering it.
inline constexpr int64_t kMaxMessageBytes = 1 << 20;

// The version of the rendezvous table (rendezvous.h).
inline constexpr int kRendezvousVersion = 1;

// Time left on `clock` until `deadline`, never negative.
std::chrono::milliseconds Remaining(const Clock& clock, Clock::time_point deadline);

nlohmann::json PeerToJson(const PeerInfo& p);

// j[key] as an integer in [lo, hi]; Corruption naming `where` otherwise (a
// float such as 1e300 or a huge number is never cast: that is undefined).
Result<int64_t> IntField(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi, const std::string& where);
// PeerInfo from a table entry, its rank within [0, world).
Result<PeerInfo> PeerFromJson(const nlohmann::json& p, int64_t world, const std::string& where);

// The rendezvous server's check of a registration `body` (JSON {rank,
// endpoint, cluster}) against the ranks already `taken`; `key` is the CURVE
// key ZAP admitted on the connection (empty without CURVE). False with
// `why`, the reason sent back to the client, on bad input.
bool ParseRendezvousRegistration(const std::string& body, const std::string& key, const std::vector<bool>& taken,
                                 PeerInfo* info, std::string* why);
// The client's parse of the server's answer: the table, in rank order, or
// the server's error as the Status (Timeout for its own timeout).
Result<WorldTable> ParseWorldTable(const std::string& answer, const std::string& where);

// A launcher's rank reservation (rendezvous.h, ReserveRanks):
// {"op": "reserve", "workers", "master_host", "master_port"}.
std::string ReservationRequestFrame(const RankReservationRequest& request);
// The server's check of a parsed frame that has "op": "reserve"; false with
// `why` on bad input.
bool ParseReservationRequest(const nlohmann::json& req, RankReservationRequest* out, std::string* why);
// {"version", "ranks", "world_size", "master_addr", "master_port"}.
nlohmann::json ReservationReply(const RankReservation& r);
// The launcher's parse of the answer: the reservation, or the server's
// refusal as InvalidArgument.
Result<RankReservation> ParseReservationReply(const std::string& answer, const std::string& where);

// `endpoint` (tcp://HOST:PORT) with HOST replaced by `host` (unchanged when
// `host` is empty): what peers connect to when the listener is bound to a
// wildcard interface.
Result<std::string> Advertised(const std::string& endpoint, const std::string& host);

// Sends `body` as one JSON frame to the client whose routing id is `id`.
void Reply(zmq::socket_t& router, const zmq::message_t& id, const nlohmann::json& body);

// Waits up to `left` for one message on `router`; false when none arrived
// (or a signal interrupted the receive) and the caller should poll again.
bool ReceiveMessage(zmq::socket_t& router, std::chrono::milliseconds left, std::vector<zmq::message_t>* parts);

// Sends `request` to the ROUTER at `server` and returns the first answer,
// trying every candidate server key under CURVE (Note [Server key]); the key
// that answered goes to `server_key` when given. Errors: Timeout naming
// `where`, the ZeroMQ error.
Result<std::string> RequestReply(const std::string& server, const std::string& request,
                                 std::chrono::milliseconds timeout, const ZmqOptions& options, const std::string& where,
                                 std::string* server_key = nullptr);

}  // namespace frugal::comm::wire
