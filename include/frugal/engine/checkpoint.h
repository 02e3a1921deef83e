// Checkpoint files: named byte sections in one file, written atomically
// (temporary file, fsync, rename) with a trailing CRC-32 checksum, so a
// crash leaves either the old file or the new one, and a corrupt or
// truncated file is detected and named. Torch-free.
//
// Layout of a run's checkpoints (docs/architecture.md, "Checkpoints"):
//   <dir>/step-<t>/rank-<r>.ckpt   one per rank (residuals differ per rank)
//   <dir>/step-<t>/COMPLETE        written by rank 0 once every rank wrote
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::engine {

using CheckpointSections = std::map<std::string, std::vector<uint8_t>>;

// The bytes of a checkpoint file (magic, sections, checksum); ParseCheckpoint
// reads them back. Also the form in which an elastic joiner receives state.
// Sections named in `skip` are left out, as if absent from `sections`
// (a joiner's state without the sender's own sections, without copying
// the rest first). One allocation of the exact size.
std::vector<uint8_t> EncodeCheckpoint(const CheckpointSections& sections, const std::set<std::string>& skip = {});
// Writes the file atomically: `path`.tmp, fsync, rename, fsync of the
// directory. The sections are streamed, never joined into one buffer.
Status WriteCheckpointFile(const std::string& path, const CheckpointSections& sections);
// The same without the directory's fsync, which a step's writer does once
// for all its files (SyncDirectory): until then the rename may be lost in
// a crash, but the file is never seen half-written.
Status WriteCheckpointFileUnsynced(const std::string& path, const CheckpointSections& sections);
Status SyncDirectory(const std::string& dir);
// Writes `bytes` to `path` atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory.
Status WriteFileAtomically(const std::string& path, const std::vector<uint8_t>& bytes);
// The bytes of the file at `path` (NotFound naming it as a checkpoint when
// absent).
Result<std::vector<uint8_t>> ReadCheckpointBytes(const std::string& path);
// Corruption naming the file for a bad magic, checksum or truncation.
Result<CheckpointSections> ReadCheckpointFile(const std::string& path);
// The same for the file's bytes (`path` names it in messages). Input is
// untrusted: fuzzed by fuzz/checkpoint_fuzz.cc.
Result<CheckpointSections> ParseCheckpoint(const std::vector<uint8_t>& data, const std::string& path);

std::string CheckpointStepDir(const std::string& dir, int64_t step);
std::string CheckpointRankFile(const std::string& step_dir, int rank);
// Marks a step directory complete (every rank's file is written).
Status MarkCheckpointComplete(const std::string& step_dir, int world);
// Complete step directories under `dir`, newest first.
std::vector<std::string> CompleteCheckpoints(const std::string& dir);
// The world size a complete step directory was written by.
Result<int> CheckpointWorld(const std::string& step_dir);
// The newest complete step directory under `dir` whose every rank file
// reads back intact (checksum, sections), for a resume: `frugal train
// --resume` and frugal.load. Each complete step passed over is added to
// `skipped` (may be null) as "<step dir>: <why>". NotFound when `dir`
// does not exist; Corruption naming the last damage when no step is intact
// (NotFound when there is no complete step at all).
Result<std::string> NewestIntactCheckpoint(const std::string& dir, std::vector<std::string>* skipped);
// Removes the step directories newer than `step` and every incomplete one:
// leftovers of an earlier attempt that a new write of the same step could
// otherwise be mixed with. Rank 0 calls it before any rank can write.
Status ClearCheckpointsAfter(const std::string& dir, int64_t step);
// Removes all but the newest `keep` complete step directories.
Status PruneCheckpoints(const std::string& dir, int keep);

// The "meta" section of every rank file: who wrote it, at which step, and
// (for the CLI's workers) the data position. A rank file is taken for a
// step only if its meta names that step, world, rank and generation.
struct CheckpointMeta {
  int64_t step = 0;  // the iteration whose forward runs next
  int64_t world = 1;
  int64_t rank = 0;
  int64_t epoch = 0;          // data position (0 where the caller owns its data)
  int64_t step_in_epoch = 0;
  int64_t position = 0;       // samples
  int64_t generation = 0;     // membership generation (elastic runs; 0 otherwise)
};
std::vector<uint8_t> EncodeCheckpointMeta(const CheckpointMeta& meta);
// Corruption naming `what` when `sections` has no well-formed "meta".
Result<CheckpointMeta> ParseCheckpointMeta(const CheckpointSections& sections, const std::string& what);
// Ok when `sections` is the file of (step, world, rank, generation);
// Corruption "a leftover file (step s, generation g)" otherwise.
Status CheckRankFileMeta(const CheckpointSections& sections, int64_t step, int64_t world, int rank,
                         int64_t generation);

// Gives a large section buffer back for reuse
// (Note [Recycled checkpoint buffers] in checkpoint.cc); buffers under 1 MiB
// are simply freed.
void RecycleCheckpointBuffer(std::vector<uint8_t>&& buffer);
// A copy of `size` bytes at `data` in a recycled buffer when one is large
// enough, else in a new one: for sections built outside a ByteWriter (an
// own script's optimizer state).
std::vector<uint8_t> CopyToCheckpointBuffer(const uint8_t* data, size_t size);

// Little-endian byte writer/reader for section payloads. A writer that
// grows past 1 MiB continues in a recycled buffer when one is large enough.
class ByteWriter {
 public:
  void U64(uint64_t v);
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v);
  void Bytes(const std::vector<uint8_t>& b);
  void Floats(const float* data, size_t n);
  // A length-prefixed block of n bytes that `append` adds to the buffer in
  // place (no temporary copy). REQUIRES: it appends exactly n bytes.
  void BytesAppended(size_t n, const std::function<void(std::vector<uint8_t>*)>& append);
  // The same for a block that `write` writes through this writer.
  void BytesWritten(size_t n, const std::function<void(ByteWriter&)>& write);
  // Room for `total` bytes in all, taken from a recycled buffer when one is
  // large enough (Note [Sized snapshots] in checkpoint.cc).
  void Reserve(size_t total);
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  void Append(const uint8_t* p, size_t n);
  // Moves the bytes so far into a recycled buffer of at least `need` bytes
  // when out_ is too small and one is pooled; false otherwise.
  bool ContinueInPooled(size_t need);
  // Aborts unless the block begun at `before` holds exactly n bytes.
  void CheckBlock(size_t n, size_t before) const;
  std::vector<uint8_t> out_;
};

class ByteReader {
 public:
  ByteReader(const std::vector<uint8_t>& in, std::string what) : in_(in), what_(std::move(what)) {}
  Result<uint64_t> U64();
  Result<int64_t> I64();
  Result<double> F64();
  Result<std::vector<uint8_t>> Bytes();
  Status Floats(float* data, size_t n);  // a length-prefixed block that must hold exactly n floats
  bool done() const { return pos_ == in_.size(); }

 private:
  Status Need(size_t n) const;
  const std::vector<uint8_t>& in_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace frugal::engine
