// Worker::Impl's run state: checkpoints on disk and the same sections in
// memory (elastic snapshots), and restoring either.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include "control_kinds.h"
#include "worker_impl.h"

namespace frugal::engine {

namespace fs = std::filesystem;

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
  if (IsPerSiteCheckpointDir(config.checkpoint.checkpoint_dir)) job.transport = transport.get();
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
  if (rank() != 0) {
    if (!o->abandoned.empty()) {  // per site: this cluster's leader got no manifest, or could not write it
      std::fprintf(stderr, "frugal: rank %d: checkpoint of step %lld not completed in this site: %s\n", rank(),
                   static_cast<long long>(o->step), o->abandoned.c_str());
    }
    return Status::Ok();
  }
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
  if (IsPerSiteCheckpointDir(config.checkpoint.checkpoint_dir)) return ResumeFromSites(step_dir);
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

bool Worker::Impl::ClearsCheckpoints() const {
  if (rank() == 0) return true;
  const comm::Topology& topo = transport->topology();
  return IsPerSiteCheckpointDir(config.checkpoint.checkpoint_dir) && topo.is_leader(rank()) &&
         topo.cluster_id(rank()) != topo.cluster_id(0);
}

// Note [Per-site checkpoints] in checkpoint_manifest.cc: the manifest from
// this site's copy of the step (else from the step directory given), the
// shared part from the cluster that holds it, and this rank's own part from
// the file of its seat in its cluster's directory.
Status Worker::Impl::ResumeFromSites(const std::string& given) {
  const fs::path normal = fs::path(given).lexically_normal();
  const std::string step_name = (normal.has_filename() ? normal : normal.parent_path()).filename().string();
  char* tail = nullptr;
  const long long step = step_name.rfind("step-", 0) == 0 ? std::strtoll(step_name.c_str() + 5, &tail, 10) : -1;
  if (step < 0 || tail == nullptr || *tail != '\0') {
    return Status::InvalidArgument("--resume-from " + given + ": not a step directory (step-<t>)");
  }
  const std::string here = (fs::path(CheckpointDirOf(config)) / step_name).string();
  Result<CheckpointManifest> m = ReadCheckpointManifest(here);
  if (!m.ok() && m.status().code() == Status::Code::kNotFound) m = ReadCheckpointManifest(given);
  if (!m.ok()) return m.status().WithContext("--resume-from " + given);
  if (!m->per_site()) {
    return Status::InvalidArgument("--resume-from " + given + " was written to one shared directory: resume it with "
                                   "that --checkpoint-dir, without {cluster}");
  }
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, SharedPartFromSite(*m, step_name, step));
  const std::string what = "checkpoint " + step_name + " (rank 0's file, cluster " + m->files[0].cluster + ")";
  FRUGAL_RETURN_IF_ERROR(AdoptOuterStep(s, what));
  FRUGAL_RETURN_IF_ERROR(BuildSync());
  const comm::Topology& topo = transport->topology();
  const std::vector<int>& members = topo.members(topo.cluster_id(rank()));
  const int seat = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  const CheckpointFileEntry* file = SeatOf(*m, transport->cluster(), seat);
  if (file == nullptr) return RestoreSections(s, nullptr, /*residuals=*/false, what);  // no residual to take
  if (file->rank == 0) return RestoreSections(s, nullptr, /*residuals=*/true, what);
  const std::string path = (fs::path(here) / file->name).string();
  auto local = ReadManifestFile(path, *file);
  if (!local.ok()) {
    return local.status().WithContext("old rank " + std::to_string(file->rank) + "'s file, which " + step_name +
                                      "'s COMPLETE lists in cluster " + file->cluster + "'s directory");
  }
  return RestoreSections(s, &*local, /*residuals=*/false, "checkpoint " + path);
}

// Rank 0's old file: read by the lowest rank of the cluster that wrote it
// and sent to every other rank, so that no host reads another site's
// directory; read in place when no worker of that cluster is in this run.
Result<CheckpointSections> Worker::Impl::SharedPartFromSite(const CheckpointManifest& m, const std::string& step_name,
                                                            int64_t step) {
  const CheckpointFileEntry& shared = m.files[0];
  const comm::Topology& topo = transport->topology();
  int source = -1;
  for (int c = 0; c < topo.num_clusters(); ++c) {
    if (topo.cluster_name(c) == shared.cluster) source = topo.leader(c);
  }
  const std::string path =
      (fs::path(SiteCheckpointDir(config.checkpoint.checkpoint_dir, shared.cluster)) / step_name / shared.name).string();
  if (source < 0) {
    auto s = ReadManifestFile(path, shared);
    if (!s.ok() && s.status().code() == Status::Code::kNotFound) {
      return Status::NotFound("the shared part of " + step_name + " (old rank 0's file) is in cluster " +
                              shared.cluster + "'s directory, " + path +
                              ", which this host cannot read, and no worker of this run is in cluster " +
                              shared.cluster + ": start one there, or copy the file here");
    }
    return s;
  }
  const comm::Tag tag = ControlTag(step, kCheckpoint);
  if (rank() == source) {
    auto s = ReadManifestFile(path, shared);
    auto payload = std::make_shared<const comm::Bytes>(s.ok() ? EncodeCheckpoint(*s) : comm::Bytes{});  // empty: failed
    for (int r = 0; r < transport->world_size(); ++r) {
      if (r != source) FRUGAL_RETURN_IF_ERROR(transport->Send(r, tag, payload));
    }
    return s;
  }
  auto msg = transport->Recv(source, tag, timeout);
  const std::string from = "the shared part of " + step_name + " from " + topo.DescribeRank(source);
  if (!msg.ok()) return msg.status().WithContext("waiting for " + from);
  if (msg->payload.empty()) return Status::Unavailable(topo.DescribeRank(source) + " could not read " + path);
  return ParseCheckpoint(msg->payload, from);
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
