// Worker::Impl's run state: checkpoints on disk and the same sections in
// memory (elastic snapshots), and restoring either.
#include <chrono>
#include <cstring>
#include <filesystem>

#include "control_kinds.h"
#include "frugal/comm/collectives.h"
#include "worker_impl.h"

namespace frugal::engine {

// Note [Checkpoints]: at the gate of iteration t every rank writes its own
// file. Rank 0's holds the pipeline's whole state after t-1 (Note [Pipeline
// state]), the parameters forward t uses, the model's buffers and the data
// position; the other ranks' hold only what is theirs alone, their
// error-feedback residuals and sparsifier states (masters and optimizer
// state are replicated, so writing them once is enough). Once every rank
// has written (an all-gather), rank 0 marks the step complete and prunes
// old ones. Resuming with the same world size is bit-exact; with another,
// ranks beyond the old world start with empty residuals (their share of
// unsent gradient is lost, as when a worker leaves) and the data position,
// counted in samples, carries over. An elastic snapshot (worker_elastic.cc)
// holds the same sections in memory on every rank, with this rank's own
// part apart (StateScope::kSnapshot), so that a joiner is sent only the
// shared part (JoinerSections).
Result<CheckpointSections> Worker::Impl::StateSections(int64_t t, StateScope scope) {
  CheckpointSections sections;
  using Parts = GradientPipeline::StateParts;
  const bool shared = scope != StateScope::kOwnFile;
  if (local) {
    local->SaveSections(shared, &sections);  // the replica's pipeline is idle in local mode
  } else if (scope == StateScope::kSnapshot) {
    FRUGAL_ASSIGN_OR_RETURN(sections["pipeline"], replica->SavePipelineState(Parts::kShared));
    FRUGAL_ASSIGN_OR_RETURN(sections["local"], replica->SavePipelineState(Parts::kLocal));
  } else {
    FRUGAL_ASSIGN_OR_RETURN(sections[shared ? "pipeline" : "local"],
                            replica->SavePipelineState(shared ? Parts::kAll : Parts::kLocal));
  }
  if (shared) sections["parameters"] = replica->SaveParameters();
  ByteWriter meta;
  for (int64_t v : {t, static_cast<int64_t>(transport->world_size()), static_cast<int64_t>(rank()), cursor->epoch(),
                    cursor->step_in_epoch(), cursor->position()}) {
    meta.I64(v);
  }
  sections["meta"] = meta.Take();
  ByteWriter buffers;
  for (const torch::Tensor& b : Buffers(false)) {
    if (!shared) break;
    torch::Tensor c = b.detach().to(torch::kCPU).contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    buffers.Bytes(std::vector<uint8_t>(p, p + c.numel() * c.element_size()));
  }
  sections["buffers"] = buffers.Take();
  return sections;
}

// Rank 0 records each checkpoint in metrics.jsonl: the size of its file,
// the seconds to collect and write it (write_s) and the whole stall of the
// run, until every rank has written and old ones are pruned (total_s).
Status Worker::Impl::SaveCheckpoint(int64_t t) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const std::string dir = CheckpointStepDir(CheckpointDirOf(config), t);
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections sections,
                          StateSections(t, rank() == 0 ? StateScope::kRank0File : StateScope::kOwnFile));
  const std::string text = ToToml(config);
  sections["config"] = std::vector<uint8_t>(text.begin(), text.end());
  const std::string file = CheckpointRankFile(dir, rank());
  FRUGAL_RETURN_IF_ERROR(WriteCheckpointFile(file, sections));
  const auto written = Clock::now();
  auto all = comm::AllGather(*transport, ControlTag(t, kCheckpoint), comm::Bytes(1, 1), timeout);
  if (!all.ok()) return all.status().WithContext("completing the checkpoint of step " + std::to_string(t));
  if (rank() != 0) return Status::Ok();
  FRUGAL_RETURN_IF_ERROR(MarkCheckpointComplete(dir, transport->world_size()));
  FRUGAL_RETURN_IF_ERROR(PruneCheckpoints(CheckpointDirOf(config), config.checkpoint.keep_checkpoints));
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(file, ec);
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  return reporter->Write({{"wall_time_s", reporter->Elapsed()},
                          {"event", "checkpoint"},
                          {"step", t},
                          {"bytes", ec ? 0 : bytes},
                          {"write_s", seconds(written - t0)},
                          {"total_s", seconds(Clock::now() - t0)}});
}

