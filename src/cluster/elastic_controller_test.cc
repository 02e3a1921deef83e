// The manager with the elastic controller (Note [Elastic jobs]): resizes in
// place, the restart fallback, and recovery of the elastic state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "frugal/cluster/cluster_manager.h"

namespace frugal::cluster {
namespace {

JobSubmission Job(const std::string& name, int min_w, int max_w) {
  return {name, "model = \"mlp\"\nmax_steps = 40\n", min_w, max_w, 40, ""};
}

bool Has(const TaskSpec& t, const std::string& arg) { return std::count(t.args.begin(), t.args.end(), arg) > 0; }

class ElasticManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClusterManager> Open(const std::string& path = ":memory:") {
    auto store = StateStore::Open(path);
    EXPECT_TRUE(store.ok()) << store.status().message();
    ManagerOptions o;
    o.policy = "afs-p";
    auto m = ClusterManager::Open(std::move(*store), NewElasticJobController(), clock_, o);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(*m);
  }
  AgentReply Beat(ClusterManager& m, std::vector<TaskExit> exits = {}, std::vector<TaskEndpoint> endpoints = {},
                  std::vector<MetricSample> samples = {}) {
    AgentReport r;
    r.node = "host-a";
    r.slots = 4;
    r.exited = std::move(exits);
    r.endpoints = std::move(endpoints);
    r.samples = std::move(samples);
    auto reply = m.Heartbeat(r);
    EXPECT_TRUE(reply.ok()) << reply.status().message();
    return reply.ok() ? *reply : AgentReply{};
  }
  static std::set<std::string> Ids(const AgentReply& r) {
    std::set<std::string> out;
    for (const TaskSpec& t : r.tasks) out.insert(t.task_id);
    return out;
  }
  static std::vector<TaskSpec> Workers(const AgentReply& r, int64_t job) {
    std::vector<TaskSpec> out;
    for (const TaskSpec& t : r.tasks) {
      if (t.job_id == job && Has(t, "worker")) out.push_back(t);
    }
    return out;
  }
  // Job `id` reports step 5 of its first world.
  static std::vector<MetricSample> Step(int64_t id) { return {{id, 5, 0, 4, 128, 2.0, -1, 100.0}}; }
  // Starts job 1 alone on host-a (4 slots).
  std::unique_ptr<ClusterManager> StartOne() {
    auto m = Open();
    Beat(*m);
    EXPECT_TRUE(m->Submit(Job("a", 2, 4)).ok());
    EXPECT_TRUE(m->RunRound().ok());
    return m;
  }
  ManualClock clock_;
};

TEST_F(ElasticManagerTest, WorkersStartOnceTheCoordinatorsEndpointIsKnown) {
  auto m = StartOne();
  AgentReply reply = Beat(*m);
  ASSERT_EQ(reply.tasks.size(), 1u);
  const TaskSpec& coord = reply.tasks[0];
  EXPECT_EQ(coord.task_id, "job-1-g1-c");
  EXPECT_TRUE(coord.reports_endpoint);
  EXPECT_TRUE(coord.reads_metrics) << "its agent forwards the run's records";
  EXPECT_TRUE(Has(coord, "--elastic") && Has(coord, "coordinator"));
  EXPECT_TRUE(Has(coord, "4")) << "--world: the first world is the placement";

  reply = Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}});
  std::vector<TaskSpec> workers = Workers(reply, 1);
  ASSERT_EQ(workers.size(), 4u);
  for (const TaskSpec& w : workers) {
    EXPECT_TRUE(Has(w, "tcp://127.0.0.1:4000"));
    EXPECT_FALSE(Has(w, "--join")) << "the first world";
    EXPECT_TRUE(w.resume_appends);
    EXPECT_FALSE(w.reads_metrics) << "agents sharing the runs dir would send each record again";
    EXPECT_EQ(w.resume_args, (std::vector<std::string>{"--resume-from", "{checkpoint}"}));
  }
  EXPECT_EQ(m->Jobs()[0].coordinator, "tcp://127.0.0.1:4000");
}

