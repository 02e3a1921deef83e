// Worker::Impl's run state: checkpoints on disk and the same sections in
// memory (elastic snapshots), and restoring either.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "worker_impl.h"

namespace frugal::engine {

// Note [Checkpoints]: at the gate of iteration t every rank writes its own
// file. Rank 0's holds the pipeline's whole state after t-1
// (Note [Pipeline state]), the parameters forward t uses, the model's buffers and the data
// position; the other ranks' hold only what is theirs alone, their
// error-feedback residuals and sparsifier states (masters and optimizer
// state are replicated, so writing them once is enough). The files are
// written in the background; rank 0's writer marks the step complete once
// every rank's file is there and intact, and prunes old ones (Note
// [Background checkpoints] in checkpoint_writer.cc). Resuming with the same world size is bit-exact; with another,
// ranks beyond the old world start with empty residuals (their share of
// unsent gradient is lost, as when a worker leaves) and the data position,
// counted in samples, carries over. An elastic snapshot (worker_elastic.cc)
// holds the same sections in memory on every rank, with this rank's own
// part apart (StateScope::kSnapshot), so that a joiner is sent only the
// shared part (JoinerSections).
Result<CheckpointSections> Worker::Impl::StateSections(int64_t t, StateScope scope) {
  CheckpointSections sections;
  const bool shared = scope != StateScope::kOwnFile;
  FRUGAL_RETURN_IF_ERROR(sync->SaveState(scope, &sections));
  CheckpointMeta meta;
  meta.step = t;
  meta.world = transport->world_size();
  meta.rank = rank();
  meta.epoch = cursor->epoch();
  meta.step_in_epoch = cursor->step_in_epoch();
  meta.position = cursor->position();
  meta.generation = generation.number;
  sections["meta"] = EncodeCheckpointMeta(meta);
  sections["buffers"] = shared ? SaveBuffers(Buffers(false)) : std::vector<uint8_t>{};
  return sections;
}

// At each gate of a run with checkpoints: report a background write that
// has finished, and start the checkpoint of step t when one is due.
Status Worker::Impl::CheckpointGate(int64_t t) {
  FRUGAL_RETURN_IF_ERROR(ReportCheckpoint(/*wait=*/false));
  const int64_t every = config.checkpoint.checkpoint_every;
  if (t > start_step && t % every == 0) return SaveCheckpoint(t);
  return Status::Ok();
}

// Copies this rank's state at the gate of t and hands it to the background
// writer (Note [Background checkpoints] in checkpoint_writer.cc). Training
// stalls only for the wait for a previous write still in flight (wait_s)
// and the copy (snapshot_s).
Status Worker::Impl::SaveCheckpoint(int64_t t) {
  const auto t0 = clock.Now();
  FRUGAL_RETURN_IF_ERROR(ReportCheckpoint(/*wait=*/true));
  const auto waited = clock.Now();
  CheckpointJob job;
  job.root = CheckpointDirOf(config);
  job.step = t;
  job.rank = rank();
  job.world = transport->world_size();
  job.keep = config.checkpoint.keep_checkpoints;
  job.wait_for_ranks = std::max(timeout, std::chrono::milliseconds(60000));
  FRUGAL_ASSIGN_OR_RETURN(job.sections, StateSections(t, rank() == 0 ? StateScope::kRank0File : StateScope::kOwnFile));
  const std::string text = ToToml(config);
  job.sections["config"] = std::vector<uint8_t>(text.begin(), text.end());
  const int64_t world = job.world, gen = generation.number;
  job.check_rank_file = [t, world, gen](int r, const CheckpointSections& s) {
    return CheckRankFileMeta(s, t, world, r, gen);
  };
  checkpoint_wait_s = Seconds(waited - t0);
  FRUGAL_RETURN_IF_ERROR(checkpoint_writer.Start(std::move(job)));
  checkpoint_snapshot_s = Seconds(clock.Now() - waited);
  return Status::Ok();
}

// A finished background write: an error writing this rank's file fails the
// run; rank 0 records the checkpoint in metrics.jsonl: the size of its
// file, the stall of training (wait_s, snapshot_s), the background seconds
// to write its file (write_s, fsync included) and to complete the step
// (complete_s), and whether it is complete (else why it was abandoned).
Status Worker::Impl::ReportCheckpoint(bool wait) {
  std::optional<CheckpointOutcome> o = checkpoint_writer.Take(wait);
  if (!o) return Status::Ok();
  if (!o->status.ok()) return o->status.WithContext("writing the checkpoint of step " + std::to_string(o->step));
  if (rank() != 0) return Status::Ok();
  nlohmann::json record = {{"wall_time_s", reporter->Elapsed()},
                           {"event", "checkpoint"},
                           {"step", o->step},
                           {"bytes", o->bytes},
                           {"wait_s", checkpoint_wait_s},
                           {"snapshot_s", checkpoint_snapshot_s},
                           {"write_s", o->write_s},
                           {"complete_s", o->complete_s},
                           {"complete", o->complete}};
  if (!o->complete) {
    record["abandoned"] = o->abandoned;
    reporter->Note("checkpoint of step " + std::to_string(o->step) + " abandoned: " + o->abandoned);
  }
  return reporter->Write(record);
}

// Restores rank 0's sections `shared` (with this rank's residuals from
// them when `residuals`), then, if given, this rank's own part `mine`.
Status Worker::Impl::RestoreSections(CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                                     const std::string& what) {
  for (const char* name : {"meta", "buffers"}) {
    if (!s.count(name)) return Status::Corruption(what + " has no '" + name + "' section");
  }
  FRUGAL_RETURN_IF_ERROR(sync->RestoreState(s, mine, residuals, what));
  FRUGAL_ASSIGN_OR_RETURN(const CheckpointMeta meta, ParseCheckpointMeta(s, what));
  FRUGAL_RETURN_IF_ERROR(cursor->Seek(meta.epoch, meta.step_in_epoch, meta.position));
  FRUGAL_RETURN_IF_ERROR(RestoreBuffers(s["buffers"], Buffers(false), what));
  start_step = meta.step;
  return Status::Ok();
}

Status Worker::Impl::BuildAndResume() {
  const std::string& step_dir = config.checkpoint.resume_from;
  if (step_dir.empty()) return BuildSync();
  const std::string path = CheckpointRankFile(step_dir, 0);
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, ReadCheckpointFile(path));
  FRUGAL_RETURN_IF_ERROR(AdoptOuterStep(s, "checkpoint " + path));
  FRUGAL_RETURN_IF_ERROR(BuildSync());
  FRUGAL_ASSIGN_OR_RETURN(int old_world, CheckpointWorld(step_dir));
  const bool own = rank() < old_world;  // else: a new rank of an elastic restart, with no residual
  if (own && rank() != 0) {
    const std::string mine = CheckpointRankFile(step_dir, rank());
    FRUGAL_ASSIGN_OR_RETURN(CheckpointSections local, ReadCheckpointFile(mine));
    return RestoreSections(s, &local, /*residuals=*/false, "checkpoint " + mine);
  }
  return RestoreSections(s, nullptr, /*residuals=*/own && rank() == 0, "checkpoint " + path);
}

