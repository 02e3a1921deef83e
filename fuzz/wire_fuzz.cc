// libFuzzer target: the ZeroMQ transport's message check (DecodeMessage and
// WireHeader::Decode), the first code that sees a stranger's bytes on a
// worker's port. Input: frame count, receiving rank, world size and a
// payload-size choice (one byte each), then the header frame's bytes.
// Every accepted header must satisfy the contract DecodeMessage promises and
// re-encode to the same bytes (reserved bytes aside).
#include <cstring>

#include "fuzz_input.h"
#include "transport/zmq/wire_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal::comm;
  frugal::fuzz::Input in(data, size);
  const size_t frames = in.Byte() % 5;
  const int self = in.Byte() % 8;
  const int world = 1 + in.Byte() % 8;
  const uint8_t payload_choice = in.Byte();
  // Usually the size the header announces (so the later checks are reached),
  // sometimes another one.
  size_t payload_size = payload_choice;
  if (payload_choice % 2 == 0 && in.size() >= 32) {
    uint64_t announced = 0;
    std::memcpy(&announced, in.data() + 24, 8);  // little-endian hosts only, as the fuzz build
    payload_size = announced;
  }
  auto h = DecodeMessage(frames, in.data(), in.size(), payload_size, self, world);
  if (!h.ok()) {
    FRUGAL_FUZZ_CHECK(!h.status().message().empty());
    return 0;
  }
  FRUGAL_FUZZ_CHECK(frames == 3 && in.size() == WireHeader::kSize);
  FRUGAL_FUZZ_CHECK(h->world_size == static_cast<uint32_t>(world));
  FRUGAL_FUZZ_CHECK(h->src < h->world_size && static_cast<int>(h->src) != self);
  FRUGAL_FUZZ_CHECK(h->length == payload_size);
  FRUGAL_FUZZ_CHECK(h->kind == WireKind::kData || h->kind == WireKind::kDataPart || h->length == 0);
  auto again = h->Encode();
  FRUGAL_FUZZ_CHECK(std::memcmp(again.data(), in.data(), 6) == 0);
  FRUGAL_FUZZ_CHECK(std::memcmp(again.data() + 8, in.data() + 8, WireHeader::kSize - 8) == 0);
  return 0;
}
