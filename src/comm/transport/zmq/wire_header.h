// WireHeader: the fixed 40-byte header in front of every ZeroMQ message.
// Little-endian, independent of the host (docs/design/comm.md has the layout).
#pragma once

#include <array>
#include <cstdint>

#include "frugal/comm/transport/transport.h"

namespace frugal::comm {

enum class WireKind : uint8_t {
  kData = 1,     // A Transport message; the payload frame follows.
  kGoodbye = 2,  // The sender closed its transport; payload frame empty.
  kAck = 3,      // The sender has read every data message we sent it up to
                 // and including `seq` (cumulative); payload frame empty.
                 // Note [Busy time], Note [Resend after reconnect].
  kDataPart = 4, // A part of a Transport message whose later parts follow,
                 // the last one as kData (Note [Messages in parts]).
};

struct WireHeader {
  static constexpr uint32_t kMagic = 0x31475246;  // "FRG1" in little-endian byte order.
  static constexpr uint8_t kVersion = 3;
  static constexpr size_t kSize = 40;

  WireKind kind = WireKind::kData;
  uint32_t src = 0;
  uint32_t world_size = 0;
  Tag tag = 0;
  uint64_t length = 0;  // Payload bytes in the next frame.
  // kData, kDataPart: the frame's number on its (sender, receiver) pair, from 1.
  // kAck: the newest data message delivered in order. kGoodbye: 0.
  uint64_t seq = 0;

  std::array<uint8_t, kSize> Encode() const;
  // Corruption with the reason if `data` is not a well-formed header.
  static Result<WireHeader> Decode(const uint8_t* data, size_t size);
};

// Checks a message received by rank `self` of a world of `world_size` ranks:
// frames [routing id][header][payload] (`frame_count` of them; `header` and
// `payload_size` describe frames 1 and 2). Returns the header, or Corruption
// with the reason: wrong frame count, malformed header, a sender outside the
// world or equal to `self`, another world size, a length that does not match
// the payload. Input is untrusted (Note [Strangers] in zmq_transport.cc).
Result<WireHeader> DecodeMessage(size_t frame_count, const uint8_t* header, size_t header_size, size_t payload_size,
                                 int self, int world_size);

}  // namespace frugal::comm