// Restores rank 0's sections `shared` (with this rank's residuals from
// them when `residuals`), then, if given, this rank's own part `mine`.
Status Worker::Impl::RestoreSections(CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                                     const std::string& what) {
  for (const char* name : {"parameters", "meta", "buffers"}) {
    if (!s.count(name)) return Status::Corruption(what + " has no '" + name + "' section");
  }
  if (local) {
    FRUGAL_RETURN_IF_ERROR(RestoreLocalSync(s, mine, residuals, what));
  } else if (!s.count("pipeline")) {
    return Status::Corruption(what + " has no 'pipeline' section (a --sync local checkpoint?)");
  } else {
    FRUGAL_RETURN_IF_ERROR(replica->LoadState(s["pipeline"], s["parameters"], residuals));
  }
  if (mine != nullptr && !local) {
    auto it = mine->find("local");
    if (it == mine->end()) return Status::Corruption(what + ": this rank's part has no 'local' section");
    FRUGAL_RETURN_IF_ERROR(replica->LoadLocalState(it->second).WithContext(what));
  }
  ByteReader meta(s["meta"], what + " meta");
  int64_t v[6];
  for (int64_t& x : v) {
    FRUGAL_ASSIGN_OR_RETURN(x, meta.I64());
  }
  FRUGAL_RETURN_IF_ERROR(cursor->Seek(v[3], v[4], v[5]));
  ByteReader buffers(s["buffers"], what + " buffers");
  torch::NoGradGuard no_grad;
  for (torch::Tensor& b : Buffers(false)) {
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, buffers.Bytes());
    if (bytes.size() != static_cast<size_t>(b.numel() * b.element_size())) {
      return Status::Corruption(what + ": a model buffer has the wrong size (same model?)");
    }
    torch::Tensor cpu = torch::empty(b.sizes(), b.options().device(torch::kCPU));
    std::memcpy(cpu.data_ptr(), bytes.data(), bytes.size());
    b.copy_(cpu);
  }
  start_step = v[0];
  return Status::Ok();
}

// --sync local: the shared section from rank 0's file, this rank's own
// part from its file (or rank 0's, for rank 0).
Status Worker::Impl::RestoreLocalSync(const CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                                      const std::string& what) {
  const CheckpointSections* from = mine != nullptr ? mine : (residuals ? &s : nullptr);
  const std::vector<uint8_t>* own = nullptr;
  if (from != nullptr) {
    auto it = from->find("local_sync_own");
    if (it == from->end()) return Status::Corruption(what + " has no 'local_sync_own' section");
    own = &it->second;
  }
  return local->RestoreSections(s, own, what);
}

Status Worker::Impl::Resume(const std::string& step_dir) {
  FRUGAL_ASSIGN_OR_RETURN(int old_world, CheckpointWorld(step_dir));
  const bool own = rank() < old_world;  // else: a new rank of an elastic restart, with no residual
  const std::string path = CheckpointRankFile(step_dir, 0);
  FRUGAL_ASSIGN_OR_RETURN(CheckpointSections s, ReadCheckpointFile(path));
  if (own && rank() != 0) {
    const std::string mine = CheckpointRankFile(step_dir, rank());
    FRUGAL_ASSIGN_OR_RETURN(CheckpointSections local, ReadCheckpointFile(mine));
    return RestoreSections(s, &local, /*residuals=*/false, "checkpoint " + mine);
  }
  return RestoreSections(s, nullptr, /*residuals=*/own && rank() == 0, "checkpoint " + path);
}

}  // namespace frugal::engine
