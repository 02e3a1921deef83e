// MembershipServer's state, shared by membership_server.cc (requests) and
// membership_forming.cc (liveness, forming generations). Internal to comm.
#pragma once

#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "frugal/comm/membership/membership.h"
#include "membership_wire.h"
#include "transport/peer_probe.h"
#include "rendezvous_wire.h"
#include "transport/zmq/zap_handler.h"

namespace frugal::comm {


// Membership of the current generation (Note [Forming a generation]).
struct Member {
  Member() = default;
  Member(std::string member_id, PeerInfo member_info, Clock::time_point seen)
      : id(std::move(member_id)), info(std::move(member_info)), last_seen(seen) {}

  std::string id;
  PeerInfo info;
  Clock::time_point last_seen;
  int64_t iteration = -1;
  bool leaving = false;  // asked to leave; not in the next generation
  bool done = false;     // finished or left
  bool gone = false;     // declared dead
  // A peer's wait on the generation failed: probe it now and until its next
  // heartbeat, not only after heartbeat_timeout (Note [Silent members]).
  bool suspect = false;
  // The gaps between its last heartbeats (Note [Silent members]): a
  // suspect is lost on a refused probe only once it has missed one.
  std::deque<Clock::duration> heartbeat_gaps;
  // Twice the median of heartbeat_gaps, at least kMissedHeartbeat.
  Clock::duration MissedHeartbeat() const;
  // While silent: probes of its transport's port (Note [Silent members]).
  std::shared_ptr<PeerProbe> probe = std::make_shared<PeerProbe>();
  Clock::time_point next_probe;
};

struct Registration : membership_wire::RegistrationRequest {
  zmq::message_t routing;
};

struct MembershipServer::Impl {
  MembershipOptions options;
  // What the heartbeat, forming and recovery deadlines run on.
  const Clock& clock() const { return wire::ClockOf(options.zmq); }
  zmq::context_t context{1};
  std::unique_ptr<ZapHandler> zap;
  zmq::socket_t router;
  std::string endpoint;
  std::atomic<bool> shutdown{false};

  int64_t generation = 0;
  std::vector<Member> members;             // the current generation, index = rank
  std::map<std::string, Clock::time_point> joiner_seen;  // joiners' last heartbeat
  std::vector<Registration> regs;          // waiting for the next table
  Clock::time_point forming_deadline = Clock::time_point::max();
  int64_t pending = 0;  // generation wanted (0: none)
  bool abort = false;   // the pending change follows a death
  bool stop = false;
  Status failed;
  // Note [Coordinator restart]: adopting a running generation from heartbeats.
  bool recovering = false;
  int64_t recover_world = 0;  // the adopted generation's size (0: its heartbeats do not say)
  Clock::time_point recover_deadline = Clock::time_point::max();
  std::vector<Registration> held;  // registrations that wait for the recovery to end

  void Log(const std::string& line) const {
    if (options.log) {
      options.log(line);
    } else {
      std::fprintf(stderr, "frugal coordinator: %s\n", line.c_str());
    }
  }
  // Members that will be in the next generation (not lost, leaving or done).
  int64_t LiveMembers() const {
    int64_t n = 0;
    for (const Member& m : members) n += (!m.gone && !m.leaving && !m.done) ? 1 : 0;
    return n;
  }
  Member* Find(const std::string& id) {
    if (id.empty()) return nullptr;  // the ranks a recovery never heard have no id
    for (Member& m : members) {
      if (m.id == id) return &m;
    }
    return nullptr;
  }
  void WantChange(bool after_death) {
    if (pending == 0) pending = generation + 1;
    abort = abort || after_death;
  }

  Status Serve();
  void Handle(std::vector<zmq::message_t>& parts);
  void HandleRegister(zmq::message_t routing, const std::string& key, const nlohmann::json& req, bool plain);
  void Admit(Registration r);
  nlohmann::json HandleHeartbeat(const nlohmann::json& req, const std::string& key);
  nlohmann::json HandleControl(const std::string& op, const nlohmann::json& req);
  nlohmann::json StatusJson() const;
  bool Adopt(const membership_wire::Heartbeat& hb, const std::string& key);
  void FinishRecovery();
  void CheckLiveness();
  // m is lost (its process died, or it withdrew): out of the next
  // generation; the others abort their waits on it unless it was leaving.
  void MarkLost(Member& m, const std::string& why);
  // Probes a silent member's host; true once it refused (Note [Silent members]).
  bool HostRefuses(Member& m, Clock::time_point now);
  bool TryForm();
  void FormFirst();
  void FormNext();
  void FailJob(const frugal::Status& why);
  bool Over() const;
};

}  // namespace frugal::comm
