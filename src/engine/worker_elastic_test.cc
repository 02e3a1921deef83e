// Elastic workers as threads of one process: a MembershipServer on
// loopback and Worker::CreateElastic over real ZeroMQ transports (the
// process-level scenarios are in elastic_test.py).
#include <future>
#include <memory>

#include <gtest/gtest.h>

#include "frugal/comm/membership/membership.h"
#include "worker_test_util.h"

namespace frugal::engine {
namespace {

using namespace std::chrono_literals;

struct ElasticOutcome {
  Status status;
  WorkerResult result;
};

uint64_t MessagesSent(const WorkerResult& r) {
  return r.traffic.intra_cluster.messages_sent + r.traffic.inter_cluster.messages_sent;
}

// One elastic worker per cluster name, as threads, against the membership
// server at `endpoint`; worker `leaver` leaves at its first check gate.
std::vector<ElasticOutcome> RunElasticWorkers(const std::string& endpoint, const RunConfig& o,
                                              const std::vector<std::string>& clusters, int leaver) {
  std::vector<ElasticOutcome> out(clusters.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clusters.size(); ++i) {
    threads.emplace_back([&, i] {
      comm::MembershipClientOptions co;
      co.server = endpoint;
      co.cluster = clusters[i];
      co.heartbeat_interval = 100ms;
      co.timeout = 60s;
      auto client = comm::MembershipClient::Create(co);
      if (!client.ok()) {
        out[i].status = client.status();
        return;
      }
      auto worker = Worker::CreateElastic(o, std::move(*client));
      if (!worker.ok()) {
        out[i].status = worker.status();
        return;
      }
      if (static_cast<int>(i) == leaver) (*worker)->leave_signal() = true;  // acted on at the first check gate
      auto result = (*worker)->Run();
      out[i].status = result.status();
      if (result.ok()) out[i].result = *result;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Three workers; one leaves gracefully at the first check gate (step 10).
// The others finish the run's 14 steps as two. Every counter of a
// WorkerResult covers the whole run: the leaver's are those of generation
// 1, and a survivor's add generation 2's to them. In every mode: the local
// mode (Note [Local mode across worlds]) with rounds of 4 steps in 2
// overlapped fragments, so that the gate at step 10 falls between two sync
// points with a fragment's exchange in flight; the site mode the same over
// clusters a, a, b, whose leaver leaves cluster a with one member
// (Note [Elastic site replicas]).
class WorkerElasticTest : public ::testing::TestWithParam<SyncMode> {};

TEST_P(WorkerElasticTest, CountersCoverEveryGenerationOfTheRun) {
  const std::vector<std::string> clusters =
      GetParam() == SyncMode::kSite ? std::vector<std::string>{"a", "b", "a"} : std::vector<std::string>(3, "local");
  comm::MembershipOptions mo;
  mo.world_size = 3;
  mo.min_workers = 2;
  mo.heartbeat_timeout = 5s;  // threads of a loaded test process may be slow
  mo.timeout = 60s;
  mo.log = [](const std::string&) {};
  auto server = comm::MembershipServer::Bind("tcp://127.0.0.1:*", mo);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto served = std::async(std::launch::async, [&] { return (*server)->Serve(); });

  RunConfig o = BaseOptions(std::string("elastic-counters-") + NameOf(GetParam()));
  o.train.model = "mlp";
  o.distributed.sync = GetParam();
  if (GetParam() != SyncMode::kStep) {
    o.distributed.local_steps = 4;
    o.distributed.local_fragments = 2;
    o.distributed.local_overlap = true;
    o.distributed.outer_lr = 1;
    o.distributed.outer_momentum = 0;
  }
  o.train.max_steps = 14;
  o.elastic.elastic = true;
  o.elastic.elastic_every = 10;
  const int kLeaver = 2;
  std::vector<ElasticOutcome> out = RunElasticWorkers((*server)->endpoint(), o, clusters, kLeaver);
  const Status serve = served.get();
  EXPECT_TRUE(serve.ok()) << serve.ToString();
  for (auto& r : out) ASSERT_TRUE(r.status.ok()) << r.status.ToString();

  const WorkerResult& leaver = out[kLeaver].result;
  ASSERT_TRUE(leaver.left);
  EXPECT_EQ(leaver.generation, 1);
  EXPECT_EQ(leaver.train.steps, 10);
  EXPECT_GT(MessagesSent(leaver), 0u);
  EXPECT_GT(leaver.compute_s, 0);
  EXPECT_GT(leaver.sparsify_s + leaver.exchange_s + leaver.optimizer_s, 0);
  for (int i : {0, 1}) {
    const WorkerResult& r = out[i].result;
    ASSERT_FALSE(r.left);
    EXPECT_EQ(r.generation, 2);
    EXPECT_EQ(r.train.steps, 14);
    EXPECT_EQ(r.final_checksum, out[0].result.final_checksum);
    // Generation 1 (10 steps among three) matches the leaver's; the 4
    // steps of generation 2 come on top. Counting only the last generation
    // would give about a fifth of the leaver's messages. In the site mode
    // each survivor is alone in its cluster in generation 2 and sends no
    // cluster average there, and in generation 1 the leaver's cluster
    // partner sent its round to the leader (or the leader to the other
    // cluster), so only half of the leaver's count is certain.
    const uint64_t floor = GetParam() == SyncMode::kSite ? MessagesSent(leaver) / 2 : MessagesSent(leaver);
    EXPECT_GT(MessagesSent(r), floor) << "worker " << i;
    EXPECT_GT(r.compute_s, 0);
    EXPECT_GT(r.sparsify_s + r.exchange_s + r.optimizer_s, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, WorkerElasticTest,
                         ::testing::Values(SyncMode::kStep, SyncMode::kLocal, SyncMode::kSite),
                         [](const ::testing::TestParamInfo<SyncMode>& i) { return std::string(NameOf(i.param)); });

}  // namespace
}  // namespace frugal::engine
