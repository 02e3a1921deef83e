// ElasticSession: the generation protocol of Note [Generation switch]
// (worker_elastic.cc), shared by the Worker and the Python package.
#include "frugal/engine/elastic_session.h"

#include <algorithm>
#include <cstdio>

#include "control_kinds.h"
#include "frugal/comm/algorithms/collectives.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

ElasticSession::ElasticSession(std::unique_ptr<comm::MembershipClient> membership, std::chrono::milliseconds timeout,
                               std::chrono::milliseconds heartbeat_timeout, Clock& clock)
    : membership_(std::move(membership)), clock_(clock), timeout_(timeout), heartbeat_timeout_(heartbeat_timeout) {
  membership_->OnAbort([this](const Status& why) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (abortable_ != nullptr) abortable_->Abort(why);
  });
}

ElasticSession::~ElasticSession() {
  membership_.reset();  // stops the heartbeat thread before abort_mu_ goes
}

Result<comm::Generation> ElasticSession::Register(std::unique_ptr<comm::Transport>* transport) {
  FRUGAL_ASSIGN_OR_RETURN(generation_, membership_->Register({}, transport));
  return generation_;
}

Result<comm::Generation> ElasticSession::Next(std::unique_ptr<comm::Transport>* transport) {
  if (leaving()) return Status::NotFound("this worker leaves the job");
  std::vector<int64_t> held;
  for (const Snapshot& s : snapshots_) held.push_back(s.t);
  FRUGAL_ASSIGN_OR_RETURN(generation_, membership_->Register(held, transport));
  return generation_;
}

void ElasticSession::Enter(comm::Transport* transport) {
  std::lock_guard<std::mutex> lock(abort_mu_);
  abortable_ = transport;
}

void ElasticSession::Leave(bool abort) {
  std::lock_guard<std::mutex> lock(abort_mu_);
  if (abort && abortable_ != nullptr) {
    abortable_->Abort(Status::Unavailable("generation " + std::to_string(generation_.number) + " ended"));
  }
  abortable_ = nullptr;
}

void ElasticSession::Forget(const comm::Transport* transport) {
  std::lock_guard<std::mutex> lock(abort_mu_);
  if (abortable_ == transport) abortable_ = nullptr;
}

// A dropped snapshot's buffers go to the next one
// (Note [Recycled checkpoint buffers] in checkpoint.cc): one every --elastic-every steps would
// otherwise fault in its tens of MB afresh each time.
void ElasticSession::DropSnapshot(Snapshot& old) {
  for (auto& [name, bytes] : old.sections) RecycleCheckpointBuffer(std::move(bytes));
}

// Note [Snapshots made in the last one's place]: two snapshots are kept,
// the newest and the one before, and the new one's sections used to be
// built while both were still held: three snapshots' memory at each gate,
// and the new sections in fresh pages until the pool had seen enough
// dropped ones (an elastic 25 M language model, 0.9 GB a snapshot: 2.3-3.2
// s and 100-200 thousand page faults per gate for its first four gates).
// The one before the newest is not needed by then: every worker passed the
// newest's gate (its check is an all-gather after the snapshot) or restored
// it as a generation's start, so a rollback goes to the newest or to the
// new one. So it is dropped before the new one is built, and its buffers
// are the new one's from the third gate on.
void ElasticSession::MakeRoomForSnapshot() {
  while (snapshots_.size() > 1) {
    DropSnapshot(snapshots_.front());
    snapshots_.pop_front();
  }
}

void ElasticSession::TakeSnapshot(int64_t t, CheckpointSections sections) {
  if (HasSnapshot(t)) {  // a joiner's received copy
    DropSnapshot(snapshots_.back());
    snapshots_.pop_back();
  }
  snapshots_.push_back(Snapshot{t, std::move(sections), true});
  while (snapshots_.size() > 2) {
    DropSnapshot(snapshots_.front());
    snapshots_.pop_front();
  }
}

