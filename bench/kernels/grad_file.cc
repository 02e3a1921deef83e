#include "grad_file.h"

#include <cstdint>
#include <cstring>
#include <fstream>

namespace frugal::bench {
namespace {
constexpr char kMagic[4] = {'F', 'R', 'G', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxElements = uint64_t{1} << 32;
}  // namespace

Status WriteGradFile(const std::string& path, const std::vector<NamedGradient>& grads) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::IOError("cannot open " + path + " for writing");
  uint32_t count = static_cast<uint32_t>(grads.size());
  out.write(kMagic, 4);
  out.write(reinterpret_cast<const char*>(&kVersion), 4);
  out.write(reinterpret_cast<const char*>(&count), 4);
  for (const auto& g : grads) {
    uint32_t len = static_cast<uint32_t>(g.name.size());
    uint64_t n = g.values.size();
    out.write(reinterpret_cast<const char*>(&len), 4);
    out.write(g.name.data(), len);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(reinterpret_cast<const char*>(g.values.data()), static_cast<std::streamsize>(4 * n));
  }
  if (!out) return Status::IOError("write to " + path + " failed");
  return Status::Ok();
}

Result<std::vector<NamedGradient>> ReadGradFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open gradient file " + path);
  char magic[4];
  uint32_t version = 0, count = 0;
  if (!in.read(magic, 4) || !in.read(reinterpret_cast<char*>(&version), 4) ||
      !in.read(reinterpret_cast<char*>(&count), 4)) {
    return Status::Corruption(path + ": header truncated");
  }
  if (std::memcmp(magic, kMagic, 4) != 0) return Status::Corruption(path + ": not a FRGD gradient file");
  if (version != kVersion) return Status::Corruption(path + ": unsupported version " + std::to_string(version));
  std::vector<NamedGradient> grads;
  for (uint32_t t = 0; t < count; ++t) {
    uint32_t len = 0;
    uint64_t n = 0;
    NamedGradient g;
    if (!in.read(reinterpret_cast<char*>(&len), 4) || len > 4096) {
      return Status::Corruption(path + ": tensor " + std::to_string(t) + ": bad name length");
    }
    g.name.resize(len);
    if (!in.read(g.name.data(), len) || !in.read(reinterpret_cast<char*>(&n), 8) || n > kMaxElements) {
      return Status::Corruption(path + ": tensor " + std::to_string(t) + ": bad header");
    }
    g.values.resize(n);
    if (!in.read(reinterpret_cast<char*>(g.values.data()), static_cast<std::streamsize>(4 * n))) {
      return Status::Corruption(path + ": tensor '" + g.name + "' truncated");
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace frugal::bench