// An elastic worker checkpoints alone, so a job may ask for one worker (the
// restart controller's `frugal train` needs two; ManagerTest).
TEST_F(ElasticManagerTest, JobsMayRunOnOneWorker) {
  auto m = Open();
  Beat(*m);
  EXPECT_EQ(m->Submit(Job("none", 0, 4)).status().code(), Status::Code::kInvalidArgument);
  for (const char* name : {"a", "b", "c", "d"}) ASSERT_TRUE(m->Submit(Job(name, 1, 4)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  for (const JobRecord& j : m->Jobs()) EXPECT_EQ(j.Workers(), 1) << "four new jobs on four slots: one each";
  AgentReply reply = Beat(*m);
  ASSERT_EQ(reply.tasks.size(), 4u);
  for (const TaskSpec& t : reply.tasks) {
    auto world = std::find(t.args.begin(), t.args.end(), "--world");
    ASSERT_NE(world, t.args.end()) << t.task_id << " is a coordinator";
    EXPECT_EQ(*(world + 1), "1");
  }
}

TEST_F(ElasticManagerTest, ShrinkAndGrowKeepTheRunningProcesses) {
  auto m = StartOne();
  Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}}, Step(1));
  const std::set<std::string> before = Ids(Beat(*m));
  ASSERT_EQ(before.size(), 5u);

  ASSERT_TRUE(m->Submit(Job("b", 2, 2)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  JobRecord a = *m->Job(1);
  EXPECT_EQ(a.Workers(), 2);
  EXPECT_EQ(a.incarnation, 1) << "a resize is not a restart";
  AgentReply reply = Beat(*m);
  std::vector<TaskSpec> kept = Workers(reply, 1);
  ASSERT_EQ(kept.size(), 2u);
  for (const TaskSpec& t : kept) EXPECT_TRUE(before.count(t.task_id)) << t.task_id << " is an old worker";
  EXPECT_TRUE(Ids(reply).count("job-1-g1-c")) << "the coordinator keeps running";
  auto events = m->Events(0, 100);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(std::any_of(events->begin(), events->end(), [](const EventRecord& e) {
    return e.kind == "resize" && e.message.find("4 -> 2 workers") == 0 && e.message.find("[in place]") != std::string::npos;
  }));
  // The workers that left exit 0 (or are killed after the grace): no restart.
  Beat(*m, {{"job-1-g1-w2", 0}, {"job-1-g1-w3", 137}});
  EXPECT_EQ(m->Job(1)->restarts, 0);
  EXPECT_EQ(m->Job(1)->state, JobState::kRunning);

  // b finishes: a grows back with two --join workers, under new task ids.
  Beat(*m, {}, {{"job-2-g1-c", "tcp://127.0.0.1:4001"}}, Step(2));
  Beat(*m, {{"job-2-g1-c", 0}});
  ASSERT_EQ(m->Job(2)->state, JobState::kFinished);
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(1)->Workers(), 4);
  std::vector<TaskSpec> grown = Workers(Beat(*m), 1);
  ASSERT_EQ(grown.size(), 4u);
  int joiners = 0;
  for (const TaskSpec& t : grown) {
    if (!Has(t, "--join")) continue;
    ++joiners;
    EXPECT_FALSE(before.count(t.task_id)) << "a task id is never reused: " << t.task_id;
    EXPECT_TRUE(t.resume_args.empty()) << "a joiner gets its state from rank 0";
  }
  EXPECT_EQ(joiners, 2);
  EXPECT_EQ(m->Job(1)->incarnation, 1);
}

// Note [Held jobs] (sched/decision.cc): past its last step a job keeps its
// workers; a job submitted meanwhile waits for them instead of shrinking it.
TEST_F(ElasticManagerTest, AJobPastItsLastStepIsNeitherShrunkNorGrown) {
  auto m = StartOne();
  Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}}, {{1, 40, 0, 4, 128, 2.0, -1, 100.0}});
  ASSERT_TRUE(m->Submit(Job("b", 2, 2)).ok());
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(1)->Workers(), 4) << "step 40 of 40: only its final evaluation is left";
  EXPECT_EQ(m->Job(2)->state, JobState::kQueued);
  EXPECT_EQ(m->Job(2)->Workers(), 0);
  EXPECT_EQ(m->Job(1)->generation, 1);

  Beat(*m, {{"job-1-g1-c", 0}});
  ASSERT_EQ(m->Job(1)->state, JobState::kFinished);
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(2)->Workers(), 2) << "then b gets the slots";

  // A finishing job that the policy would grow keeps its size too.
  ASSERT_TRUE(m->Submit(Job("c", 1, 4)).ok());
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->RunRound().ok());
  const int c_workers = m->Job(3)->Workers();
  ASSERT_GE(c_workers, 1);
  ASSERT_LE(c_workers, 2);
  Beat(*m, {}, {{"job-3-g1-c", "tcp://127.0.0.1:4002"}}, {{3, 40, 0, c_workers, 128, 2.0, -1, 100.0}});
  Beat(*m, {}, {{"job-2-g1-c", "tcp://127.0.0.1:4001"}});
  Beat(*m, {{"job-2-g1-c", 0}});
  ASSERT_EQ(m->Job(2)->state, JobState::kFinished);
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(3)->Workers(), c_workers) << "two slots are free, but c is past its last step";
}

