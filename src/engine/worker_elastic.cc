// Worker::Impl: membership generations of an elastic run (comm/membership.h).
//
// Note [Generation switch]
// Every `elastic_every` steps, at the gate of iteration t (after
// BeginIteration, so the pipeline can be drained), each worker
//   1. keeps an in-memory snapshot of its run state "after t-1" (also at the
//      first gate of every generation, so its start can be rolled back to): the same
//      sections as rank 0's checkpoint (masters, optimizer state, its own
//      residuals, parameters, buffers, data position); the newest two are
//      kept;
//   2. all-gathers what its heartbeats learnt: a pending generation, a stop.
// If anyone saw a change pending, every worker leaves the world at this same
// gate: nothing of iteration t was submitted, every message of t-1 was
// consumed by the drain, so no gradient of the old world is in flight. A
// stop ends the run here instead.
//
// A death does not wait for a gate: the coordinator declares the worker
// lost (no heartbeat for heartbeat_timeout), every survivor's heartbeat
// thread aborts its transport (Transport::Abort), the pipeline's waits fail,
// and the worker tears the world down, dropping whatever of the old world is
// half done (a torn iteration, messages in flight: they die with the old
// transport).
//
// Either way each worker then registers for the next generation with the
// iterations of its snapshots. The coordinator replies with the new table
// and the restore point, the newest snapshot every survivor holds (Note
// [Forming a generation]). Survivors restore their own snapshot, which
// rolls the run back to the last gate all of them passed (after a graceful
// switch, the switch gate itself: nothing is lost). Rank 0 sends its
// snapshot to the workers that joined. Since the data position is part of
// the state and counted in samples, the rolled-back iterations are
// replayed: no sample is lost or applied twice. The new world may have a
// different size: batch sizes, sharding, topology and learning-rate
// schedule follow it, as for a checkpoint resumed with another world size
// (with --global-batch only the per-worker split changes).
#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "control_kinds.h"
#include "frugal/comm/collectives.h"
#include "worker_impl.h"

namespace frugal::engine {

// A dropped snapshot's buffers go to the next one
// (Note [Recycled checkpoint buffers] in checkpoint.cc): one every --elastic-every steps would
// otherwise fault in its tens of MB afresh each time.
Status Worker::Impl::TakeSnapshot(int64_t t) {
  auto drop = [&](Snapshot& old) {
    for (auto& [name, bytes] : old.sections) RecycleCheckpointBuffer(std::move(bytes));
  };
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, StateSections(t, StateScope::kSnapshot));
  if (!snapshots.empty() && snapshots.back().t == t) {  // a joiner's received copy
    drop(snapshots.back());
    snapshots.pop_back();
  }
  snapshots.push_back(Snapshot{t, std::move(s), true});
  while (snapshots.size() > 2) {
    drop(snapshots.front());
    snapshots.pop_front();
  }
  return Status::Ok();
}

Result<LoopEnd> Worker::Impl::MembershipCheck(int64_t t) {
  FRUGAL_RETURN_IF_ERROR(TakeSnapshot(t));
  int64_t pending = membership->pending();
  if (leave_signal && !leave_sent) {
    leave_sent = true;
    Status st = membership->RequestLeave();
    if (st.ok()) {
      pending = std::max(pending, generation.number + 1);
    } else {
      std::fprintf(stderr, "frugal worker: cannot leave gracefully: %s\n", st.ToString().c_str());
    }
  }
  ByteWriter w;
  w.I64(pending);
  w.I64(membership->stop_requested() ? 1 : 0);
  auto all = comm::AllGather(*transport, ControlTag(t, kMembership), w.Take(), timeout);
  if (!all.ok()) return all.status().WithContext("membership check at step " + std::to_string(t));
  bool change = false, stop = false;
  for (const comm::Bytes& b : *all) {
    ByteReader r(b, "membership check");
    FRUGAL_ASSIGN_OR_RETURN(int64_t p, r.I64());
    FRUGAL_ASSIGN_OR_RETURN(int64_t s, r.I64());
    change = change || p > generation.number;
    stop = stop || s != 0;
  }
  if (stop) return LoopEnd::kStop;
  return change ? LoopEnd::kSwitch : LoopEnd::kFinished;
}

