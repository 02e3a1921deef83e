#include "frugal/engine/elastic_session.h"

#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "frugal/common/clock.h"

namespace frugal::engine {
namespace {

// A client that never registers: its heartbeats never start, so nothing
// reports a pending generation.
std::unique_ptr<comm::MembershipClient> SilentClient() {
  comm::MembershipClientOptions o;
  o.server = "tcp://127.0.0.1:1";
  auto client = comm::MembershipClient::Create(o);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(*client) : nullptr;
}

// AwaitChange's deadline (twice the heartbeat timeout plus 2 s) is on the
// session's clock: a manual clock reaches it by the session's own sleeps,
// and no real time needs to pass.
TEST(ElasticSessionTest, AwaitChangeGivesUpAtItsDeadlineOnTheGivenClock) {
  const struct {
    std::chrono::milliseconds heartbeat_timeout;
    std::chrono::seconds deadline;
  } cases[] = {{std::chrono::milliseconds(3000), std::chrono::seconds(8)},
               {std::chrono::milliseconds(500), std::chrono::seconds(3)}};
  for (const auto& c : cases) {
    auto client = SilentClient();
    ASSERT_NE(client, nullptr);
    ManualClock clock;
    const Clock::time_point start = clock.Now();
    ElasticSession session(std::move(client), std::chrono::milliseconds(1000), c.heartbeat_timeout, clock);
    EXPECT_FALSE(session.AwaitChange());
    const Clock::duration waited = clock.Now() - start;
    EXPECT_GE(waited, c.deadline) << "heartbeat timeout " << c.heartbeat_timeout.count() << " ms";
    EXPECT_LT(waited, c.deadline + std::chrono::milliseconds(20)) << "heartbeat timeout "
                                                                  << c.heartbeat_timeout.count() << " ms";
  }
}

// Note [Snapshots made in the last one's place]: before a new snapshot is
// built only the newest is kept, and its predecessor's buffers are what the
// new one's sections are built in; after it, the newest two are kept.
TEST(ElasticSessionTest, ANewSnapshotIsBuiltInTheBuffersOfTheOneBeforeTheNewest) {
  auto client = SilentClient();
  ASSERT_NE(client, nullptr);
  ManualClock clock;
  ElasticSession session(std::move(client), std::chrono::milliseconds(1000), std::chrono::milliseconds(2000), clock);
  auto sections = [] { return CheckpointSections{{"big", std::vector<uint8_t>(3 << 20, 7)}}; };
  session.TakeSnapshot(8, sections());
  session.TakeSnapshot(16, sections());
  EXPECT_EQ(session.newest_snapshot(), 16);
  session.MakeRoomForSnapshot();
  EXPECT_TRUE(session.HasSnapshot(16)) << "the newest is kept";
  session.TakeSnapshot(24, sections());
  EXPECT_EQ(session.newest_snapshot(), 24);
  session.MakeRoomForSnapshot();
  session.TakeSnapshot(24, sections());  // a snapshot of the same step replaces it
  EXPECT_TRUE(session.HasSnapshot(24));
}

}  // namespace
}  // namespace frugal::engine
