#include "frugal/engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>

#include <zlib.h>

#include "frugal/common/field_list.h"
#include "frugal/common/hash.h"

namespace frugal::engine {

namespace fs = std::filesystem;

namespace {

// Note [Checkpoint checksum]: version 2 files end with zlib's CRC-32 of
// every byte before it (as a u64); version 1 files, still read, with byte-wise
// FNV-1a, which on this machine hashed 94 MB in 0.20-0.26 s against 0.04 s
// for zlib's crc32 (rank 0 hashes its own file on write and every other
// rank's on verification, on the cores training runs on).
constexpr char kMagic[8] = {'F', 'R', 'G', 'L', 'C', 'K', 'P', '2'};
constexpr char kMagicV1[8] = {'F', 'R', 'G', 'L', 'C', 'K', 'P', '1'};

// zlib's crc32, continued from `h` (crc32 of a null buffer would restart it).
uint64_t Hash(const uint8_t* data, size_t n, uint64_t h = 0) {
  return n == 0 ? h : crc32_z(static_cast<uLong>(h), data, n);
}

void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// A file descriptor that hashes what it writes (the checkpoint's checksum
// covers every byte before it).
class HashingFile {
 public:
  HashingFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void Put(const uint8_t* p, size_t n) {
    hash_ = Hash(p, n, hash_);
    while (status_.ok() && n > 0) {
      ssize_t k = ::write(fd_, p, n);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) {
        status_ = Status::IOError("writing " + path_ + ": " + std::strerror(errno));
        return;
      }
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  void PutU64(uint64_t v) {
    std::vector<uint8_t> b;
    engine::PutU64(&b, v);
    Put(b.data(), b.size());
  }
  uint64_t hash() const { return hash_; }
  const Status& status() const { return status_; }

 private:
  int fd_;
  std::string path_;
  uint64_t hash_ = 0;
  Status status_ = Status::Ok();
};

// Writes `path`.tmp through `fill`, fsyncs it and renames it to `path`.
// The directory is not fsynced (SyncDirectory).
template <typename Fill>
Status WriteAndRename(const std::string& path, Fill fill) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IOError("cannot write " + tmp + ": " + std::strerror(errno));
  HashingFile out(fd, tmp);
  fill(&out);
  if (!out.status().ok()) {
    ::close(fd);
    return out.status();
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Status::IOError("flushing " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("renaming " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  FRUGAL_RETURN_IF_ERROR(WriteAndRename(path, [&](HashingFile* f) { f->Put(bytes.data(), bytes.size()); }));
  return SyncDirectory(fs::path(path).parent_path().string());
}

std::vector<uint8_t> EncodeCheckpoint(const CheckpointSections& sections, const std::set<std::string>& skip) {
  size_t size = 8 + 8 + 8;  // magic, count, checksum
  uint64_t count = 0;
  for (const auto& [name, bytes] : sections) {
    if (skip.count(name)) continue;
    size += 8 + name.size() + 8 + bytes.size();
    ++count;
  }
  std::vector<uint8_t> out;
  out.reserve(size);
  out.insert(out.end(), kMagic, kMagic + 8);
  PutU64(&out, count);
  for (const auto& [name, bytes] : sections) {
    if (skip.count(name)) continue;
    PutU64(&out, name.size());
    out.insert(out.end(), name.begin(), name.end());
    PutU64(&out, bytes.size());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  PutU64(&out, Hash(out.data(), out.size()));
  return out;
}

// The bytes of EncodeCheckpoint, streamed section by section (no copy of
// the whole file in memory).
Status WriteCheckpointFileUnsynced(const std::string& path, const CheckpointSections& sections) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::IOError("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
  return WriteAndRename(path, [&](HashingFile* f) {
    f->Put(reinterpret_cast<const uint8_t*>(kMagic), 8);
    f->PutU64(sections.size());
    for (const auto& [name, bytes] : sections) {
      f->PutU64(name.size());
      f->Put(reinterpret_cast<const uint8_t*>(name.data()), name.size());
      f->PutU64(bytes.size());
      f->Put(bytes.data(), bytes.size());
    }
    f->PutU64(f->hash());
  });
}

Status WriteCheckpointFile(const std::string& path, const CheckpointSections& sections) {
  FRUGAL_RETURN_IF_ERROR(WriteCheckpointFileUnsynced(path, sections));
  return SyncDirectory(fs::path(path).parent_path().string());
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::IOError("cannot open " + dir + ": " + std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return Status::IOError("flushing directory " + dir + ": " + std::strerror(errno));
  return Status::Ok();
}

Result<std::vector<uint8_t>> ReadCheckpointBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound("checkpoint " + path + " does not exist");
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::IOError("cannot read " + path);
  std::vector<uint8_t> data(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(data.data()), size)) return Status::IOError("cannot read " + path);
  return data;
}

Result<CheckpointSections> ReadCheckpointFile(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> data, ReadCheckpointBytes(path));
  return ParseCheckpoint(data, path);
}

Result<CheckpointSections> ParseCheckpoint(const std::vector<uint8_t>& data, const std::string& path) {
  auto bad = [&](const std::string& why) { return Status::Corruption("checkpoint " + path + " is corrupt: " + why); };
  const bool v1 = data.size() >= 8 && std::memcmp(data.data(), kMagicV1, 8) == 0;
  if (data.size() < 24 || (!v1 && std::memcmp(data.data(), kMagic, 8) != 0)) return bad("not a Frugal checkpoint");
  const size_t body = data.size() - 8;
  const uint64_t sum = v1 ? Fnv1a64(data.data(), body) : Hash(data.data(), body);
  if (GetU64(data.data() + body) != sum) return bad("checksum mismatch (truncated or damaged)");
  size_t pos = 8;
  auto read_u64 = [&](uint64_t* v) {
    if (body - pos < 8) return false;
    *v = GetU64(data.data() + pos);
    pos += 8;
    return true;
  };
  uint64_t count = 0;
  if (!read_u64(&count)) return bad("truncated header");
  CheckpointSections sections;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t name_len = 0, len = 0;
    if (!read_u64(&name_len) || body - pos < name_len) return bad("truncated section name");
    std::string name(reinterpret_cast<const char*>(data.data() + pos), name_len);
    pos += name_len;
    if (!read_u64(&len) || body - pos < len) return bad("truncated section '" + name + "'");
    sections[name].assign(data.begin() + pos, data.begin() + pos + len);
    pos += len;
  }
  if (pos != body) return bad("trailing bytes");
  return sections;
}

std::string CheckpointStepDir(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step-" + std::to_string(step))).string();
}

std::string CheckpointRankFile(const std::string& step_dir, int rank) {
  return (fs::path(step_dir) / ("rank-" + std::to_string(rank) + ".ckpt")).string();
}

Status MarkCheckpointComplete(const std::string& step_dir, int world) {
  std::string text = std::to_string(world) + "\n";
  return WriteFileAtomically((fs::path(step_dir) / "COMPLETE").string(), std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<std::string> CompleteCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(it->path() / "COMPLETE")) continue;
    char* tail = nullptr;
    long long step = std::strtoll(name.c_str() + 5, &tail, 10);
    if (*tail == '\0') found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(path);
  return out;
}

Result<int> CheckpointWorld(const std::string& step_dir) {
  std::ifstream in((fs::path(step_dir) / "COMPLETE").string());
  int world = 0;
  if (!(in >> world) || world < 1) return Status::Corruption("checkpoint " + step_dir + " has no valid COMPLETE marker");
  return world;
}

Result<std::string> NewestIntactCheckpoint(const std::string& dir, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound("checkpoint directory " + dir + " does not exist");
  Status last = Status::NotFound("no complete checkpoint in " + dir);
  for (const std::string& step : CompleteCheckpoints(dir)) {
    auto world = CheckpointWorld(step);
    Status bad = world.status();
    for (int r = 0; bad.ok() && r < *world; ++r) bad = ReadCheckpointFile(CheckpointRankFile(step, r)).status();
    if (bad.ok()) return step;
    if (skipped != nullptr) skipped->push_back(step + ": " + bad.message());
    last = Status::Corruption("no intact checkpoint in " + dir + " (newest damage: " + bad.message() + ")");
  }
  return last;
}

std::vector<uint8_t> EncodeCheckpointMeta(const CheckpointMeta& m) {
  ByteWriter w;
  for (int64_t v : {m.step, m.world, m.rank, m.epoch, m.step_in_epoch, m.position, m.generation}) w.I64(v);
  return w.Take();
}

Result<CheckpointMeta> ParseCheckpointMeta(const CheckpointSections& sections, const std::string& what) {
  auto it = sections.find("meta");
  if (it == sections.end()) return Status::Corruption(what + " has no 'meta' section");
  ByteReader r(it->second, what + " meta");
  CheckpointMeta m;
  for (int64_t* v : {&m.step, &m.world, &m.rank, &m.epoch, &m.step_in_epoch, &m.position, &m.generation}) {
    FRUGAL_ASSIGN_OR_RETURN(*v, r.I64());
  }
  if (m.world < 1 || m.rank < 0 || m.rank >= m.world || m.step < 0) {
    return Status::Corruption(what + " has a bad 'meta' section (step " + std::to_string(m.step) + ", rank " +
                              std::to_string(m.rank) + " of " + std::to_string(m.world) + ")");
  }
  return m;
}

Status CheckRankFileMeta(const CheckpointSections& sections, int64_t step, int64_t world, int rank,
                         int64_t generation) {
  FRUGAL_ASSIGN_OR_RETURN(CheckpointMeta m, ParseCheckpointMeta(sections, "rank file"));
  if (m.step != step || m.world != world || m.rank != rank || m.generation != generation) {
    return Status::Corruption("a leftover file (step " + std::to_string(m.step) + ", generation " +
                              std::to_string(m.generation) + ")");
  }
  return Status::Ok();
}

Status ClearCheckpointsAfter(const std::string& dir, int64_t step) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    char* tail = nullptr;
    long long t = std::strtoll(name.c_str() + 5, &tail, 10);
    if (*tail != '\0') continue;
    if (t > step || !fs::exists(it->path() / "COMPLETE")) doomed.push_back(it->path());
  }
  for (const fs::path& p : doomed) {
    fs::remove_all(p, ec);
    if (ec) return Status::IOError("cannot remove stale checkpoint " + p.string() + ": " + ec.message());
  }
  return Status::Ok();
}

Status PruneCheckpoints(const std::string& dir, int keep) {
  std::vector<std::string> all = CompleteCheckpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i], ec);
    if (ec) return Status::IOError("cannot remove old checkpoint " + all[i] + ": " + ec.message());
  }
  return Status::Ok();
}