// Note [Outer step on resume]
// The local mode's outer step is run state: the checkpoint's outer
// optimizer sections have its form (a Nesterov momentum buffer, or none for
// plain averaging). With --outer-lr auto, OuterOf chooses it from the run's
// length in rounds, which a resume can change: an elastic run takes the
// Nesterov step whatever its length, and the same checkpoint resumed without
// --elastic, or with other --epochs, may choose averaging; before this
// note such a resume failed on the momentum buffer. So the shared state
// records the step its run took (section "outer_step": lr, momentum), and
// a resumed run with --outer-lr auto takes it. An elastic run cannot: the
// joiners of its later generations choose alone, before the state reaches
// them: from the run's length when --global-batch fixes it whatever the
// world size (so a short cluster job averages, as `frugal train` would:
// cnn on synthetic data, 225 steps of 256 samples, diverged at step 118
// under the Nesterov step), else OuterOf(d, 0), the Nesterov step. So
// there, as for a set --outer-lr, a checkpoint of
// another form is refused with the flags that resume it; a set --outer-lr
// of the same form is taken as set. Checkpoints written before the section
// have none and resume as before.
Status Worker::Impl::AdoptOuterStep(const CheckpointSections& s, const std::string& what) {
  resumed_outer.reset();
  auto it = s.find("outer_step");
  if (!IsLocalUpdates(dist.sync) || it == s.end()) return Status::Ok();
  ByteReader r(it->second, what + " outer_step");
  FRUGAL_ASSIGN_OR_RETURN(const double lr, r.F64());
  FRUGAL_ASSIGN_OR_RETURN(const double momentum, r.F64());
  if (!(lr > 0) || !(momentum >= 0 && momentum < 1) || !r.done()) {
    return Status::Corruption(what + " has a bad 'outer_step' section");
  }
  if (dist.outer_lr <= 0 && !config.elastic.elastic) {
    resumed_outer = OuterStep{lr, momentum};
    return Status::Ok();
  }
  const OuterStep mine = RunOuterStep();
  if ((momentum > 0) == (mine.momentum > 0)) return Status::Ok();
  char saved[96];
  std::snprintf(saved, sizeof saved, "--outer-lr %g --outer-momentum %g", lr, momentum);
  return Status::InvalidArgument(what + " was written by a run whose outer step was " + saved + ", and this run's (" +
                                 (momentum > 0 ? "plain averaging" : "with momentum") +
                                 ") cannot take its state: resume with " + saved);
}

}  // namespace frugal::engine
