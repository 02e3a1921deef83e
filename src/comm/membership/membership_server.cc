// The coordinator's side of elastic membership (membership.h). One thread
// polls the ROUTER socket; every request is answered at once except a
// registration, whose answer (the table) waits until its generation forms.
#include <algorithm>
#include <cstdint>
#include <atomic>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "frugal/comm/membership/membership.h"
#include "membership_server_impl.h"
#include "membership_wire.h"
#include "rendezvous_wire.h"
#include "transport/zmq/rate_limited_log.h"
#include "transport/zmq/zap_handler.h"
#include "transport/zmq/zmq_socket_setup.h"

namespace frugal::comm {

using nlohmann::json;

namespace {
constexpr std::chrono::milliseconds kPoll{50};
}  // namespace

MembershipServer::MembershipServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MembershipServer::~MembershipServer() = default;
const std::string& MembershipServer::endpoint() const { return impl_->endpoint; }
void MembershipServer::Shutdown() { impl_->shutdown = true; }
Status MembershipServer::Serve() { return impl_->Serve(); }

Result<std::unique_ptr<MembershipServer>> MembershipServer::Bind(const std::string& address,
                                                                 MembershipOptions options) {
  if (options.world_size < 1) return Status::InvalidArgument("coordinator: --world must be at least 1");
  if (options.min_workers < 1) return Status::InvalidArgument("coordinator: --min-workers must be at least 1");
  FRUGAL_RETURN_IF_ERROR(ValidateSecurity(options.zmq.security));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  FRUGAL_RETURN_IF_ERROR(BindListener(
      impl->context, address, impl->options.zmq, "coordinator: cannot listen on " + address,
      [](zmq::socket_t& router) { router.set(zmq::sockopt::maxmsgsize, wire::kMaxMessageBytes); }, &impl->zap,
      &impl->router, &impl->endpoint));
  return std::unique_ptr<MembershipServer>(new MembershipServer(std::move(impl)));
}

Status MembershipServer::Impl::Serve() {
  RateLimitedLog log(options.zmq.log, clock());
  forming_deadline = clock().Now() + options.timeout;
  try {
    while (!shutdown) {
      std::vector<zmq::message_t> parts;
      if (wire::ReceiveMessage(router, kPoll, &parts)) {
        if (parts.size() == 2) {
          Handle(parts);
        } else {
          log.Report("coordinator at " + endpoint + " dropped a message of " + std::to_string(parts.size()) +
                     " frames from " + (parts.empty() ? std::string("unknown") : PeerAddressOf(parts.back())));
        }
      }
      if (!failed.ok()) break;
      CheckLiveness();
      if (!failed.ok()) break;
      if (TryForm() && generation == 1 && members.empty()) return frugal::Status::Ok();  // plain rendezvous
      if (Over()) return frugal::Status::Ok();
    }
    if (shutdown) return frugal::Status::Ok();
    // Failed: keep answering for a moment so waiting workers learn why.
    const auto until = clock().Now() + options.heartbeat_timeout;
    while (clock().Now() < until) {
      std::vector<zmq::message_t> parts;
      if (wire::ReceiveMessage(router, kPoll, &parts) && parts.size() == 2) Handle(parts);
    }
    return failed;
  } catch (const zmq::error_t& e) {
    return ZmqError("coordinator at " + endpoint, e);
  }
}

void MembershipServer::Impl::Handle(std::vector<zmq::message_t>& parts) {
  json req = json::parse(parts[1].to_string(), nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) {
    wire::Reply(router, parts[0], json{{"error", "malformed request: expected a JSON object"}});
    return;
  }
  if (!failed.ok()) {
    wire::Reply(router, parts[0], json{{"error", failed.message()}, {"code", "failed"}});
    return;
  }
  // A field of the wrong type (a stranger's or a broken client's request)
  // is answered with an error; it never reaches the loop.
  try {
    const std::string op = req.value("op", std::string());
    if (op.empty() || op == "register") {
      zmq::message_t copy(parts[0].data(), parts[0].size());
      HandleRegister(std::move(copy), PeerKeyOf(parts[1]), req, op.empty());
    } else if (op == "heartbeat") {
      wire::Reply(router, parts[0], HandleHeartbeat(req, PeerKeyOf(parts[1])));
    } else {
      wire::Reply(router, parts[0], HandleControl(op, req));
    }
  } catch (const json::exception& e) {
    wire::Reply(router, parts[0], json{{"error", std::string("malformed request: ") + e.what()}});
  }
}

void MembershipServer::Impl::HandleRegister(zmq::message_t routing, const std::string& key, const json& req,
                                            bool plain) {
  Registration r;
  std::string why;
  if (!membership_wire::ParseRegistration(req, plain, &r, &why)) {
    wire::Reply(router, routing, json{{"error", why}});
    return;
  }
  // With CURVE the key is the one ZAP admitted on this connection.
  r.info.public_key = key;
  r.routing = std::move(routing);
  Admit(std::move(r));
}

// A parsed registration: into the first world, as a joiner, or as a member
// registering for the next generation; or refused.
void MembershipServer::Impl::Admit(Registration r) {
  if (recovering) {  // judged once the membership is known (Note [Coordinator restart])
    held.push_back(std::move(r));
    return;
  }
  const bool plain = r.id.empty();
  if (generation == 0) {
    const bool taken = r.info.rank >= 0 && std::any_of(regs.begin(), regs.end(), [&](const Registration& o) {
                         return o.info.rank == r.info.rank;
                       });
    if (r.info.rank >= options.world_size || taken || static_cast<int>(regs.size()) >= options.world_size) {
      wire::Reply(router, r.routing,
                  json{{"error", taken ? "rank " + std::to_string(r.info.rank) + " is already registered"
                                       : "the world of " + std::to_string(options.world_size) + " ranks is full"}});
      return;
    }
  } else if (plain) {
    wire::Reply(router, r.routing, json{{"error", "this job is running; an elastic worker joins with --join"}});
    return;
  } else if (r.join) {
    if (Find(r.id) != nullptr) {
      wire::Reply(router, r.routing, json{{"error", "member " + r.id + " is already in the job"}});
      return;
    }
    const int64_t world_after = LiveMembers() + static_cast<int64_t>(joiner_seen.size()) + 1;
    if (r.max_world > 0 && world_after > r.max_world) {
      Log("refused worker " + r.id + ": " + std::to_string(world_after) + " workers would exceed its limit of " +
          std::to_string(r.max_world));
      wire::Reply(router, r.routing,
                  json{{"error", "joining would make " + std::to_string(world_after) + " workers, more than the " +
                                     std::to_string(r.max_world) + " the run's --global-batch allows (at least one "
                                     "sample per worker); raise --global-batch or stop a worker first"},
                       {"code", "refused"}});
      return;
    }
    Log("worker " + r.id + " (" + r.info.cluster + ") asks to join");
    joiner_seen[r.id] = clock().Now();
    WantChange(false);
  } else {
    Member* m = Find(r.id);
    if (m != nullptr && m->leaving && !m->gone) {
      wire::Reply(router, r.routing, json{{"error", "worker " + r.id + " leaves the job"}, {"code", "left"}});
      return;
    }
    if (m == nullptr || m->gone) {
      wire::Reply(router, r.routing,
                  json{{"error", "worker " + r.id + " is not a member of the job (declared lost after " +
                                     std::to_string(options.heartbeat_timeout.count()) + " ms without a heartbeat?)"}});
      return;
    }
    m->last_seen = clock().Now();
    WantChange(false);
  }
  regs.erase(std::remove_if(regs.begin(), regs.end(), [&](const Registration& o) { return !r.id.empty() && o.id == r.id; }),
             regs.end());
  if (regs.empty() && generation > 0) forming_deadline = clock().Now() + options.timeout;
  regs.push_back(std::move(r));
}

json MembershipServer::Impl::HandleHeartbeat(const json& req, const std::string& key) {
  membership_wire::Heartbeat hb;
  std::string why;
  if (!membership_wire::ParseHeartbeat(req, &hb, &why)) return json{{"error", why}};
  json reply{{"generation", generation}, {"pending", pending}, {"abort", abort}, {"stop", stop}};
  if (Member* m = Find(hb.id); m != nullptr && !m->gone) {
    const auto now = clock().Now();
    m->heartbeat_gaps.push_back(now - m->last_seen);
    if (m->heartbeat_gaps.size() > 8) m->heartbeat_gaps.pop_front();
    m->last_seen = now;
    m->suspect = false;
    m->iteration = hb.iteration;
    reply["leave"] = m->leaving;
    return reply;
  }
  if (auto it = joiner_seen.find(hb.id); it != joiner_seen.end()) {
    it->second = clock().Now();
    return reply;
  }
  if (std::any_of(held.begin(), held.end(), [&](const Registration& r) { return r.id == hb.id; })) return reply;
  if (Adopt(hb, key)) {
    reply["generation"] = generation;
    reply["pending"] = pending;
    return reply;
  }
  if (generation == 0) return reply;  // registered (or about to), the world is not formed yet
  return json{{"error", "worker " + hb.id + " is not a member of this job"}, {"code", "unknown"}};
}

// Note [Coordinator restart]
// Workers keep training while their coordinator is away (their heartbeats
// go unanswered). A coordinator restarted on the same address knows
// nothing; every heartbeat carries the member's id, generation, iteration
// and its entry in that generation's table (rank, endpoint, cluster) with
// the table's size, so the new coordinator adopts the running generation
// from them:
//   - The first heartbeat of a generation g >= 1 that reaches a server
//     without a generation starts a *recovery*: the server takes g as its
//     generation and the heartbeat's world size as the size to rebuild.
//     First-world registrations it held are kept back with the rest (below).
//   - Each member of g that beats is added in its rank (with the key its
//     connection authenticated, under CURVE). A heartbeat of another
//     generation or size, or for a rank already taken, is not adopted:
//     the worker is told it is not a member.
//   - The recovery ends once every rank 0..world-1 is heard, or after
//     heartbeat_timeout from its start: a live member beats every 250 ms, so
//     a rank not heard by then is treated as lost. Its worker died while no
//     coordinator was up, and the normal loss round starts (abort, pending
//     g+1): the survivors whose waits on it failed are still in
//     Worker::AwaitChange's grace if the coordinator came back in time.
//   - Meanwhile nothing forms and nothing is pending; registrations (a
//     joiner, or a member whose request reached the new server before its
//     heartbeats did) are held and judged when the recovery ends, as if
//     they had arrived then.
// From then on it serves as if it had never left (joins, leaves, losses).
// A heartbeat that arrives after the recovery ended is not adopted: a rank
// not heard in time was declared lost, as after a silence in a running job.
bool MembershipServer::Impl::Adopt(const membership_wire::Heartbeat& hb, const std::string& key) {
  if (hb.info.rank < 0) return false;
  if (generation == 0) {
    generation = hb.generation;
    recovering = true;
    recover_world = hb.world;
    recover_deadline = clock().Now() + options.heartbeat_timeout;
    for (Registration& r : regs) held.push_back(std::move(r));
    regs.clear();
    Log("restarted: recovering generation " + std::to_string(generation) + " from the workers' heartbeats");
  } else if (!recovering || hb.generation != generation || hb.world != recover_world) {
    return false;
  }
  for (const Member& m : members) {
    if (m.info.rank == hb.info.rank) return false;
  }
  Member m{hb.id, hb.info, clock().Now()};
  m.info.public_key = key;
  m.iteration = hb.iteration;
  members.push_back(std::move(m));
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.info.rank < b.info.rank; });
  Log("recovered worker " + hb.id + " (rank " + std::to_string(hb.info.rank) + ") of generation " +
      std::to_string(generation));
  if (recover_world > 0 && static_cast<int64_t>(members.size()) == recover_world) FinishRecovery();
  return true;
}

