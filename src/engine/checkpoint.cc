#include "frugal/engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "frugal/common/field_list.h"

namespace frugal::engine {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'F', 'R', 'G', 'L', 'C', 'K', 'P', '1'};

uint64_t Hash(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Writes `bytes` to `path` atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory.
Status WriteAtomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IOError("cannot write " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Status::IOError("writing " + tmp + ": " + std::strerror(errno));
      ::close(fd);
      return s;
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Status::IOError("flushing " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("renaming " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  int dir = ::open(fs::path(path).parent_path().c_str(), O_RDONLY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> EncodeCheckpoint(const CheckpointSections& sections) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  PutU64(&out, sections.size());
  for (const auto& [name, bytes] : sections) {
    PutU64(&out, name.size());
    out.insert(out.end(), name.begin(), name.end());
    PutU64(&out, bytes.size());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  PutU64(&out, Hash(out.data(), out.size()));
  return out;
}

Status WriteCheckpointFile(const std::string& path, const CheckpointSections& sections) {
  const std::vector<uint8_t> out = EncodeCheckpoint(sections);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::IOError("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
  return WriteAtomically(path, out);
}

Result<CheckpointSections> ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("checkpoint " + path + " does not exist");
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseCheckpoint(data, path);
}

Result<CheckpointSections> ParseCheckpoint(const std::vector<uint8_t>& data, const std::string& path) {
  auto bad = [&](const std::string& why) { return Status::Corruption("checkpoint " + path + " is corrupt: " + why); };
  if (data.size() < 24 || std::memcmp(data.data(), kMagic, 8) != 0) return bad("not a Frugal checkpoint");
  const size_t body = data.size() - 8;
  if (GetU64(data.data() + body) != Hash(data.data(), body)) return bad("checksum mismatch (truncated or damaged)");
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
  return WriteAtomically((fs::path(step_dir) / "COMPLETE").string(), std::vector<uint8_t>(text.begin(), text.end()));
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

Status PruneCheckpoints(const std::string& dir, int keep) {
  std::vector<std::string> all = CompleteCheckpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i], ec);
    if (ec) return Status::IOError("cannot remove old checkpoint " + all[i] + ": " + ec.message());
  }
  return Status::Ok();
}

void ByteWriter::U64(uint64_t v) { PutU64(&out_, v); }

void ByteWriter::F64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  U64(bits);
}

void ByteWriter::Bytes(const std::vector<uint8_t>& b) {
  U64(b.size());
  out_.insert(out_.end(), b.begin(), b.end());
}

void ByteWriter::Floats(const float* data, size_t n) {
  U64(n * sizeof(float));
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  out_.insert(out_.end(), p, p + n * sizeof(float));
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
