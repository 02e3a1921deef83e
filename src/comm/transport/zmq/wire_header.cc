#include "wire_header.h"

#include <string>

namespace frugal::comm {

namespace {

template <typename T>
void Put(uint8_t* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

template <typename T>
T Get(const uint8_t* in) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

// Layout: magic u32 | version u8 | kind u8 | reserved u16 | src u32 |
//         world_size u32 | tag u64 | length u64 | seq u64.
std::array<uint8_t, WireHeader::kSize> WireHeader::Encode() const {
  std::array<uint8_t, kSize> out{};
  Put<uint32_t>(&out[0], kMagic);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(kind);
  Put<uint16_t>(&out[6], 0);
  Put<uint32_t>(&out[8], src);
  Put<uint32_t>(&out[12], world_size);
  Put<uint64_t>(&out[16], tag);
  Put<uint64_t>(&out[24], length);
  Put<uint64_t>(&out[32], seq);
  return out;
}

Result<WireHeader> WireHeader::Decode(const uint8_t* data, size_t size) {
  if (size != kSize) {
    return Status::Corruption("message header is " + std::to_string(size) + " bytes, expected " +
                              std::to_string(kSize));
  }
  if (Get<uint32_t>(data) != kMagic) return Status::Corruption("message header has a bad magic number");
  if (data[4] != kVersion) {
    return Status::Corruption("peer speaks wire version " + std::to_string(data[4]) + ", this build speaks " +
                              std::to_string(kVersion));
  }
  WireHeader h;
  if (data[5] < static_cast<uint8_t>(WireKind::kData) || data[5] > static_cast<uint8_t>(WireKind::kDataPart)) {
    return Status::Corruption("message header has unknown kind " + std::to_string(data[5]));
  }
  h.kind = static_cast<WireKind>(data[5]);
  h.src = Get<uint32_t>(data + 8);
  h.world_size = Get<uint32_t>(data + 12);
  h.tag = Get<uint64_t>(data + 16);
  h.length = Get<uint64_t>(data + 24);
  h.seq = Get<uint64_t>(data + 32);
  return h;
}

Result<WireHeader> DecodeMessage(size_t frame_count, const uint8_t* header, size_t header_size, size_t payload_size,
                                 int self, int world_size) {
  if (frame_count != 3) return Status::Corruption("expected 3 frames, got " + std::to_string(frame_count));
  FRUGAL_ASSIGN_OR_RETURN(WireHeader h, WireHeader::Decode(header, header_size));
  if (h.world_size != static_cast<uint32_t>(world_size)) {
    return Status::Corruption("sender believes the world has " + std::to_string(h.world_size) + " ranks, this rank " +
                              std::to_string(world_size));
  }
  if (h.src >= h.world_size || static_cast<int64_t>(h.src) == self) {
    return Status::Corruption("impossible sender rank " + std::to_string(h.src));
  }
  if (h.length != payload_size) {
    return Status::Corruption("header from rank " + std::to_string(h.src) + " announces " + std::to_string(h.length) +
                              " payload bytes, frame has " + std::to_string(payload_size));
  }
  if (h.kind != WireKind::kData && h.kind != WireKind::kDataPart && h.length != 0) {
    return Status::Corruption("control message from rank " + std::to_string(h.src) + " carries a payload");
  }
  return h;
}

}  // namespace frugal::comm