// Note [Elastic command jobs]: a command job's members are `frugal run
// --elastic` scripts on the job's coordinator, in its workdir with its env
// and FRUGAL_RUN_DIR; a shrink keeps the running scripts and a grow adds
// --join scripts.
TEST_F(ElasticManagerTest, CommandJobsRunAsElasticScriptsResizedInPlace) {
  auto m = Open();
  Beat(*m);
  JobSubmission a;
  a.name = "own";
  a.min_workers = 1;
  a.max_workers = 4;
  a.max_steps = 100;
  a.command.argv = {"python3", "train.py", "--steps", "100"};
  a.command.env = {{"PYTHONPATH", "/opt/frugal"}};
  a.command.workdir = "/srv/jobs";
  ASSERT_TRUE(m->Submit(a).ok());
  ASSERT_TRUE(m->RunRound().ok());
  AgentReply reply = Beat(*m);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_TRUE(Has(reply.tasks[0], "coordinator") && Has(reply.tasks[0], "--elastic"));

  auto scripts = [](const AgentReply& r) {
    std::vector<TaskSpec> out;
    for (const TaskSpec& t : r.tasks) {
      if (Has(t, "run")) out.push_back(t);
    }
    return out;
  };
  reply = Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}}, Step(1));
  std::vector<TaskSpec> first = scripts(reply);
  ASSERT_EQ(first.size(), 4u);
  std::set<std::string> before;
  for (const TaskSpec& t : first) {
    before.insert(t.task_id);
    const std::vector<std::string> head(t.args.begin(), t.args.begin() + 6);
    EXPECT_EQ(head, (std::vector<std::string>{"run", "--elastic", "--coordinator", "tcp://127.0.0.1:4000", "--workers",
                                              "1"}));
    auto dashes = std::find(t.args.begin(), t.args.end(), "--");
    ASSERT_NE(dashes, t.args.end());
    EXPECT_EQ(std::vector<std::string>(dashes + 1, t.args.end()), a.command.argv);
    EXPECT_FALSE(Has(t, "--join")) << "the first world";
    EXPECT_TRUE(Has(t, "tcp://{host}:*")) << "it listens on its host's address (and gets the job's keys there)";
    EXPECT_EQ(t.env.at("FRUGAL_RUN_DIR"), "{runs}/job-1");
    EXPECT_EQ(t.env.at("PYTHONPATH"), "/opt/frugal");
    EXPECT_EQ(t.workdir, "/srv/jobs");
    EXPECT_TRUE(t.resume_args.empty()) << "the script resumes itself (frugal.load)";
    EXPECT_FALSE(t.reads_metrics);
  }

  ASSERT_TRUE(m->Submit(Job("b", 2, 2)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(1)->Workers(), 2);
  EXPECT_EQ(m->Job(1)->incarnation, 1) << "a resize is not a restart";
  for (const TaskSpec& t : scripts(Beat(*m))) {
    if (t.job_id == 1) EXPECT_TRUE(before.count(t.task_id)) << t.task_id << " is a running script";
  }
  Beat(*m, {}, {{"job-2-g1-c", "tcp://127.0.0.1:4001"}}, Step(2));
  Beat(*m, {{"job-2-g1-c", 0}});
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(1)->Workers(), 4);
  int joiners = 0;
  for (const TaskSpec& t : scripts(Beat(*m))) {
    if (t.job_id == 1 && Has(t, "--join")) ++joiners;
  }
  EXPECT_EQ(joiners, 2);
}

TEST_F(ElasticManagerTest, AFailedWorkerOrCoordinatorRestartsFromTheCheckpoint) {
  auto m = StartOne();
  Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}});
  Beat(*m, {{"job-1-g1-w1", 1}});
  JobRecord a = *m->Job(1);
  EXPECT_EQ(a.restarts, 1);
  EXPECT_EQ(a.incarnation, 2) << "a fresh coordinator and first world";
  EXPECT_TRUE(a.coordinator.empty());
  AgentReply reply = Beat(*m);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_EQ(reply.tasks[0].task_id, "job-1-g2-c");
  Beat(*m, {{"job-1-g1-c", 1}});  // The old incarnation's coordinator: stopped on purpose.
  EXPECT_EQ(m->Job(1)->restarts, 1);
  Beat(*m, {{"job-1-g2-c", 1}});
  EXPECT_EQ(m->Job(1)->restarts, 2);
  Beat(*m, {{"job-1-g3-c", 0}});
  EXPECT_EQ(m->Job(1)->state, JobState::kFinished);
}

