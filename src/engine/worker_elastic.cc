// Worker::Impl: membership generations of an elastic run (comm/membership.h).
//
// Note [Generation switch]
// Every `elastic_every` steps, at the gate of iteration t (where the
// strategy's state is at rest: Note [State at rest] in sync_strategy.h),
// each worker
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
#include "frugal/comm/algorithms/collectives.h"
#include "worker_impl.h"

namespace frugal::engine {

// The protocol's steps are the session's (frugal/engine/elastic_session.h);
// what they carry is this worker's run state (worker_state.cc).
Status Worker::Impl::TakeSnapshot(int64_t t) {
  elastic->MakeRoomForSnapshot();
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, StateSections(t, StateScope::kSnapshot));
  elastic->TakeSnapshot(t, std::move(s));
  return Status::Ok();
}

Result<LoopEnd> Worker::Impl::MembershipCheck(int64_t t) {
  FRUGAL_RETURN_IF_ERROR(TakeSnapshot(t));
  FRUGAL_ASSIGN_OR_RETURN(GateDecision d, elastic->Check(*transport, t));
  if (d == GateDecision::kStop) return LoopEnd::kStop;
  return d == GateDecision::kSwitch ? LoopEnd::kSwitch : LoopEnd::kFinished;
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
  const std::string what = "the state of step " + std::to_string(g.restore);
  FRUGAL_ASSIGN_OR_RETURN(RestorePoint point, elastic->StateToRestore(*transport));
  FRUGAL_RETURN_IF_ERROR(RestoreSections(*point.shared, point.mine, /*residuals=*/false,
                                         point.joined ? what + " from rank 0" : "snapshot of " + what));
  FRUGAL_ASSIGN_OR_RETURN(join_state_bytes,
                          elastic->SendToJoiners(*transport, [this](CheckpointSections* s, std::set<std::string>* skip) {
                            sync->PrepareForJoiners(s, skip);
                          }));
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
  elastic->Enter(transport.get());
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
  const double switch_s = Seconds(clock.Now() - left_world_at);
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
  result.train.wall_time_s = Seconds(clock.Now() - started);
  result.train.samples_per_s = samples_total / std::max(result.train.wall_time_s, 1e-9);
  result.compute_s = compute_s;
  SetPipelineTimes(finished_stats, &result);
  result.traffic = finished_traffic;
  return result;
}

void Worker::Impl::TearDown(bool abort) {
  elastic->Leave(abort);
  if (abort) checkpoint_writer.Cancel();  // rank 0 stops waiting for the old world's files
  protocol.reset();
  sync.reset();  // joins its threads and a round in flight (an abort woke their waits)
  transport.reset();
}

Result<WorkerResult> Worker::Impl::RunElastic() {
  FRUGAL_ASSIGN_OR_RETURN(comm::Generation g, elastic->Register(&transport));
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
      elastic->Done();
      return result;
    }
    left_world_at = clock.Now();
    if (!end.ok() && !elastic->AwaitChange()) return end.status();
    const bool leaving = end.ok() && elastic->leaving();
    const int last_rank = rank();
    CloseGenerationCounters(traffic_at_start);
    TearDown(!end.ok());
    Result<comm::Generation> next = leaving ? Status::NotFound("leaving") : elastic->Next(&transport);
    if (!next.ok() && next.status().code() == Status::Code::kNotFound) {  // this worker left the job
      elastic->Done();
      return LeftResult(last_rank);
    }
    FRUGAL_RETURN_IF_ERROR(next.status());
    g = *next;
  }
}

}  // namespace frugal::engine