// Note [Recycled checkpoint buffers]: a checkpoint's sections are tens of
// MB (mlp: the pipeline section 70.6 MB). Built from scratch at every gate,
// a vector that doubles its way there copies itself about twice and, above
// glibc's mmap threshold (32 MiB at most, Note [Heap retention]), gets
// fresh pages each time that the kernel must fault in and zero: most of
// the snapshot's stall on a loaded machine. The background writer hands
// the written buffers back here instead of freeing them (an elastic run's
// dropped snapshots too), and the next checkpoint's ByteWriter continues in
// the smallest one large enough as soon as it grows past 1 MiB, so from the
// second checkpoint on a section is one memcpy into memory already mapped. At most kPooled buffers are kept (the largest), so
// a rank holds about its checkpoint's size in reserve between checkpoints.
namespace {
constexpr size_t kRecycleMin = size_t{1} << 20;
constexpr size_t kPooled = 8;
std::mutex g_pool_mu;
std::vector<std::vector<uint8_t>> g_pool;  // GUARDED_BY(g_pool_mu)

// The smallest pooled buffer that holds `need` bytes: a snapshot's
// sections differ in size (the local mode's own part is twice its shared
// one), and the largest buffer taken by the first would leave none that
// fits the next.
std::optional<std::vector<uint8_t>> TakePooled(size_t need) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  auto best = g_pool.end();
  for (auto it = g_pool.begin(); it != g_pool.end(); ++it) {
    if (it->capacity() >= need && (best == g_pool.end() || it->capacity() < best->capacity())) best = it;
  }
  if (best == g_pool.end()) return std::nullopt;
  std::vector<uint8_t> out = std::move(*best);
  g_pool.erase(best);
  return out;
}
}  // namespace

