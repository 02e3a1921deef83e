// The wire header and the checks every received message passes before it
// is delivered (Note [Strangers] in zmq_transport.cc).
#include "wire_header.h"

#include <gtest/gtest.h>

namespace frugal::comm {
namespace {

WireHeader DataHeader(uint32_t src, uint32_t world, uint64_t length) {
  WireHeader h;
  h.kind = WireKind::kData;
  h.src = src;
  h.world_size = world;
  h.tag = 0x0123456789abcdefull;
  h.length = length;
  h.seq = 0xfedcba9876543210ull;
  return h;
}

TEST(WireHeaderTest, RoundTrips) {
  auto bytes = DataHeader(2, 3, 77).Encode();
  auto h = WireHeader::Decode(bytes.data(), bytes.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->kind, WireKind::kData);
  EXPECT_EQ(h->src, 2u);
  EXPECT_EQ(h->world_size, 3u);
  EXPECT_EQ(h->tag, 0x0123456789abcdefull);
  EXPECT_EQ(h->length, 77u);
  EXPECT_EQ(h->seq, 0xfedcba9876543210ull);
}

TEST(WireHeaderTest, RejectsMalformedHeaders) {
  auto good = DataHeader(0, 2, 0).Encode();
  auto expect_corrupt = [](std::array<uint8_t, WireHeader::kSize> b, size_t size, const std::string& why) {
    auto h = WireHeader::Decode(b.data(), size);
    ASSERT_FALSE(h.ok()) << why;
    EXPECT_EQ(h.status().code(), Status::Code::kCorruption);
    EXPECT_NE(h.status().message().find(why), std::string::npos) << h.status().ToString();
  };
  expect_corrupt(good, 39, "39 bytes");
  expect_corrupt(good, 32, "32 bytes");
  expect_corrupt(good, 0, "0 bytes");
  auto b = good;
  b[0] ^= 1;
  expect_corrupt(b, b.size(), "magic");
  b = good;
  b[4] = 1;
  expect_corrupt(b, b.size(), "wire version 1");
  for (uint8_t kind : {0, 5, 255}) {
    b = good;
    b[5] = kind;
    expect_corrupt(b, b.size(), "unknown kind");
  }
}

TEST(WireHeaderTest, DecodeMessageChecksFramesAgainstTheWorld) {
  auto ok = DataHeader(1, 3, 5).Encode();
  EXPECT_TRUE(DecodeMessage(3, ok.data(), ok.size(), 5, /*self=*/0, /*world_size=*/3).ok());
  WireHeader part = DataHeader(1, 3, 5);  // Note [Messages in parts]: a part carries its payload.
  part.kind = WireKind::kDataPart;
  auto part_bytes = part.Encode();
  auto decoded = DecodeMessage(3, part_bytes.data(), part_bytes.size(), 5, /*self=*/0, /*world_size=*/3);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->kind, WireKind::kDataPart);
  struct Case {
    size_t frames;
    WireHeader header;
    size_t payload;
    int self;
    std::string why;
  };
  WireHeader ack = DataHeader(1, 3, 4);
  ack.kind = WireKind::kAck;
  const Case cases[] = {
      {2, DataHeader(1, 3, 5), 5, 0, "expected 3 frames, got 2"},
      {4, DataHeader(1, 3, 5), 5, 0, "expected 3 frames, got 4"},
      {1, DataHeader(1, 3, 5), 5, 0, "expected 3 frames, got 1"},
      {3, DataHeader(1, 4, 5), 5, 0, "believes the world has 4 ranks"},
      {3, DataHeader(3, 3, 5), 5, 0, "impossible sender rank 3"},
      {3, DataHeader(0xffffffffu, 3, 5), 5, 0, "impossible sender rank"},
      {3, DataHeader(0, 3, 5), 5, 0, "impossible sender rank 0"},  // Claims to be the receiver.
      {3, DataHeader(1, 3, 6), 5, 0, "announces 6 payload bytes, frame has 5"},
      {3, DataHeader(1, 3, ~0ull), 5, 0, "payload bytes"},
      {3, ack, 4, 0, "carries a payload"},
  };
  for (const Case& c : cases) {
    auto bytes = c.header.Encode();
    auto h = DecodeMessage(c.frames, bytes.data(), bytes.size(), c.payload, c.self, 3);
    ASSERT_FALSE(h.ok()) << c.why;
    EXPECT_EQ(h.status().code(), Status::Code::kCorruption);
    EXPECT_NE(h.status().message().find(c.why), std::string::npos) << h.status().ToString();
  }
  // Fewer than two frames: no header to look at.
  EXPECT_FALSE(DecodeMessage(0, nullptr, 0, 0, 0, 3).ok());
}

}  // namespace
}  // namespace frugal::comm
