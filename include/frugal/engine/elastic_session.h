// ElasticSession: one worker's side of an elastic job's membership
// (comm/membership.h), whatever trains in it: frugal train's Worker and
// frugal.DistributedModel in a user's script hold one each. It owns the
// membership client, the current generation, the in-memory snapshots of the
// run state and the leave request, and runs the generation protocol of
// Note [Generation switch] (src/engine/worker_elastic.cc): the check gate's
// agreement, the registration for the next generation with the snapshots
// held, the choice of the state to restore and its transfer from rank 0 to
// the joiners. What the state *is* (a strategy's sections, the model's
// buffers, a user's optimizer) is the caller's: the session stores, sends
// and returns CheckpointSections.
//
// Per generation the caller
//   Register / Next          -> the generation and a transport to its world
//   Enter(transport)         the heartbeat thread may abort it from now on
//   StateToRestore, then SendToJoiners (a generation that restores a step)
//   ... TakeSnapshot(t, ...) and Check(t) at its gates ...
//   Leave(abort)             before the transport is destroyed
// and Done() once it finished the run or left.
//
// Thread safety: one thread calls it; RequestLeaveSoon (a signal handler's
// flag) and the heartbeat thread's abort may come from any thread.
// Lifetime: a transport passed to Enter outlives the matching Leave.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "frugal/comm/membership/membership.h"
#include "frugal/comm/transport/transport.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"
#include "frugal/common/status.h"
#include "frugal/engine/checkpoint.h"

namespace frugal::engine {

// What a check gate decided: go on in this world, switch to the next
// generation (a join, a leave, a loss seen by a heartbeat), or stop the job.
enum class GateDecision { kContinue, kSwitch, kStop };

// The state a generation starts from (StateToRestore): rank 0's shared
// sections and, for a survivor whose snapshot holds its own part, `mine`
// (the same sections; null for a joiner).
struct RestorePoint {
  int64_t step = -1;
  bool joined = false;
  CheckpointSections* shared = nullptr;
  const CheckpointSections* mine = nullptr;
};

class ElasticSession {
 public:
  // REQUIRES: membership not null; `clock` outlives the session. timeout
  // bounds each transport wait of the protocol; heartbeat_timeout is the
  // coordinator's (AwaitChange waits twice that, plus 2 s, on `clock` for it
  // to declare a silent peer lost).
  ElasticSession(std::unique_ptr<comm::MembershipClient> membership, std::chrono::milliseconds timeout,
                 std::chrono::milliseconds heartbeat_timeout, Clock& clock = Env::Default());
  ~ElasticSession();
  ElasticSession(const ElasticSession&) = delete;
  ElasticSession& operator=(const ElasticSession&) = delete;

  // The first generation (a worker of the first world, or a joiner).
  Result<comm::Generation> Register(std::unique_ptr<comm::Transport>* transport);
  // The next generation, registered with the iterations of the snapshots
  // held; NotFound when this worker leaves the job instead (it asked to, or
  // the coordinator asked it to): then call Done.
  Result<comm::Generation> Next(std::unique_ptr<comm::Transport>* transport);
  const comm::Generation& generation() const { return generation_; }

  // The heartbeat thread aborts `transport` when a member dies.
  void Enter(comm::Transport* transport);
  // Before the world's transport is destroyed; with `abort` its waits are
  // woken first (the world failed, or its threads must stop).
  void Leave(bool abort);
  // `transport` is about to be destroyed: if it is the entered one, as Leave(false).
  void Forget(const comm::Transport* transport);

  // Keeps the run state "after t-1" taken at the gate of t; the newest two
  // are kept. A dropped snapshot's buffers are recycled.
  void TakeSnapshot(int64_t t, CheckpointSections sections);
  // Before the sections of a new snapshot are built: drops every snapshot
  // but the newest, so that the new one is built in their recycled buffers
  // (Note [Snapshots made in the last one's place] in elastic_session.cc).
  void MakeRoomForSnapshot();
  bool HasSnapshot(int64_t t) const { return !snapshots_.empty() && snapshots_.back().t == t; }
  int64_t newest_snapshot() const { return snapshots_.empty() ? -1 : snapshots_.back().t; }

  // The check gate of iteration t (after a TakeSnapshot(t)): sends a leave
  // request that RequestLeaveSoon asked for, and all-gathers what every
  // member's heartbeats learnt.
  Result<GateDecision> Check(comm::Transport& transport, int64_t t);

  // The state of generation().restore: a joiner receives rank 0's (and keeps
  // it as its snapshot), a survivor takes its own snapshot; newer snapshots
  // (rolled-back iterations) are dropped. The sections stay owned by the
  // session until the next TakeSnapshot.
  Result<RestorePoint> StateToRestore(comm::Transport& transport);
  // Rank 0 of a generation with joiners: sends them its restored snapshot,
  // less what `prepare` marks for them to rebuild themselves (a strategy's
  // PrepareForJoiners). Returns the bytes sent to each (0 elsewhere).
  Result<int64_t> SendToJoiners(
      comm::Transport& transport,
      const std::function<void(CheckpointSections*, std::set<std::string>*)>& prepare);

  // After a failed wait: whether the coordinator starts a new generation
  // (a peer died) within twice the heartbeat timeout plus 2 s.
  bool AwaitChange();

  void ReportIteration(int64_t t) { membership_->ReportIteration(t); }
  // Asks to leave at the next check gate (SIGTERM). Any thread.
  void RequestLeaveSoon() { leave_signal_ = true; }
  std::atomic<bool>& leave_signal() { return leave_signal_; }
  // This worker leaves at the gate that just switched (it asked, or was asked).
  bool leaving() const { return leave_sent_ || membership_->leave_requested(); }
  void Done() { membership_->Done(); }
  // Out of the job now, as a death: the others switch without it.
  void Withdraw() { membership_->Withdraw(); }

 private:
  struct Snapshot {
    int64_t t = 0;
    CheckpointSections sections;
    bool own = true;  // false: received by a joiner, the own part is rank 0's
  };
  void DropSnapshot(Snapshot& old);

  std::unique_ptr<comm::MembershipClient> membership_;
  Clock& clock_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds heartbeat_timeout_;
  comm::Generation generation_;
  std::deque<Snapshot> snapshots_;  // oldest first, at most two
  std::atomic<bool> leave_signal_{false};
  bool leave_sent_ = false;
  std::mutex abort_mu_;
  comm::Transport* abortable_ = nullptr;  // GUARDED_BY(abort_mu_): the transport an abort wakes
};

}  // namespace frugal::engine