void RecycleCheckpointBuffer(std::vector<uint8_t>&& buffer) {
  if (buffer.capacity() < kRecycleMin) return;
  buffer.clear();
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pool.push_back(std::move(buffer));
  if (g_pool.size() > kPooled) {
    auto smallest = std::min_element(g_pool.begin(), g_pool.end(),
                                      [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
    g_pool.erase(smallest);
  }
}

std::vector<uint8_t> CopyToCheckpointBuffer(const uint8_t* data, size_t size) {
  std::vector<uint8_t> out;
  if (size > kRecycleMin) {
    if (auto pooled = TakePooled(size)) out = std::move(*pooled);
  }
  out.assign(data, data + size);
  return out;
}

bool ByteWriter::ContinueInPooled(size_t need) {
  if (need <= out_.capacity() || need <= kRecycleMin) return false;
  auto pooled = TakePooled(need);
  if (!pooled) return false;
  pooled->assign(out_.begin(), out_.end());
  std::vector<uint8_t> old = std::move(out_);
  out_ = std::move(*pooled);
  RecycleCheckpointBuffer(std::move(old));
  return true;
}

void ByteWriter::Append(const uint8_t* p, size_t n) {
  ContinueInPooled(out_.size() + n);
  out_.insert(out_.end(), p, p + n);
}

// Note [Sized snapshots]: a writer that grows by doubling touches about
// twice its final size in fresh pages and copies itself on the way; with
// each bucket's residual and momentum serialised into temporaries first
// (doubling as well), the first checkpoint of mlp touched about 300 MB to
// build 94 MB, and stalled training for 2.5 s of its 2.8 s snapshot on a
// loaded machine (0.03-0.07 s for the later, recycled ones). Sections are
// now sized first (Reserve, with a little room for the next one's growth)
// and written in place (BytesAppended).
void ByteWriter::Reserve(size_t total) {
  if (total <= out_.capacity() || ContinueInPooled(total)) return;
  // Half again as spare: a later section may be larger (the pipeline's
  // settings grow with each controller decision; the local mode's own part
  // grew from 70.6 to 88.1 to 105.6 MB on mlp over its first three gates as
  // residuals and momenta came into being) and should still fit the
  // recycled buffer instead of faulting in a fresh one. The spare is address
  // space only until a later section writes into it.
  out_.reserve(total + total / 2);
}

void ByteWriter::BytesAppended(size_t n, const std::function<void(std::vector<uint8_t>*)>& append) {
  U64(n);
  Reserve(out_.size() + n);
  const size_t before = out_.size();
  append(&out_);
  CheckBlock(n, before);
}

void ByteWriter::BytesWritten(size_t n, const std::function<void(ByteWriter&)>& write) {
  U64(n);
  Reserve(out_.size() + n);
  const size_t before = out_.size();
  write(*this);
  CheckBlock(n, before);
}

void ByteWriter::CheckBlock(size_t n, size_t before) const {
  if (out_.size() == before + n) return;
  std::fprintf(stderr, "frugal: internal error: a section block of %zu bytes appended %zu\n", n, out_.size() - before);
  std::abort();
}

void ByteWriter::U64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  Append(b, 8);
}

void ByteWriter::F64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  U64(bits);
}

