// Transport contract tests, run over every backend.
#include "frugal/comm/transport/transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "frugal/comm/transport/inproc_transport.h"
#include "testing/test_world.h"

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;
using testing::Backend;
using testing::MakeWorld;
using testing::World;

constexpr milliseconds kShort{200};
constexpr milliseconds kLong{5000};

Bytes Text(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string Str(const Bytes& b) { return std::string(b.begin(), b.end()); }

class TransportTest : public ::testing::TestWithParam<Backend> {};

TEST_P(TransportTest, DeliversPayloadWithSourceAndTag) {
  World w = MakeWorld(GetParam(), {"a", "a"});
  ASSERT_EQ(w.ranks.size(), 2u);
  EXPECT_EQ(w.ranks[1]->rank(), 1);
  EXPECT_EQ(w.ranks[1]->world_size(), 2);
  EXPECT_EQ(w.ranks[1]->cluster(), "a");
  ASSERT_TRUE(w.ranks[0]->Send(1, 7, Text("hello")).ok());
  auto msg = w.ranks[1]->Recv(0, 7, kLong);
  ASSERT_TRUE(msg.ok()) << msg.status().ToString();
  EXPECT_EQ(msg->src, 0);
  EXPECT_EQ(msg->tag, 7u);
  EXPECT_EQ(Str(msg->payload), "hello");
}

TEST_P(TransportTest, EmptyAndLargePayloadsArriveIntact) {
  World w = MakeWorld(GetParam(), {"a", "a"});
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  ASSERT_TRUE(w.ranks[0]->Send(1, 1, Bytes()).ok());
  ASSERT_TRUE(w.ranks[0]->Send(1, 2, big).ok());
  auto empty = w.ranks[1]->Recv(0, 1, kLong);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->payload.empty());
  auto got = w.ranks[1]->Recv(0, 2, kLong);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->payload, big);
}

TEST_P(TransportTest, QueuesMessagesForTagsNotYetAskedFor) {
  World w = MakeWorld(GetParam(), {"a", "a", "a"});
  ASSERT_TRUE(w.ranks[0]->Send(2, 10, Text("ten-1")).ok());
  ASSERT_TRUE(w.ranks[1]->Send(2, 20, Text("twenty-from-1")).ok());
  ASSERT_TRUE(w.ranks[0]->Send(2, 20, Text("twenty-from-0")).ok());
  ASSERT_TRUE(w.ranks[0]->Send(2, 10, Text("ten-2")).ok());
  // Ask in an order unrelated to the send order.
  auto a = w.ranks[2]->Recv(0, 20, kLong);
  auto b = w.ranks[2]->Recv(1, 20, kLong);
  auto c = w.ranks[2]->Recv(0, 10, kLong);
  auto d = w.ranks[2]->Recv(0, 10, kLong);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(Str(a->payload), "twenty-from-0");
  EXPECT_EQ(Str(b->payload), "twenty-from-1");
  EXPECT_EQ(Str(c->payload), "ten-1");  // FIFO per (src, tag).
  EXPECT_EQ(Str(d->payload), "ten-2");
}

TEST_P(TransportTest, SendToSelfIsDeliveredAndNotCounted) {
  World w = MakeWorld(GetParam(), {"a", "b"});
  ASSERT_TRUE(w.ranks[0]->Send(0, 3, Text("me")).ok());
  auto msg = w.ranks[0]->Recv(0, 3, kLong);
  ASSERT_TRUE(msg.ok()) << msg.status().ToString();
  EXPECT_EQ(Str(msg->payload), "me");
  TransportStats s = w.ranks[0]->stats();
  EXPECT_EQ(s.intra_cluster.bytes_sent + s.inter_cluster.bytes_sent, 0u);
}

TEST_P(TransportTest, CountsBytesPerPeerAndLinkClassOnBothEnds) {
  World w = MakeWorld(GetParam(), {"a", "a", "b"});
  ASSERT_TRUE(w.ranks[0]->Send(1, 1, Bytes(100)).ok());
  ASSERT_TRUE(w.ranks[0]->Send(2, 1, Bytes(1000)).ok());
  ASSERT_TRUE(w.ranks[0]->Send(2, 2, Bytes(24)).ok());
  ASSERT_TRUE(w.ranks[1]->Recv(0, 1, kLong).ok());
  ASSERT_TRUE(w.ranks[2]->Recv(0, 1, kLong).ok());
  ASSERT_TRUE(w.ranks[2]->Recv(0, 2, kLong).ok());

  TransportStats s0 = w.ranks[0]->stats();
  EXPECT_EQ(s0.per_peer[1].bytes_sent, 100u);
  EXPECT_EQ(s0.per_peer[2].bytes_sent, 1024u);
  EXPECT_EQ(s0.per_peer[2].messages_sent, 2u);
  EXPECT_EQ(s0.intra_cluster.bytes_sent, 100u);
  EXPECT_EQ(s0.inter_cluster.bytes_sent, 1024u);
  EXPECT_EQ(s0.inter_cluster.bytes_received, 0u);

  TransportStats s1 = w.ranks[1]->stats();
  EXPECT_EQ(s1.per_peer[0].bytes_received, 100u);
  EXPECT_EQ(s1.intra_cluster.bytes_received, 100u);
  EXPECT_EQ(s1.inter_cluster.bytes_received, 0u);

  TransportStats s2 = w.ranks[2]->stats();
  EXPECT_EQ(s2.link(LinkClass::kInterCluster).bytes_received, 1024u);
  EXPECT_EQ(s2.inter_cluster.messages_received, 2u);
  EXPECT_EQ(s2.intra_cluster.bytes_received, 0u);
}

