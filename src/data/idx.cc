#include "frugal/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace frugal::data {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;
constexpr size_t kMaxDims = 4;
// Far above any MNIST-style file; rejects absurd headers before allocating.
constexpr uint64_t kMaxElements = uint64_t{1} << 32;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

Result<std::vector<uint8_t>> ReadPlainFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError(path + ": " + std::strerror(errno));
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) out.insert(out.end(), buf, buf + n);
  if (std::ferror(f.get())) {
    // fopen opens a directory on Linux; reading it fails with EISDIR. That is
    // the user's mistake (a wrong path), not an I/O fault.
    if (errno == EISDIR) return Status::InvalidArgument(path + ": is a directory, not an idx file");
    return Status::IOError(path + ": read failed");
  }
  return out;
}

Result<std::vector<uint8_t>> ReadGzipFile(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> compressed, ReadPlainFile(path));
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return Status::Internal("zlib init failed");
  std::vector<uint8_t> out;
  zs.next_in = compressed.data();
  zs.avail_in = static_cast<uInt>(compressed.size());
  uint8_t buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = buf;
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      std::string why = zs.msg != nullptr ? zs.msg : (rc == Z_BUF_ERROR ? "truncated" : "corrupt");
      inflateEnd(&zs);
      return Status::Corruption(path + ": gzip stream is corrupt or truncated (" + why + ")");
    }
    out.insert(out.end(), buf, buf + (sizeof(buf) - zs.avail_out));
    if (out.size() > kMaxElements) {
      inflateEnd(&zs);
      return Status::Corruption(path + ": decompresses to more than 4 GiB");
    }
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

Result<std::vector<uint8_t>> ReadMaybeGzipFile(const std::string& path) {
  if (EndsWith(path, ".gz")) return ReadGzipFile(path);
  return ReadPlainFile(path);
}

Result<IdxArray> ParseIdx(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4) return Status::Corruption("idx: header truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0) return Status::Corruption("idx: bad magic number");
  if (bytes[2] != kUnsignedByte) {
    return Status::Corruption("idx: unsupported element type 0x" + std::to_string(bytes[2]) + " (only unsigned byte)");
  }
  size_t ndims = bytes[3];
  if (ndims == 0 || ndims > kMaxDims) return Status::Corruption("idx: bad number of dimensions " + std::to_string(ndims));
  size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) return Status::Corruption("idx: dimension header truncated");
  IdxArray out;
  uint64_t elements = 1;
  for (size_t i = 0; i < ndims; ++i) {
    uint32_t d = ReadBigEndian32(&bytes[4 + 4 * i]);
    out.dims.push_back(d);
    elements *= d;
    if (elements > kMaxElements) return Status::Corruption("idx: dimensions too large");
  }
  if (bytes.size() - header != elements) {
    return Status::Corruption("idx: expected " + std::to_string(elements) + " data bytes, found " +
                              std::to_string(bytes.size() - header) +
                              (bytes.size() - header < elements ? " (truncated)" : " (trailing garbage)"));
  }
  out.data.assign(bytes.begin() + header, bytes.end());
  return out;
}

}  // namespace frugal::data