void ByteWriter::Bytes(const std::vector<uint8_t>& b) {
  U64(b.size());
  Append(b.data(), b.size());
}

void ByteWriter::Floats(const float* data, size_t n) {
  U64(n * sizeof(float));
  Append(reinterpret_cast<const uint8_t*>(data), n * sizeof(float));
}

Status ByteReader::Need(size_t n) const {
  if (in_.size() - pos_ < n) return Status::Corruption(what_ + ": truncated");
  return Status::Ok();
}

Result<uint64_t> ByteReader::U64() {
  FRUGAL_RETURN_IF_ERROR(Need(8));
  uint64_t v = GetU64(in_.data() + pos_);
  pos_ += 8;
  return v;
}

Result<int64_t> ByteReader::I64() {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t v, U64());
  return static_cast<int64_t>(v);
}

Result<double> ByteReader::F64() {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t bits, U64());
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}

Result<std::vector<uint8_t>> ByteReader::Bytes() {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t n, U64());
  FRUGAL_RETURN_IF_ERROR(Need(n));
  std::vector<uint8_t> out(in_.begin() + pos_, in_.begin() + pos_ + n);
  pos_ += n;
  return out;
}

Status ByteReader::Floats(float* data, size_t n) {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t bytes, U64());
  if (bytes != n * sizeof(float)) {
    return Status::Corruption(what_ + ": holds " + std::to_string(bytes / sizeof(float)) + " values, expected " +
                              std::to_string(n));
  }
  FRUGAL_RETURN_IF_ERROR(Need(bytes));
  std::memcpy(data, in_.data() + pos_, bytes);
  pos_ += bytes;
  return Status::Ok();
}

}  // namespace frugal::engine
