// MembershipServer: liveness and the forming of generations (membership.h).
//
// Note [Forming a generation]
// The first generation forms like the rendezvous: once `world_size`
// workers have registered, in rank order (requested ranks kept, the others
// assigned in arrival order). A later one forms once every surviving member
// (not lost, not leaving, not done) has registered again, plus the joiners
// that registered meanwhile. Ranks: survivors in their old rank order, then
// joiners; so rank 0 is the lowest surviving old rank and holds the state
// the joiners receive. The restore point is the newest snapshot iteration
// that every survivor holds: the workers roll back to it (after a graceful
// switch every survivor took it at the switch gate, so nothing is lost).
// A member that goes silent while the round waits is dropped from it; a
// round that does not complete within `timeout` fails the job, as does a
// round with fewer than `min_workers` workers.
#include <algorithm>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "frugal/comm/membership/membership.h"
#include "membership_server_impl.h"
#include "membership_wire.h"
#include "rendezvous_wire.h"

namespace frugal::comm {

using nlohmann::json;

// Note [Silent members]
// A member's heartbeats stop when its process dies and also when the link
// between its site and ours is down. Declaring it dead after a couple of
// seconds turns every WAN blip into a new generation (the run rolls back
// and its world shrinks); waiting the link grace for every death costs each
// SIGKILL half a minute. So a member silent for heartbeat_timeout is probed
// as the transport probes a lost peer (Note [Dead process or broken link]
// in peer_probe.cc): its host refusing connections to its transport's port
// means the process is gone, and it is lost at once; otherwise it is lost
// only once it has been silent for the link grace. Its heartbeats, queued
// by its ZeroMQ socket through the outage, arrive when the link is back.
//
// The heartbeat timeout is most of what a SIGKILL costs the others, and a
// survivor usually knows sooner: its transport saw the peer's connection
// drop and its host refuse (Note [Dead process or broken link]), and its
// wait failed. Its session then asks the coordinator to probe ("probe"):
// every member becomes a suspect, probed (every 250 ms while it stays one)
// once it has missed a heartbeat, instead of after heartbeat_timeout. A
// probe of a live process is accepted and its next heartbeat clears it, so
// a false suspicion costs a TCP connect or two; a dead one's host refuses,
// and it is lost. "Missed" follows the member's own heartbeats: silent for
// twice the median gap of its last 8 (a WAN blip is one long gap, not the
// median) and at least kMissedHeartbeat. Probed at once, a live survivor
// would be declared dead whenever it has already closed its generation's
// listener (the port the probe knocks on) on its way to the next one while
// its heartbeats go on (seen: 101 ms after its last heartbeat).
namespace {
// The client's default heartbeat interval is 250 ms.
constexpr std::chrono::milliseconds kMissedHeartbeat{300};
}  // namespace

Clock::duration Member::MissedHeartbeat() const {
  Clock::duration median = kMissedHeartbeat / 2;
  if (!heartbeat_gaps.empty()) {
    std::vector<Clock::duration> gaps(heartbeat_gaps.begin(), heartbeat_gaps.end());
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
    median = gaps[gaps.size() / 2];
  }
  return std::max<Clock::duration>(2 * median, kMissedHeartbeat);
}

bool MembershipServer::Impl::HostRefuses(Member& m, Clock::time_point now) {
  PeerProbe& probe = *m.probe;
  if (!probe.started()) {
    if (now >= m.next_probe) probe.Start(m.info.endpoint, std::chrono::milliseconds(1000), now);
    return false;
  }
  const PeerProbe::Answer answer = probe.Check(now);
  if (answer == PeerProbe::Answer::kPending) return false;
  probe.Reset();
  m.next_probe = now + std::chrono::milliseconds(250);
  return answer == PeerProbe::Answer::kRefused;
}

void MembershipServer::Impl::MarkLost(Member& m, const std::string& why) {
  m.gone = true;
  m.probe->Reset();
  Log("worker " + m.id + " (rank " + std::to_string(m.info.rank) + ") lost: " + why);
  regs.erase(std::remove_if(regs.begin(), regs.end(), [&](const Registration& r) { return r.id == m.id; }),
             regs.end());
  if (!m.leaving) WantChange(true);
}

void MembershipServer::Impl::CheckLiveness() {
  const auto now = clock().Now();
  if (recovering && now >= recover_deadline) FinishRecovery();  // Note [Coordinator restart]
  for (Member& m : members) {
    if (m.gone || m.done) continue;
    const auto silent = now - m.last_seen;
    if (silent <= options.heartbeat_timeout && !m.suspect) {
      m.probe->Reset();
      continue;
    }
    std::string why;
    if (silent > std::max(options.link_grace, options.heartbeat_timeout)) {
      why = "no heartbeat for the link grace of " + std::to_string(options.link_grace.count()) + " ms";
    } else if (silent >= m.MissedHeartbeat() && HostRefuses(m, now)) {
      why = "no heartbeat for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()) +
            " ms, and its host refuses connections to it (process died)";
    } else {
      continue;
    }
    MarkLost(m, why);
  }
  for (auto it = joiner_seen.begin(); it != joiner_seen.end();) {
    if (now - it->second <= options.heartbeat_timeout) {
      ++it;
      continue;
    }
    Log("joining worker " + it->first + " lost before it joined");
    const std::string id = it->first;
    regs.erase(std::remove_if(regs.begin(), regs.end(), [&](const Registration& r) { return r.id == id; }), regs.end());
    it = joiner_seen.erase(it);
  }
  const bool all_lost = generation > 0 && !members.empty() &&
                        std::all_of(members.begin(), members.end(), [](const Member& m) { return m.gone; });
  if (all_lost) FailJob(Status::Unavailable("every worker of the job was lost"));
  if (failed.ok() && !regs.empty() && now > forming_deadline) {
    FailJob(Status::Timeout("generation " + std::to_string(generation + 1) + " did not form within " +
                            std::to_string(options.timeout.count()) + " ms: " + std::to_string(regs.size()) +
                            " worker(s) registered"));
  }
}

bool MembershipServer::Impl::TryForm() {
  if (generation == 0) {
    if (static_cast<int>(regs.size()) < options.world_size) return false;
    FormFirst();
    return true;
  }
  if (pending == 0 || regs.empty()) return false;
  const bool finished = std::all_of(members.begin(), members.end(), [](const Member& m) { return m.done || m.gone; }) &&
                        std::any_of(members.begin(), members.end(), [](const Member& m) { return m.done; });
  if (finished) {
    // A join that arrives as the last members finish: the run is complete,
    // so the joiner is told so instead of the job failing for want of a
    // member holding the state.
    for (Registration& r : regs) {
      Log("worker " + r.id + " came too late: the job has finished");
      wire::Reply(router, r.routing, json{{"error", "the job has finished; nothing to join"}, {"code", "finished"}});
    }
    regs.clear();
    joiner_seen.clear();
    pending = 0;
    return false;
  }
  for (const Member& m : members) {
    if (m.gone || m.leaving || m.done) continue;
    const bool registered =
        std::any_of(regs.begin(), regs.end(), [&](const Registration& r) { return r.id == m.id; });
    if (!registered) return false;
  }
  FormNext();
  return true;
}

void MembershipServer::Impl::FormFirst() {
  std::vector<bool> taken(options.world_size, false);
  for (const Registration& r : regs) {
    if (r.info.rank >= 0) taken[r.info.rank] = true;
  }
  int next_free = 0;
  for (Registration& r : regs) {
    if (r.info.rank >= 0) continue;
    while (taken[next_free]) ++next_free;
    r.info.rank = next_free;
    taken[next_free] = true;
  }
  std::sort(regs.begin(), regs.end(), [](const Registration& a, const Registration& b) { return a.info.rank < b.info.rank; });
  Generation g;
  g.number = 1;
  for (const Registration& r : regs) g.peers.push_back(r.info);
  const bool elastic = std::any_of(regs.begin(), regs.end(), [](const Registration& r) { return !r.id.empty(); });
  for (const Registration& r : regs) {
    g.rank = r.info.rank;
    wire::Reply(router, r.routing, membership_wire::TableJson(g));
    if (elastic) members.push_back(Member{r.id, r.info, clock().Now()});
  }
  generation = 1;
  regs.clear();
  Log("generation 1 formed: " + std::to_string(g.peers.size()) + " workers");
}

void MembershipServer::Impl::FormNext() {
  std::vector<Registration> order;
  std::vector<std::vector<int64_t>> survivor_snapshots;
  for (const Member& m : members) {  // survivors holding state, in old rank order
    for (Registration& r : regs) {
      if (r.id != m.id || r.snapshots.empty()) continue;
      survivor_snapshots.push_back(r.snapshots);
      order.push_back(std::move(r));
    }
  }
  const size_t survivors = order.size();
  // Then the workers without state: members that joined but never got it
  // (their first world failed), and joiners.
  for (Registration& r : regs) {
    if (!r.id.empty() && r.routing.size() > 0) order.push_back(std::move(r));
  }
  regs.clear();
  if (static_cast<int>(order.size()) < options.min_workers || survivors == 0) {
    FailJob(Status::Unavailable(survivors == 0 ? std::string("no worker that holds the run's state survived")
                                               : "only " + std::to_string(order.size()) +
                                                     " worker(s) remain, fewer than --min-workers " +
                                                     std::to_string(options.min_workers)));
    for (Registration& r : order) wire::Reply(router, r.routing, json{{"error", failed.message()}, {"code", "failed"}});
    return;
  }
  // The newest snapshot every survivor holds.
  std::set<int64_t> common(survivor_snapshots[0].begin(), survivor_snapshots[0].end());
  for (const auto& s : survivor_snapshots) {
    std::set<int64_t> next;
    for (int64_t t : s) {
      if (common.count(t)) next.insert(t);
    }
    common = next;
  }
  if (common.empty()) {
    FailJob(Status::Unavailable("the surviving workers hold no common snapshot to roll back to"));
    for (Registration& r : order) wire::Reply(router, r.routing, json{{"error", failed.message()}, {"code", "failed"}});
    return;
  }
  Generation g;
  g.number = generation + 1;
  g.restore = *common.rbegin();
  for (size_t i = 0; i < order.size(); ++i) {
    order[i].info.rank = static_cast<int>(i);
    g.peers.push_back(order[i].info);
    if (i >= survivors) g.joined.push_back(static_cast<int>(i));
  }
  std::vector<Member> next;
  for (Registration& r : order) {
    g.rank = r.info.rank;
    wire::Reply(router, r.routing, membership_wire::TableJson(g));
    next.push_back(Member{r.id, r.info, clock().Now()});
    joiner_seen.erase(r.id);
  }
  for (const Member& m : members) {
    if (m.leaving && !m.done && !m.gone) next.push_back(m);  // still to say done; not in the world
  }
  members = std::move(next);
  generation = g.number;
  pending = joiner_seen.empty() ? 0 : generation + 1;
  abort = false;
  Log("generation " + std::to_string(generation) + " formed: " + std::to_string(order.size()) + " workers (" +
      std::to_string(order.size() - survivors) + " joined), restoring the state of iteration " +
      std::to_string(g.restore));
}

void MembershipServer::Impl::FailJob(const Status& why) {
  failed = why;
  Log("job failed: " + why.message());
  for (Registration& r : regs) wire::Reply(router, r.routing, json{{"error", why.message()}, {"code", "failed"}});
  regs.clear();
}

bool MembershipServer::Impl::Over() const {
  if (generation == 0 || recovering || !regs.empty() || !joiner_seen.empty()) return false;
  return std::all_of(members.begin(), members.end(), [](const Member& m) { return m.done || m.gone; }) &&
         std::any_of(members.begin(), members.end(), [](const Member& m) { return m.done; });
}

}  // namespace frugal::comm
