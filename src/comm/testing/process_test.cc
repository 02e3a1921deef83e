// The ZeroMQ exchange across real processes on loopback: two ranks are
// threads of this test, two are frugal_comm_test_peer processes. Also: a
// worker killed with SIGKILL becomes an error on every survivor, not a hang.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/algorithms/sparse_exchange.h"
#include "test_combine.h"
#include "test_world.h"

extern char** environ;

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;

pid_t SpawnPeer(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string bin = FRUGAL_COMM_TEST_PEER;
  argv.push_back(bin.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ);
  EXPECT_EQ(rc, 0) << "cannot start " << bin;
  return rc == 0 ? pid : -1;
}

// waitpid with a watchdog: a peer that hangs is killed and reported.
int WaitPeer(pid_t pid) {
  if (pid <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "peer process " << pid << " hung; killing it";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return status;
}

struct RankOutcome {
  int completed = 0;
  Status error;
};

// Ranks 0 and 1 (cluster "a") as threads; ranks 2 and 3 (cluster "b") as
// processes started with `peer_args[i]` appended.
std::vector<RankOutcome> RunMixedWorld(int iterations, milliseconds timeout, milliseconds grace,
                                       const std::vector<std::vector<std::string>>& extra_args,
                                       std::vector<int>* peer_status) {
  ZmqOptions zmq;
  zmq.linger = milliseconds(500);
  zmq.peer_lost_grace = grace;
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 4, zmq);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return {};
  std::thread serve([&] {
    auto t = (*server)->Serve(milliseconds(10000));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
  });
  std::vector<pid_t> pids;
  for (int r = 2; r < 4; ++r) {
    std::vector<std::string> args{"--rendezvous", (*server)->endpoint(), "--rank", std::to_string(r),
                                  "--cluster",    "b",
                                  "--iterations", std::to_string(iterations),
                                  "--timeout-ms", std::to_string(timeout.count()),
                                  "--grace-ms",   std::to_string(grace.count())};
    for (const auto& a : extra_args[r - 2]) args.push_back(a);
    pids.push_back(SpawnPeer(args));
  }
  std::vector<RankOutcome> outcomes(2);
  testing::RunRanks(2, [&](int r) {
    JoinOptions join;
    join.rendezvous = (*server)->endpoint();
    join.rank = r;
    join.cluster = "a";
    join.timeout = milliseconds(10000);
    join.zmq = zmq;
    auto t = JoinZmqWorld(join);
    if (!t.ok()) {
      outcomes[r].error = t.status();
      return;
    }
    MessageExchangeOptions opts;
    opts.timeout = timeout;
    SparseExchange ex(t->get(), testing::SumU32, opts);
    for (int it = 0; it < iterations; ++it) {
      auto out = ex.Run(it, testing::ExchangeInput(it, r));
      if (!out.ok()) {
        outcomes[r].error = out.status();
        return;
      }
      EXPECT_EQ(*out, testing::ExchangeExpected(it, 4)) << "rank " << r << " iteration " << it;
      outcomes[r].completed++;
    }
  });
  serve.join();
  for (pid_t pid : pids) peer_status->push_back(WaitPeer(pid));
  return outcomes;
}

TEST(ProcessTest, TwoProcessesAndTwoThreadsExchangeAcrossTwoClusters) {
  std::vector<int> peer_status;
  auto outcomes = RunMixedWorld(10, milliseconds(5000), milliseconds(1000), {{}, {}}, &peer_status);
  ASSERT_EQ(outcomes.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(outcomes[r].error.ok()) << outcomes[r].error.ToString();
    EXPECT_EQ(outcomes[r].completed, 10);
  }
  ASSERT_EQ(peer_status.size(), 2u);
  for (int s : peer_status) {
    ASSERT_TRUE(WIFEXITED(s)) << "status " << s;
    EXPECT_EQ(WEXITSTATUS(s), 0);
  }
}

// Receive timeouts alone: lost-peer detection is effectively off (grace 60 s).
TEST(ProcessTest, KilledWorkerIsAnErrorOnEverySurvivorNotAHang) {
  std::vector<int> peer_status;
  // Rank 3 dies (SIGKILL, no goodbye) before exchange 2. The timeout also
  // bounds exchange 0, which waits for the peer processes to connect: 2 s
  // leaves room for a loaded machine and ThreadSanitizer's slowdown, where
  // 500 ms did not.
  auto outcomes =
      RunMixedWorld(5, milliseconds(2000), milliseconds(60000), {{}, {"--die-before", "2"}}, &peer_status);
  ASSERT_EQ(outcomes.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].completed, 2) << "rank " << r;
    ASSERT_FALSE(outcomes[r].error.ok()) << "rank " << r;
    auto code = outcomes[r].error.code();
    EXPECT_TRUE(code == Status::Code::kTimeout || code == Status::Code::kUnavailable)
        << outcomes[r].error.ToString();
    EXPECT_NE(outcomes[r].error.message().find("exchange tag 2"), std::string::npos)
        << outcomes[r].error.ToString();
  }
  ASSERT_EQ(peer_status.size(), 2u);
  // Rank 2 (leader of cluster b) noticed and exited with an error.
  ASSERT_TRUE(WIFEXITED(peer_status[0])) << "status " << peer_status[0];
  EXPECT_EQ(WEXITSTATUS(peer_status[0]), 1);
  ASSERT_TRUE(WIFSIGNALED(peer_status[1]));
  EXPECT_EQ(WTERMSIG(peer_status[1]), SIGKILL);
}

// Lost-peer detection: with a receive timeout far away (20 s), the dropped
// connection of the killed rank makes its leader fail with Unavailable, and
// the failure cascades through goodbyes: every survivor gets Unavailable,
// none waits for its timeout.
TEST(ProcessTest, KilledWorkerIsDetectedBeforeTheTimeout) {
  std::vector<int> peer_status;
  auto outcomes =
      RunMixedWorld(5, milliseconds(20000), milliseconds(100), {{}, {"--die-before", "2"}}, &peer_status);
  ASSERT_EQ(outcomes.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].completed, 2) << "rank " << r;
    EXPECT_EQ(outcomes[r].error.code(), Status::Code::kUnavailable) << outcomes[r].error.ToString();
  }
  ASSERT_EQ(peer_status.size(), 2u);
  ASSERT_TRUE(WIFEXITED(peer_status[0])) << "status " << peer_status[0];
  EXPECT_EQ(WEXITSTATUS(peer_status[0]), 1);
}

}  // namespace
}  // namespace frugal::comm