// Note [Parameters from masters]
// A joiner needs the parameters the forward of the restored step uses and
// the masters. At staleness 0 (the default) they are the same values: the
// state is taken right after BeginIteration copied the masters out. Rank 0
// checks that bit for bit (Replica::ParametersAreMasters) on its restored
// snapshot and then sends the masters only, with an empty marker section;
// the joiner sets its parameters from the masters it loads. For mlp that
// leaves 23.3 of 70.6 MB unsent: 1.9 s at 100 Mbit/s. At staleness 1 the
// parameters are one update behind, the check fails, and both are sent.
// The marker stays in rank 0's snapshot, where the parameters still are
// (RestoreSections prefers them).
Status Worker::Impl::RestoreGeneration(const comm::Generation& g) {
  const bool joined = std::find(g.joined.begin(), g.joined.end(), rank()) != g.joined.end();
  const comm::Tag tag = ControlTag(g.restore, kJoinState);
  const std::string what = "the state of step " + std::to_string(g.restore);
  // Snapshots newer than the restore point belong to rolled-back iterations.
  while (!snapshots.empty() && snapshots.back().t > g.restore) snapshots.pop_back();
  if (joined) {
    FRUGAL_ASSIGN_OR_RETURN(comm::Message m, transport->Recv(0, tag, timeout));
    FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, ParseCheckpoint(m.payload, what + " from rank 0"));
    FRUGAL_RETURN_IF_ERROR(RestoreSections(s, nullptr, /*residuals=*/false, what + " from rank 0"));
    snapshots.clear();
    snapshots.push_back(Snapshot{g.restore, std::move(s), false});
    return Status::Ok();
  }
  if (snapshots.empty() || snapshots.back().t != g.restore) {
    return Status::Internal("the coordinator restores step " + std::to_string(g.restore) +
                            ", of which this worker has no snapshot");
  }
  Snapshot& snap = snapshots.back();
  FRUGAL_RETURN_IF_ERROR(RestoreSections(snap.sections, snap.own_residuals ? &snap.sections : nullptr,
                                         /*residuals=*/false, "snapshot of " + what));
  join_state_bytes = 0;
  if (rank() == 0 && !g.joined.empty()) {
    // A joiner needs the shared state only: it starts with empty residuals
    // and sparsifier states, like a rank new to a resumed run.
    std::set<std::string> skip;
    sync->PrepareForJoiners(&snap.sections, &skip);
    auto bytes = std::make_shared<const comm::Bytes>(EncodeCheckpoint(snap.sections, skip));
    join_state_bytes = static_cast<int64_t>(bytes->size());
    for (int r : g.joined) FRUGAL_RETURN_IF_ERROR(transport->Send(r, tag, bytes));
  }
  return Status::Ok();
}

// Note [No broadcast on restore]
// A new replica starts from rank 0's parameters, broadcast to every rank
// (Replica::Create). A generation that restores a step (every one after the
// first) overwrites them at once: survivors load their own snapshot,
// joiners the state rank 0 sends them. So it builds its replica without the
// broadcast, which sent the whole model from rank 0 to every other rank at
// each change: 23.3 MB per rank for mlp, 1.9 s per receiver over a
// 100 Mbit/s link, paid by a kill and a join alike.
Status Worker::Impl::EnterGeneration(const comm::Generation& g) {
  generation = g;
  {
    std::lock_guard<std::mutex> lock(abort_mu);
    abortable = transport.get();
  }
  FRUGAL_RETURN_IF_ERROR(CheckSameConfiguration(*transport, SharedDigest(config), timeout));
  FRUGAL_RETURN_IF_ERROR(PlanSteps());
  if (g.restore >= 0) {
    FRUGAL_RETURN_IF_ERROR(BuildSync(/*broadcast_initial=*/false));  // Note [No broadcast on restore]
    FRUGAL_RETURN_IF_ERROR(RestoreGeneration(g));
  } else {
    FRUGAL_RETURN_IF_ERROR(BuildAndResume());
  }
  if (g.number <= 1 && config.checkpoint.checkpoint_every > 0 && rank() == 0) {
    FRUGAL_RETURN_IF_ERROR(ClearCheckpointsAfter(CheckpointDirOf(config), start_step));
  }
  FRUGAL_RETURN_IF_ERROR(OpenReporter());
  if (g.number <= 1) {
    PrintHeader();
    return Status::Ok();
  }
  reporter->Note("generation " + std::to_string(g.number) + ": " + std::to_string(transport->world_size()) +
                 " workers (" + std::to_string(g.joined.size()) + " joined), continuing from step " +
                 std::to_string(g.restore));
  // switch_s: from the end of the old world's loop (the switch gate, or
  // the failed wait after a loss) until the new world is ready to train.
  const double switch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - left_world_at).count();
  return reporter->Write({{"wall_time_s", reporter->Elapsed()},
                          {"event", "generation"},
                          {"switch_s", switch_s},
                          {"generation", g.number},
                          {"workers", transport->world_size()},
                          {"joined", g.joined.size()},
                          {"join_state_bytes", join_state_bytes},  // sent by rank 0 to each joiner
                          {"step", g.restore}});
}