Result<GateDecision> ElasticSession::Check(comm::Transport& transport, int64_t t) {
  int64_t pending = membership_->pending();
  if (leave_signal_ && !leave_sent_) {
    leave_sent_ = true;
    Status st = membership_->RequestLeave();
    if (st.ok()) {
      pending = std::max(pending, generation_.number + 1);
    } else {
      leave_sent_ = false;
      std::fprintf(stderr, "frugal: cannot leave gracefully: %s\n", st.ToString().c_str());
    }
  }
  ByteWriter w;
  w.I64(pending);
  w.I64(membership_->stop_requested() ? 1 : 0);
  auto all = comm::AllGather(transport, ControlTag(t, kMembership), w.Take(), timeout_);
  if (!all.ok()) return all.status().WithContext("membership check at step " + std::to_string(t));
  bool change = false, stop = false;
  for (const comm::Bytes& b : *all) {
    ByteReader r(b, "membership check");
    FRUGAL_ASSIGN_OR_RETURN(int64_t p, r.I64());
    FRUGAL_ASSIGN_OR_RETURN(int64_t s, r.I64());
    change = change || p > generation_.number;
    stop = stop || s != 0;
  }
  if (stop) return GateDecision::kStop;
  return change ? GateDecision::kSwitch : GateDecision::kContinue;
}

Result<RestorePoint> ElasticSession::StateToRestore(comm::Transport& transport) {
  const comm::Generation& g = generation_;
  const int rank = transport.rank();
  const bool joined = std::find(g.joined.begin(), g.joined.end(), rank) != g.joined.end();
  const std::string what = "the state of step " + std::to_string(g.restore);
  // Snapshots newer than the restore point belong to rolled-back iterations.
  while (!snapshots_.empty() && snapshots_.back().t > g.restore) {
    DropSnapshot(snapshots_.back());
    snapshots_.pop_back();
  }
  RestorePoint point;
  point.step = g.restore;
  point.joined = joined;
  if (joined) {
    FRUGAL_ASSIGN_OR_RETURN(comm::Message m, transport.Recv(0, ControlTag(g.restore, kJoinState), timeout_));
    FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, ParseCheckpoint(m.payload, what + " from rank 0"));
    for (Snapshot& old : snapshots_) DropSnapshot(old);
    snapshots_.clear();
    snapshots_.push_back(Snapshot{g.restore, std::move(s), false});
    point.shared = &snapshots_.back().sections;
    return point;
  }
  if (!HasSnapshot(g.restore)) {
    return Status::Internal("the coordinator restores step " + std::to_string(g.restore) +
                            ", of which this worker has no snapshot");
  }
  Snapshot& snap = snapshots_.back();
  point.shared = &snap.sections;
  point.mine = snap.own ? &snap.sections : nullptr;
  return point;
}

Result<int64_t> ElasticSession::SendToJoiners(
    comm::Transport& transport, const std::function<void(CheckpointSections*, std::set<std::string>*)>& prepare) {
  const comm::Generation& g = generation_;
  if (transport.rank() != 0 || g.joined.empty()) return int64_t{0};
  if (!HasSnapshot(g.restore)) return Status::Internal("rank 0 has no snapshot of step " + std::to_string(g.restore));
  Snapshot& snap = snapshots_.back();
  // A joiner needs the shared state only: it starts with empty residuals
  // and sparsifier states, like a rank new to a resumed run.
  std::set<std::string> skip;
  if (prepare) prepare(&snap.sections, &skip);
  auto bytes = std::make_shared<const comm::Bytes>(EncodeCheckpoint(snap.sections, skip));
  const comm::Tag tag = ControlTag(g.restore, kJoinState);
  for (int r : g.joined) FRUGAL_RETURN_IF_ERROR(transport.Send(r, tag, bytes));
  return static_cast<int64_t>(bytes->size());
}

bool ElasticSession::AwaitChange() {
  const Clock::time_point deadline = clock_.Now() + 2 * heartbeat_timeout_ + std::chrono::seconds(2);
  if (membership_->pending() <= generation_.number) membership_->AskToProbe();
  while (clock_.Now() < deadline) {
    if (membership_->pending() > generation_.number) return true;
    clock_.SleepFor(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace frugal::engine