TEST_P(TransportTest, StatsSinceGivesPerStepTraffic) {
  World w = MakeWorld(GetParam(), {"a", "b"});
  ASSERT_TRUE(w.ranks[0]->Send(1, 1, Bytes(10)).ok());
  TransportStats before = w.ranks[0]->stats();
  ASSERT_TRUE(w.ranks[0]->Send(1, 2, Bytes(32)).ok());
  TransportStats step = w.ranks[0]->stats().Since(before);
  EXPECT_EQ(step.inter_cluster.bytes_sent, 32u);
  EXPECT_EQ(step.inter_cluster.messages_sent, 1u);
  EXPECT_EQ(step.per_peer[1].bytes_sent, 32u);
}

// The transport must drop its reference to a sent buffer once the bytes are
// out (the ZeroMQ zero-copy free callback), or every step would leak.
TEST_P(TransportTest, ReleasesSentBuffers) {
  World w = MakeWorld(GetParam(), {"a", "a"});
  auto payload = std::make_shared<const Bytes>(Bytes(1 << 20, 7));
  ASSERT_TRUE(w.ranks[0]->Send(1, 1, payload).ok());
  auto got = w.ranks[1]->Recv(0, 1, kLong);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->payload, *payload);
  // The receiver has the bytes, so the sender's side is done with them;
  // ZeroMQ may call the free callback a moment later on its own thread.
  for (int i = 0; i < 500 && payload.use_count() > 1; ++i) std::this_thread::sleep_for(milliseconds(2));
  EXPECT_EQ(payload.use_count(), 1);
}

TEST_P(TransportTest, SilentPeerTimesOutNamingThePeer) {
  World w = MakeWorld(GetParam(), {"a", "b"});
  auto msg = w.ranks[0]->Recv(1, 42, kShort);
  ASSERT_FALSE(msg.ok());
  EXPECT_EQ(msg.status().code(), Status::Code::kTimeout);
  EXPECT_NE(msg.status().message().find("rank 1 (cluster b)"), std::string::npos) << msg.status().ToString();
  EXPECT_NE(msg.status().message().find("tag 42"), std::string::npos);
}

TEST_P(TransportTest, ClosedPeerIsUnavailableAfterItsQueuedMessages) {
  World w = MakeWorld(GetParam(), {"a", "a"});
  ASSERT_TRUE(w.ranks[1]->Send(0, 5, Text("last words")).ok());
  w.ranks[1].reset();
  auto first = w.ranks[0]->Recv(1, 5, kLong);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(Str(first->payload), "last words");
  auto next = w.ranks[0]->Recv(1, 5, kLong);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), Status::Code::kUnavailable) << next.status().ToString();
  EXPECT_NE(next.status().message().find("rank 1"), std::string::npos);
  auto send = w.ranks[0]->Send(1, 6, Text("anyone?"));
  EXPECT_EQ(send.code(), Status::Code::kUnavailable) << send.ToString();
}

TEST_P(TransportTest, RejectsRanksOutsideTheWorld) {
  World w = MakeWorld(GetParam(), {"a", "a"});
  EXPECT_EQ(w.ranks[0]->Send(2, 1, Bytes()).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w.ranks[0]->Send(-1, 1, Bytes()).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w.ranks[0]->Recv(5, 1, kShort).status().code(), Status::Code::kInvalidArgument);
}

TEST_P(TransportTest, ConcurrentSendersAndReceiversOnManyTags) {
  constexpr int kRanks = 4;
  constexpr int kTags = 16;
  World w = MakeWorld(GetParam(), {"a", "a", "b", "b"});
  std::atomic<int> failures{0};
  testing::RunRanks(kRanks, [&](int me) {
    Transport& t = *w.ranks[me];
    for (int tag = 0; tag < kTags; ++tag) {
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == me) continue;
        Bytes b(8 + tag, static_cast<uint8_t>(me * 16 + tag));
        if (!t.Send(peer, tag, std::move(b)).ok()) failures++;
      }
    }
    // Receive in reverse tag order to exercise the queues.
    for (int tag = kTags - 1; tag >= 0; --tag) {
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == me) continue;
        auto m = t.Recv(peer, tag, kLong);
        if (!m.ok() || m->payload != Bytes(8 + tag, static_cast<uint8_t>(peer * 16 + tag))) failures++;
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest, ::testing::Values(Backend::kInProc, Backend::kZmq),
                         [](const auto& info) { return testing::BackendName(info.param); });

TEST(InProcHubTest, RejectsDuplicateAndOutOfRangeRanks) {
  InProcHub hub(Topology::SingleCluster(2));
  auto t0 = hub.CreateTransport(0);
  ASSERT_TRUE(t0.ok());
  EXPECT_EQ(hub.CreateTransport(0).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(hub.CreateTransport(2).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace frugal::comm