// A task still running that the server no longer plans is named superseded
// (its agent SIGKILLs it) when its incarnation has ended, whichever node runs
// the coordinator; a worker leaving in an in-place shrink is not.
TEST_F(ElasticManagerTest, TasksOfAnEndedRunAreSupersededLeaversAreNot) {
  auto m = StartOne();
  Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}}, Step(1));
  const std::set<std::string> before = Ids(Beat(*m));
  ASSERT_EQ(before.size(), 5u);
  auto beat_running = [&](std::vector<std::string> running, std::vector<TaskExit> exits = {}) {
    AgentReport r;
    r.node = "host-b";  // Another node (no round runs, so it is given nothing).
    r.slots = 1;
    r.running = std::move(running);
    r.exited = std::move(exits);
    auto reply = m->Heartbeat(r);
    EXPECT_TRUE(reply.ok()) << reply.status().message();
    return reply.ok() ? reply->superseded : std::vector<std::string>{"error"};
  };
  ASSERT_TRUE(m->Submit(Job("b", 2, 2)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  ASSERT_EQ(m->Job(1)->Workers(), 2);
  EXPECT_TRUE(beat_running({before.begin(), before.end()}).empty()) << "leavers leave gracefully";

  Beat(*m, {{"job-1-g1-w0", 1}});  // A failure: a fresh incarnation.
  ASSERT_GT(m->Job(1)->incarnation, 1);
  std::vector<std::string> superseded = beat_running({"job-1-g1-c", "job-1-g1-w1"});
  std::sort(superseded.begin(), superseded.end());
  EXPECT_EQ(superseded, (std::vector<std::string>{"job-1-g1-c", "job-1-g1-w1"}));

  ASSERT_TRUE(m->Cancel(2).ok());
  superseded = beat_running({"job-2-g1-c", "job-2-g1-w0"});
  std::sort(superseded.begin(), superseded.end());
  EXPECT_EQ(superseded, (std::vector<std::string>{"job-2-g1-c", "job-2-g1-w0"}));
  EXPECT_TRUE(beat_running({"job-7-g1-w0", "not-a-task"}).empty()) << "unknown ids are left to the grace";
}

TEST_F(ElasticManagerTest, AResizeBeforeTheFirstWorldFormedRestartsIt) {
  for (bool endpoint_known : {false, true}) {
    SCOPED_TRACE(endpoint_known);
    auto m = StartOne();
    // The coordinator task starts; no step yet (and maybe no endpoint).
    Beat(*m, {}, endpoint_known ? std::vector<TaskEndpoint>{{"job-1-g1-c", "tcp://127.0.0.1:4000"}}
                                : std::vector<TaskEndpoint>{});
    ASSERT_TRUE(m->Submit(Job("b", 2, 2)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    JobRecord a = *m->Job(1);
    EXPECT_EQ(a.Workers(), 2);
    EXPECT_EQ(a.incarnation, a.generation) << "a worker leaving may be one the coordinator waits for: a fresh start";
    EXPECT_EQ(a.members.size(), 2u);
  }
}

TEST_F(ElasticManagerTest, ARestartedServerKeepsTheElasticState) {
  auto path = std::filesystem::temp_directory_path() / ("frugal-cluster-elastic-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  std::set<std::string> before;
  {
    auto m = Open(path.string());
    Beat(*m);
    ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    Beat(*m, {}, {{"job-1-g1-c", "tcp://127.0.0.1:4000"}}, Step(1));
    ASSERT_TRUE(m->Submit(Job("b", 2, 2)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    before = Ids(Beat(*m));
  }
  auto m = Open(path.string());
  JobRecord a = *m->Job(1);
  EXPECT_EQ(a.coordinator, "tcp://127.0.0.1:4000");
  EXPECT_EQ(a.incarnation, 1);
  EXPECT_EQ(a.home_node, 1);
  EXPECT_EQ(a.members.size(), 2u);
  EXPECT_EQ(Ids(Beat(*m)), before) << "every running task is adopted";
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace frugal::cluster