// The end of a recovery (Note [Coordinator restart]): ranks not heard are
// lost, held registrations are judged.
void MembershipServer::Impl::FinishRecovery() {
  recovering = false;
  std::vector<bool> heard(static_cast<size_t>(recover_world), false);
  for (const Member& m : members) {
    if (m.info.rank < recover_world) heard[m.info.rank] = true;
  }
  const size_t adopted = members.size();
  for (int64_t r = 0; r < recover_world; ++r) {
    if (heard[r]) continue;
    Member lost{"", PeerInfo{static_cast<int>(r), "", "", ""}, clock().Now()};
    lost.gone = true;
    members.push_back(std::move(lost));
    Log("rank " + std::to_string(r) + " of generation " + std::to_string(generation) +
        " lost: not heard from since the restart");
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.info.rank < b.info.rank; });
  Log("recovered generation " + std::to_string(generation) + ": " + std::to_string(adopted) + " of " +
      (recover_world > 0 ? std::to_string(recover_world) : std::string("?")) + " workers");
  if (members.size() > adopted) WantChange(true);
  std::vector<Registration> waiting = std::move(held);
  held.clear();
  for (Registration& r : waiting) Admit(std::move(r));
}

json MembershipServer::Impl::HandleControl(const std::string& op, const json& req) {
  if (op == "status") return StatusJson();
  if (op == "done" || op == "leave") {
    Member* m = Find(req.value("id", std::string()));
    if (m == nullptr) return json{{"error", "unknown worker"}};
    if (op == "done") {
      m->done = true;
      Log("worker " + m->id + " (rank " + std::to_string(m->info.rank) + ") finished");
    } else if (!m->leaving) {
      m->leaving = true;
      WantChange(false);
      Log("worker " + m->id + " (rank " + std::to_string(m->info.rank) + ") leaves");
    }
    return json{{"ok", true}};
  }
  if (op == "probe") {  // a wait on the generation failed (Note [Silent members])
    for (Member& m : members) m.suspect = !m.gone && !m.done;
    return json{{"ok", true}};
  }
  if (op == "withdraw") {
    // A worker that cannot go on in the generation (a script rolled back
    // past the end of its loop, Note [Finishing an elastic script] in
    // python/frugal/_model.py): lost now, as a dead one, so the others'
    // waits on it end at once instead of at their timeout.
    Member* m = Find(req.value("id", std::string()));
    if (m == nullptr) return json{{"error", "unknown worker"}};
    if (!m->gone) MarkLost(*m, "it withdrew");
    return json{{"ok", true}};
  }
  if (op == "stop") {
    stop = true;
    Log("stop requested");
    return json{{"ok", true}};
  }
  if (op == "resize") {
    auto workers = wire::IntField(req, "workers", 0, 65535, "resize");
    if (!workers.ok()) return json{{"error", "resize needs \"workers\", an integer from 0 to 65535"}};
    const int64_t want = *workers;
    int64_t active = LiveMembers();
    if (want < options.min_workers) {
      return json{{"error", "cannot resize to " + std::to_string(want) + " workers: --min-workers is " +
                                std::to_string(options.min_workers)}};
    }
    if (want >= active) {
      return json{{"ok", true},
                  {"note", want == active ? "already at that size"
                                          : "start " + std::to_string(want - active) +
                                                " more worker(s) with: frugal worker --join --coordinator " + endpoint}};
    }
    for (auto it = members.rbegin(); it != members.rend() && active > want; ++it) {
      if (it->gone || it->leaving || it->done) continue;
      it->leaving = true;
      --active;
    }
    WantChange(false);
    Log("resize to " + std::to_string(want) + " workers");
    return json{{"ok", true}};
  }
  return json{{"error", "unknown op '" + op + "' (register, heartbeat, leave, withdraw, probe, done, status, resize, stop)"}};
}

json MembershipServer::Impl::StatusJson() const {
  json ms = json::array();
  const auto now = clock().Now();
  for (const Member& m : members) {
    ms.push_back({{"id", m.id},
                  {"rank", m.info.rank},
                  {"cluster", m.info.cluster},
                  {"endpoint", m.info.endpoint},
                  {"iteration", m.iteration},
                  {"seen_s_ago", std::chrono::duration<double>(now - m.last_seen).count()},
                  {"state", m.gone ? "lost" : m.done ? "done" : m.leaving ? "leaving" : "running"}});
  }
  return json{{"generation", generation},
              {"pending", pending},
              {"joining", joiner_seen.size()},
              {"registered", regs.size() + held.size()},
              {"min_workers", options.min_workers},
              {"stop", stop},
              {"recovering", recovering},
              {"members", ms}};
}

}  // namespace frugal::comm