// Before the world of a generation is torn down: its counters join the
// run's totals (Conclude adds the last generation's).
void Worker::Impl::CloseGenerationCounters(const comm::TransportStats& traffic_at_start) {
  if (transport) Accumulate(&finished_traffic, transport->stats().Since(traffic_at_start));
  if (sync) Accumulate(&finished_stats, Stats());
}

// The result of a worker that left the job before its end: the counters of
// the generations it took part in.
WorkerResult Worker::Impl::LeftResult(int last_rank) const {
  WorkerResult result;
  result.left = true;
  result.generation = generation.number;
  result.rank = last_rank;
  result.train.steps = start_step;
  result.train.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.train.samples_per_s = samples_total / std::max(result.train.wall_time_s, 1e-9);
  result.compute_s = compute_s;
  SetPipelineTimes(finished_stats, &result);
  result.traffic = finished_traffic;
  return result;
}

void Worker::Impl::TearDown(bool abort) {
  {
    std::lock_guard<std::mutex> lock(abort_mu);
    if (abort && transport) {
      transport->Abort(Status::Unavailable("generation " + std::to_string(generation.number) + " ended"));
    }
    abortable = nullptr;
  }
  if (abort) checkpoint_writer.Cancel();  // rank 0 stops waiting for the old world's files
  protocol.reset();
  sync.reset();  // joins its threads and a round in flight (an abort woke their waits)
  transport.reset();
}

// After an error: did the coordinator start a new generation (a peer died)?
bool Worker::Impl::AwaitChange() {
  const auto grace = std::chrono::duration<double>(2 * config.elastic.heartbeat_timeout_s + 2.0);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (membership->pending() > generation.number) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

Result<WorkerResult> Worker::Impl::RunElastic() {
  membership->OnAbort([this](const Status& why) {
    std::lock_guard<std::mutex> lock(abort_mu);
    if (abortable != nullptr) abortable->Abort(why);
  });
  FRUGAL_ASSIGN_OR_RETURN(comm::Generation g, membership->Register({}, &transport));
  while (true) {
    // Entering a world can fail like training in it (a peer dies while the
    // state is sent): both go through the same recovery.
    const Status entered = EnterGeneration(g);
    const comm::TransportStats traffic_at_start = transport->stats();  // the state transfer is not counted
    Result<LoopEnd> end = entered.ok() ? Loop() : Result<LoopEnd>(entered);
    if (end.ok() && *end != LoopEnd::kSwitch) {
      FRUGAL_ASSIGN_OR_RETURN(WorkerResult result, Conclude(start_step, traffic_at_start));
      result.generation = generation.number;
      result.rank = rank();
      TearDown(false);
      membership->Done();
      return result;
    }
    left_world_at = std::chrono::steady_clock::now();
    if (!end.ok() && !AwaitChange()) return end.status();
    const bool leaving = end.ok() && (leave_sent || membership->leave_requested());
    const int last_rank = rank();
    CloseGenerationCounters(traffic_at_start);
    TearDown(!end.ok());
    std::vector<int64_t> held;
    for (const Snapshot& s : snapshots) held.push_back(s.t);
    Result<comm::Generation> next = leaving ? Status::NotFound("leaving") : membership->Register(held, &transport);
    if (!next.ok() && next.status().code() == Status::Code::kNotFound) {  // this worker left the job
      membership->Done();
      return LeftResult(last_rank);
    }
    FRUGAL_RETURN_IF_ERROR(next.status());
    g = *next;
  }
}

}  // namespace frugal::engine
