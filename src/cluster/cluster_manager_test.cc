#include "frugal/cluster/cluster_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "frugal/cluster/job_file.h"
#include "frugal/sched/decision.h"
#include "live_speed.h"

namespace frugal::cluster {
namespace {

JobSubmission Job(const std::string& name, int min_w, int max_w) {
  return {name, "model = \"mlp\"\nmax_steps = 40\n", min_w, max_w, 40, ""};
}

// A command job (Note [Command jobs]) of `name`'s script.
JobSubmission CommandJob(const std::string& name, int min_w, int max_w) {
  JobSubmission j;
  j.name = name;
  j.min_workers = min_w;
  j.max_workers = max_w;
  j.max_steps = 100;
  j.command.argv = {"python3", name + ".py", "--steps", "100"};
  j.command.env = {{"PYTHONPATH", "/opt/frugal"}};
  j.command.workdir = "/srv/jobs";
  j.profile = CommandProfile(j.command);
  return j;
}

class ManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClusterManager> Open(const std::string& path = ":memory:", const std::string& policy = "afs-p",
                                       bool mixed = false) {
    auto store = StateStore::Open(path);
    EXPECT_TRUE(store.ok()) << store.status().message();
    ManagerOptions o;
    o.policy = policy;
    o.node_timeout_s = 10;
    o.round_interval_s = 5;
    auto m = ClusterManager::Open(std::move(*store),
                                  mixed ? NewMixedJobController(NewRestartJobController(), NewCommandJobController())
                                        : NewRestartJobController(),
                                  clock_, o);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(*m);
  }
  AgentReply Beat(ClusterManager& m, const std::string& node, int slots, std::vector<TaskExit> exits = {}) {
    AgentReport r;
    r.node = node;
    r.slots = slots;
    r.exited = std::move(exits);
    auto reply = m.Heartbeat(r);
    EXPECT_TRUE(reply.ok()) << reply.status().message();
    return reply.ok() ? *reply : AgentReply{};
  }
  static std::string Arg(const TaskSpec& t, const std::string& flag) {
    auto it = std::find(t.args.begin(), t.args.end(), flag);
    return it == t.args.end() || it + 1 == t.args.end() ? "" : *(it + 1);
  }
  ManualClock clock_;
};

TEST_F(ManagerTest, RejectsJobsItCanNeverRunAndOraclePolicies) {
  auto m = Open();
  auto one = m->Submit(Job("one", 1, 4));  // The restart controller runs `frugal train`: no checkpoint on 1 worker.
  EXPECT_EQ(one.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(one.status().message().find("elastic controller takes 1"), std::string::npos) << one.status().message();
  EXPECT_EQ(m->Submit(Job("inverted", 4, 2)).status().code(), Status::Code::kInvalidArgument);
  auto store = StateStore::Open(":memory:");
  ManagerOptions o;
  o.policy = "srtf";  // Needs each job's remaining work.
  EXPECT_FALSE(ClusterManager::Open(std::move(*store), NewRestartJobController(), clock_, o).ok());
  store = StateStore::Open(":memory:");
  o.policy = "no-such-policy";
  EXPECT_FALSE(ClusterManager::Open(std::move(*store), NewRestartJobController(), clock_, o).ok());
}

TEST_F(ManagerTest, AJobStartsOnTheAgentAndAResizeIsANewGeneration) {
  auto m = Open();
  Beat(*m, "host-a", 4);
  auto a = m->Submit(Job("a", 2, 4));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(m->RunRound().ok());
  AgentReply reply = Beat(*m, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_EQ(reply.tasks[0].task_id, "job-1-g1");
  EXPECT_EQ(Arg(reply.tasks[0], "--workers"), "4");  // Alone: afs-p gives it every slot.

  auto b = m->Submit(Job("b", 2, 4));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(m->RunRound().ok());
  reply = Beat(*m, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 2u) << "afs-p shares the node between the two jobs";
  int total = 0;
  for (const TaskSpec& t : reply.tasks) total += std::stoi(Arg(t, "--workers"));
  EXPECT_EQ(total, 4);
  auto job_a = m->Job(*a);
  ASSERT_TRUE(job_a.ok());
  EXPECT_EQ(job_a->generation, 2) << "job a was resized: its old workers stop, new ones resume";
  EXPECT_EQ(job_a->Workers(), 2);
  auto events = m->Events(0, 100);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(std::any_of(events->begin(), events->end(), [](const EventRecord& e) { return e.kind == "resize"; }));
}

// The live round and the simulator share sched::DecideRound: the manager
// applies what DecideRound answers for the views it shows the policy
// (Note [One scheduling code path]), fitted to one-host jobs of at least
// min_workers: same node and at most the same size for the policy's one-node
// placements, raised to the minimum when the policy gave less.
TEST_F(ManagerTest, AppliesDecideRoundsAnswerFittedToOneHostJobs) {
  for (const std::string policy : {"afs-p", "fifo", "tiresias", "afs-goodput"}) {
    SCOPED_TRACE(policy);
    auto m = Open(":memory:", policy);
    Beat(*m, "host-a", 4);
    Beat(*m, "host-b", 4);
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(m->Submit(Job("j" + std::to_string(k), 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());

    std::vector<LiveSpeed> speeds(3);
    std::vector<sched::JobView> views(3);
    for (int k = 0; k < 3; ++k) {
      views[k].id = k + 1;
      views[k].submit_time = clock_.WallSeconds();
      views[k].requested_gpus = views[k].max_gpus = views[k].max_gpus_at_max_batch = 4;
      views[k].speed = &speeds[k];
    }
    auto p = sched::CreatePolicy(policy);
    ASSERT_TRUE(p.ok());
    auto d = sched::DecideRound(**p, {{2, 4}, clock_.WallSeconds()}, views);
    ASSERT_TRUE(d.ok()) << d.status().message();
    std::vector<JobRecord> jobs = m->Jobs();
    std::map<int64_t, int> used;
    for (int k = 0; k < 3; ++k) {
      const sched::Placement& want = d->placements[k];
      const JobRecord& got = jobs[k];
      for (const NodeSlots& s : got.placement) used[s.node_id] += s.slots;
      EXPECT_LE(got.placement.size(), 1u) << "one-host jobs (RestartJobController)";
      if (want.NumGpus() == 0) {
        EXPECT_TRUE(got.placement.empty()) << "job " << k + 1 << ": the policy did not run it";
        continue;
      }
      // The policy runs it: it runs, with at least min_workers (raised if
      // the policy gave fewer), at most what the policy gave otherwise, and
      // on the policy's node when the policy chose one node.
      ASSERT_EQ(got.placement.size(), 1u) << "job " << k + 1;
      EXPECT_GE(got.Workers(), 2);
      if (want.NumGpus() >= 2) {
        EXPECT_LE(got.Workers(), want.NumGpus()) << "job " << k + 1;
      }
      if (want.NumNodes() == 1 && want.NumGpus() >= 2) {
        EXPECT_EQ(got.placement[0].node_id, want.shares()[0].node + 1) << "job " << k + 1;
      }
    }
    for (const auto& [node, slots] : used) EXPECT_LE(slots, 4) << "node " << node;
  }
}

TEST_F(ManagerTest, ASilentNodeIsMarkedDownAndItsJobIsRequeued) {
  auto m = Open();
  Beat(*m, "host-a", 4);
  ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  ASSERT_EQ(m->Jobs()[0].state, JobState::kRunning);
  clock_.AdvanceSeconds(9);
  ASSERT_TRUE(m->Tick().ok());
  EXPECT_TRUE(m->Nodes()[0].up) << "9 s of silence is within the 10 s timeout";
  clock_.AdvanceSeconds(2);
  ASSERT_TRUE(m->Tick().ok());
  EXPECT_FALSE(m->Nodes()[0].up);
  EXPECT_EQ(m->Jobs()[0].state, JobState::kQueued);
  EXPECT_TRUE(m->Jobs()[0].placement.empty());
  // The agent comes back: the job runs again, as a later generation.
  AgentReply reply = Beat(*m, "host-a", 4);
  ASSERT_TRUE(m->RunRound().ok());
  reply = Beat(*m, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_EQ(reply.tasks[0].generation, 3);
}

// A job larger than any host (one host per job) waits, and says why.
TEST_F(ManagerTest, AJobLargerThanTheHostsSaysWhyItWaits) {
  auto m = Open();
  Beat(*m, "host-a", 4);
  Beat(*m, "host-b", 2);
  ASSERT_TRUE(m->Submit(Job("big", 6, 8)).ok());
  ASSERT_TRUE(m->Submit(Job("fits", 2, 4)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(1)->state, JobState::kQueued);
  EXPECT_EQ(m->Job(1)->message,
            "waiting for hosts: needs 6 slots on at most 1 host(s) (--max-nodes-per-job); the up hosts offer 4");
  EXPECT_EQ(m->Job(2)->state, JobState::kRunning);
  EXPECT_EQ(m->Job(2)->message, "policy afs-p");
}

TEST_F(ManagerTest, ExitsFinishRestartOrFailTheJob) {
  auto m = Open();
  Beat(*m, "host-a", 4);
  ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  Beat(*m, "host-a", 4, {{"job-1-g1", 1}});
  EXPECT_EQ(m->Jobs()[0].generation, 2) << "a failed task restarts from the checkpoint";
  EXPECT_EQ(m->Jobs()[0].restarts, 1);
  Beat(*m, "host-a", 4, {{"job-1-g1", 1}});  // A repeated report of an old generation changes nothing.
  EXPECT_EQ(m->Jobs()[0].generation, 2);
  Beat(*m, "host-a", 4, {{"job-1-g2", 0}});
  EXPECT_EQ(m->Jobs()[0].state, JobState::kFinished);
  EXPECT_TRUE(Beat(*m, "host-a", 4).tasks.empty());

  ASSERT_TRUE(m->Submit(Job("b", 2, 4)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  for (int g = 1; g <= 4; ++g) Beat(*m, "host-a", 4, {{"job-2-g" + std::to_string(g), 2}});
  EXPECT_EQ(m->Jobs()[1].state, JobState::kFailed) << m->Jobs()[1].message;
  EXPECT_EQ(m->Cancel(2).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(m->Cancel(99).code(), Status::Code::kNotFound);
}

TEST_F(ManagerTest, ARestartedServerRecoversJobsAndReadoptsTheirTasks) {
  auto path = std::filesystem::temp_directory_path() / ("frugal-cluster-recover-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  std::string task_before;
  {
    auto m = Open(path.string());
    Beat(*m, "host-a", 4);
    ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
    ASSERT_TRUE(m->Submit(Job("b", 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    AgentReport r;
    r.node = "host-a";
    r.slots = 4;
    r.samples = {{1, 10, 0, 2, 128, 2.2, -1, 400.0}};
    ASSERT_TRUE(m->Heartbeat(r).ok());
    task_before = Beat(*m, "host-a", 4).tasks[0].task_id;
  }
  auto m = Open(path.string());
  std::vector<JobRecord> jobs = m->Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].state, JobState::kRunning);
  EXPECT_EQ(jobs[0].last_step, 10);
  EXPECT_DOUBLE_EQ(jobs[0].progress, 1280);
  EXPECT_DOUBLE_EQ(m->Throughputs()[1].samples_per_s[2], 400.0) << "rebuilt from the stored samples";
  AgentReply reply = Beat(*m, "host-a", 4);
  ASSERT_FALSE(reply.tasks.empty());
  EXPECT_EQ(reply.tasks[0].task_id, task_before) << "the same generation: the running task is adopted, not restarted";
  std::filesystem::remove(path);
}

// Note [Job keys]: one CurveZMQ pair per job, the same in every reply and
// after a restart of the server, cleared from the store when the job ends.
TEST_F(ManagerTest, EachJobGetsOneKeyPairThatOutlivesARestartButNotTheJob) {
  auto path = std::filesystem::temp_directory_path() / ("frugal-cluster-keys-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  std::map<int64_t, std::string> public_keys;
  {
    auto m = Open(path.string());
    Beat(*m, "host-a", 4);
    ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
    ASSERT_TRUE(m->Submit(Job("b", 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    AgentReply reply = Beat(*m, "host-a", 4);
    ASSERT_EQ(reply.tasks.size(), 2u);
    for (const TaskSpec& t : reply.tasks) {
      EXPECT_EQ(t.job_public_key.size(), 40u);
      EXPECT_EQ(t.job_secret_key.size(), 40u);
      EXPECT_NE(t.job_public_key, t.job_secret_key);
      EXPECT_FALSE(t.insecure_transport);
      public_keys[t.job_id] = t.job_public_key;
    }
    EXPECT_NE(public_keys[1], public_keys[2]) << "a key per job";
    for (const TaskSpec& t : Beat(*m, "host-a", 4).tasks) EXPECT_EQ(t.job_public_key, public_keys[t.job_id]);
  }
  {
    auto m = Open(path.string());
    for (const TaskSpec& t : Beat(*m, "host-a", 4).tasks) {
      EXPECT_EQ(t.job_public_key, public_keys[t.job_id]) << "a restarted server hands out the same pair";
    }
    Beat(*m, "host-a", 4, {{"job-1-g1", 0}});
    ASSERT_EQ(m->Jobs()[0].state, JobState::kFinished);
  }
  auto store = StateStore::Open(path.string());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->LoadSetting("job_key_1"), "") << "the finished job's secret is not kept";
  EXPECT_NE(*(*store)->LoadSetting("job_key_2"), "");
  store->reset();
  {
    auto m = Open(path.string());
    ASSERT_TRUE(m->Cancel(2).ok());  // Ended before this server handed out its key.
  }
  store = StateStore::Open(path.string());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->LoadSetting("job_key_2"), "");
  store->reset();
  std::filesystem::remove(path);

  auto plain_store = StateStore::Open(":memory:");
  ManagerOptions o;
  o.insecure_jobs = true;
  auto plain = ClusterManager::Open(std::move(*plain_store), NewRestartJobController(), clock_, o);
  ASSERT_TRUE(plain.ok());
  Beat(**plain, "host-a", 4);
  ASSERT_TRUE((*plain)->Submit(Job("a", 2, 4)).ok());
  ASSERT_TRUE((*plain)->RunRound().ok());
  AgentReply reply = Beat(**plain, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_TRUE(reply.tasks[0].insecure_transport);
  EXPECT_TRUE(reply.tasks[0].job_secret_key.empty());
}

TEST(LiveSpeedTest, MeasuredRatesWinAndThePriorScalesFromTheNearest) {
  LiveSpeed s;
  EXPECT_GT(s.RateAt(4), s.RateAt(2));
  s.Observe(2, 100);
  EXPECT_DOUBLE_EQ(s.RateAt(2), 100);
  EXPECT_NEAR(s.RateAt(4), 100 * std::pow(2.0, 0.8), 1e-9);
  s.Observe(2, 200);
  EXPECT_DOUBLE_EQ(s.RateAt(2), 130);  // Moving average, weight 0.3.
  EXPECT_EQ(s.RateAt(0), 0);
}

// Note [Measured resize cost]: a is shrunk 4 -> 2 two seconds after its
// record at step 10 (5 steps/s: estimated at step 20 then); its first record
// at 2 workers comes 10 s after the resize at step 35, and the 15 steps past
// 20 take 6 s at the next record's 2.5 steps/s: a 4 s stall. The next
// round's policy weighs resizes at 4 s, and a restarted server keeps the
// measurement.
TEST_F(ManagerTest, TheResizeCostIsMeasuredAndAdopted) {
  const auto path = std::filesystem::temp_directory_path() / ("frugal-resize-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  auto open = [&] {
    ManagerOptions o;
    o.learn_resize_cost = true;
    auto m = ClusterManager::Open(std::move(*StateStore::Open(path.string())), NewRestartJobController(), clock_, o);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(*m);
  };
  auto sample = [](int step, int workers, double samples_per_s) {
    AgentReport r;
    r.node = "host-a";
    r.slots = 4;
    r.samples = {{1, step, 0, workers, 128, 2.0, -1, samples_per_s}};
    return r;
  };
  {
    auto m = open();
    Beat(*m, "host-a", 4);
    ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    ASSERT_EQ(m->Job(1)->Workers(), 4);
    ASSERT_TRUE(m->Heartbeat(sample(10, 4, 640)).ok());
    clock_.AdvanceSeconds(2);
    ASSERT_TRUE(m->Submit(Job("b", 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    ASSERT_EQ(m->Job(1)->Workers(), 2) << "afs-p shares the node: a is resized";
    EXPECT_EQ(m->resize_cost().measured, 0);
    clock_.AdvanceSeconds(10);
    ASSERT_TRUE(m->Heartbeat(sample(35, 2, 100)).ok());  // Its rate spans the stall.
    EXPECT_EQ(m->resize_cost().measured, 0) << "the rate at the new size comes from the next record";
    clock_.AdvanceSeconds(8);
    ASSERT_TRUE(m->Heartbeat(sample(55, 2, 320)).ok());
    EXPECT_EQ(m->resize_cost().measured, 1);
    EXPECT_NEAR(m->resize_cost().measured_seconds, 4.0, 1e-9);
    EXPECT_DOUBLE_EQ(m->resize_cost().seconds, 30) << "adopted at the next round";
    ASSERT_TRUE(m->Heartbeat(sample(75, 2, 320)).ok());
    EXPECT_EQ(m->resize_cost().measured, 1) << "one measurement per resize";
    EXPECT_EQ(m->Throughputs()[1].samples_per_s, (std::map<int, double>{{2, 320.0}}))
        << "the records spanning the start (640) and the resize (100) are no rates";
    ASSERT_TRUE(m->RunRound().ok());
    EXPECT_NEAR(m->resize_cost().seconds, 4.0, 1e-9);
    auto events = m->Events(0, 100);
    ASSERT_TRUE(events.ok());
    EXPECT_TRUE(std::any_of(events->begin(), events->end(), [](const EventRecord& e) { return e.kind == "resize-cost"; }));
  }
  auto m = open();
  EXPECT_EQ(m->resize_cost().measured, 1);
  EXPECT_NEAR(m->resize_cost().measured_seconds, 4.0, 1e-9);
  std::filesystem::remove(path);
}

class TablePrior final : public SpeedPrior {
 public:
  explicit TablePrior(std::map<int, double> rates) : rates_(std::move(rates)) {}
  double SamplesPerSecond(int n) const override { return rates_.count(n) ? rates_.at(n) : 0; }

 private:
  std::map<int, double> rates_;
};

// Note [Live throughput prior]: own rates, then own rates scaled by the
// profile's (or else the prior's) speed-up, then the profile's rates, then
// the prior, then n^0.8.
TEST(LiveSpeedTest, OwnRatesThenTheProfilesThenThePrior) {
  LiveSpeed s;
  s.SetPrior(std::make_shared<TablePrior>(std::map<int, double>{{1, 50}, {2, 90}, {4, 120}}));
  EXPECT_DOUBLE_EQ(s.RateAt(2), 90) << "nothing measured: the prior";
  EXPECT_NEAR(s.RateAt(3), std::pow(3.0, 0.8), 1e-12) << "no prediction at 3: unit-free";
  RateTable profile;
  profile.Observe(1, 100);
  profile.Observe(2, 100);
  s.SetShared(profile);
  EXPECT_DOUBLE_EQ(s.RateAt(2), 100) << "the profile's measurement beats the prior";
  EXPECT_DOUBLE_EQ(s.RateAt(4), 100 * 120.0 / 90) << "the profile's nearest count, scaled by the prior's speed-up";
  s.Observe(1, 80);
  EXPECT_DOUBLE_EQ(s.RateAt(1), 80) << "the job's own measurement first";
  EXPECT_DOUBLE_EQ(s.RateAt(2), 80) << "own rate at 1 times the profile's speed-up 1 -> 2 (none)";
  EXPECT_DOUBLE_EQ(s.RateAt(4), 80 * 120.0 / 50) << "the profile lacks 4: the prior's speed-up 1 -> 4";
  s.SetPrior(nullptr);
  EXPECT_NEAR(s.RateAt(4), 80 * std::pow(4.0, 0.8), 1e-9) << "no prior: (n / m)^0.8";
}

// What one job of a profile measured is what the next job of that profile
// starts from, also after a server restart: here 4 workers ran no faster
// than 2, so afs-p starts the next job of the profile on 2 of the 4 slots,
// and a job of another profile (nothing measured: n^0.8) on all 4.
TEST_F(ManagerTest, JobsOfOneProfileShareWhatTheyMeasuredAcrossARestart) {
  const auto path = std::filesystem::temp_directory_path() / ("frugal-profile-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  auto with_profile = [](const std::string& name, const std::string& profile) {
    JobSubmission j = Job(name, 2, 4);
    j.profile = profile;
    return j;
  };
  {
    auto m = Open(path.string());
    Beat(*m, "host-a", 4);
    ASSERT_TRUE(m->Submit(with_profile("a", "mlp-flat")).ok());
    ASSERT_TRUE(m->RunRound().ok());
    AgentReport r;
    r.node = "host-a";
    r.slots = 4;
    // The first record at 4 spans the job's start (Note [Records that span a change]): no rate.
    r.samples = {{1, 10, 0, 4, 128, 2.2, -1, 100.0}, {1, 20, 0, 4, 128, 2.2, -1, 390.0},
                 {1, 30, 0, 2, 128, 2.1, -1, 400.0}};
    ASSERT_TRUE(m->Heartbeat(r).ok());
    ASSERT_TRUE(m->Cancel(1).ok());
  }
  auto m = Open(path.string());
  Beat(*m, "host-a", 4);
  auto b = m->Submit(with_profile("b", "mlp-flat"));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(*b)->Workers(), 2) << "the profile measured 2 workers faster than 4";
  EXPECT_EQ(m->Throughputs()[*b].profile_samples_per_s, (std::map<int, double>{{2, 400.0}, {4, 390.0}}));
  EXPECT_TRUE(m->Throughputs()[*b].samples_per_s.empty()) << "b measured nothing itself";
  EXPECT_DOUBLE_EQ(m->Throughputs()[*b].estimate[4], 390.0) << "what the policy assumes: the profile's rate";
  EXPECT_EQ(m->Throughputs()[*b].estimate.size(), 4u) << "1 to max_workers";
  ASSERT_TRUE(m->Cancel(*b).ok());
  auto c = m->Submit(with_profile("c", "cnn-other"));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(*c)->Workers(), 4);
  std::filesystem::remove(path);
}

// The planner's level is off by the cluster's factor: what a job measured at
// a predicted size rescales the predictions for the jobs that measured
// nothing (Note [Prior calibration]), and the scale outlives a restart.
TEST_F(ManagerTest, MeasuredRatesCalibrateThePriorForNewJobs) {
  const auto path = std::filesystem::temp_directory_path() / ("frugal-calibration-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  bool calibrate = false;
  auto open = [&] {
    auto store = StateStore::Open(path.string());
    EXPECT_TRUE(store.ok());
    ManagerOptions o;
    o.speed_prior = [](const JobSubmission&) {
      return std::make_shared<TablePrior>(std::map<int, double>{{1, 50}, {2, 100}, {3, 150}, {4, 200}});
    };
    o.calibrate_prior = calibrate;
    auto m = ClusterManager::Open(std::move(*store), NewRestartJobController(), clock_, o);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(*m);
  };
  {
    auto m = open();
    Beat(*m, "host-a", 4);
    ASSERT_TRUE(m->Submit(Job("a", 2, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    ASSERT_EQ(m->Job(1)->Workers(), 4);
    EXPECT_EQ(m->prior_calibration().measured, 0);
    AgentReport r;
    r.node = "host-a";
    r.slots = 4;
    r.samples = {{1, 10, 0, 4, 128, 2.2, -1, 100.0}, {1, 20, 0, 4, 128, 2.2, -1, 400.0}};
    ASSERT_TRUE(m->Heartbeat(r).ok());
    EXPECT_EQ(m->prior_calibration().measured, 1) << "the first record spans the start: no rate";
    EXPECT_NEAR(m->prior_calibration().scale, 2.0, 1e-12);
    auto b = m->Submit(Job("b", 2, 4));
    ASSERT_TRUE(b.ok());
    EXPECT_DOUBLE_EQ(m->Throughputs()[*b].estimate[3], 150) << "kept, not applied without calibrate_prior";
    ASSERT_TRUE(m->Cancel(*b).ok());
    r.samples = {{1, 30, 0, 4, 128, 2.2, -1, 800.0}};
    ASSERT_TRUE(m->Heartbeat(r).ok());
    EXPECT_NEAR(m->prior_calibration().scale, std::exp(std::log(2.0) + 0.3 * (std::log(4.0) - std::log(2.0))), 1e-12);
    ASSERT_TRUE(m->Cancel(1).ok());
  }
  calibrate = true;
  auto m = open();
  const double scale = std::exp(std::log(2.0) + 0.3 * std::log(2.0));
  EXPECT_NEAR(m->prior_calibration().scale, scale, 1e-12) << "stored";
  Beat(*m, "host-a", 4);
  auto b = m->Submit(Job("b", 2, 4));
  ASSERT_TRUE(b.ok());
  EXPECT_NEAR(m->Throughputs()[*b].estimate[3], 150 * scale, 1e-9) << "b measured nothing: the calibrated prior";
  EXPECT_NEAR(m->Throughputs()[*b].estimate[4] / m->Throughputs()[*b].estimate[2], 2.0, 1e-12)
      << "speed-ups are the prior's";
  std::filesystem::remove(path);
}

// Nodes keep their own slot counts (Note [Unequal nodes]): a 2-slot and a
// 4-slot host offer 6 slots, and three command jobs of 2 workers use all of
// them, never more than a host has.
TEST_F(ManagerTest, UnequalNodesOfferAllTheirSlotsToCommandJobs) {
  for (const std::string policy : {"afs-p", "fifo", "tiresias"}) {
    SCOPED_TRACE(policy);
    auto m = Open(":memory:", policy, /*mixed=*/true);
    const int64_t small = Beat(*m, "small", 2).node_id;
    const int64_t large = Beat(*m, "large", 4).node_id;
    for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(m->Submit(CommandJob(name, 2, 2)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    std::map<int64_t, int> used;
    int total = 0;
    for (const JobRecord& j : m->Jobs()) {
      EXPECT_EQ(j.state, JobState::kRunning) << j.spec.name << ": " << j.message;
      for (const NodeSlots& s : j.placement) used[s.node_id] += s.slots;
      total += j.Workers();
    }
    EXPECT_EQ(total, 6) << "the smallest node's count (2 + 2) would leave one job queued";
    EXPECT_EQ(used[small], 2);
    EXPECT_EQ(used[large], 4);
    int tasks = 0;
    for (const char* node : {"small", "large"}) {
      for (const TaskSpec& t : Beat(*m, node, std::string(node) == "small" ? 2 : 4).tasks) {
        ++tasks;
        const std::string script = m->Job(t.job_id)->spec.name + ".py";
        EXPECT_EQ(t.args, (std::vector<std::string>{"run", "--workers", "2", "--threads", "1", "--timeout-s", "60",
                                                     "--", "python3", script, "--steps", "100"}));
        EXPECT_EQ(t.env.at(kRunDirEnv), "{runs}/" + RunName(t.job_id)) << "where the agent reads its metrics";
        EXPECT_EQ(t.resume_run, RunName(t.job_id));
        EXPECT_EQ(t.env.at("PYTHONPATH"), "/opt/frugal");
        EXPECT_EQ(t.workdir, "/srv/jobs");
        EXPECT_TRUE(t.config_toml.empty());
      }
    }
    EXPECT_EQ(tasks, 3);
  }
}

// A 4-slot job fits only on the 4-slot host; with the smallest count (2) as
// every host's, the policy could not have placed it at 4.
TEST_F(ManagerTest, AJobTakesTheLargerNodesSlots) {
  auto m = Open(":memory:", "afs-p", /*mixed=*/true);
  Beat(*m, "small", 2);
  const int64_t large = Beat(*m, "large", 4).node_id;
  auto a = m->Submit(CommandJob("a", 4, 4));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(m->RunRound().ok());
  ASSERT_EQ(m->Job(*a)->placement, (std::vector<NodeSlots>{{large, 4}})) << m->Job(*a)->message;
}

// A resize of a command job restarts it at the new size: a new task id
// (generation), `frugal run --workers` of the new size, the same run
// directory to resume from; its exit 0 finishes the job, and a train job
// still runs as `frugal train` beside it.
TEST_F(ManagerTest, ACommandJobIsResizedByARestartAndFinishesByItsExit) {
  auto m = Open(":memory:", "afs-p", /*mixed=*/true);
  Beat(*m, "host-a", 4);
  auto a = m->Submit(CommandJob("a", 1, 4));  // 1 worker: the script checkpoints itself.
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(m->RunRound().ok());
  AgentReply reply = Beat(*m, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_EQ(reply.tasks[0].task_id, "job-1-g1");
  EXPECT_EQ(Arg(reply.tasks[0], "--workers"), "4");

  auto b = m->Submit(Job("b", 2, 4));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(m->RunRound().ok());
  reply = Beat(*m, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 2u);
  const TaskSpec& resized = reply.tasks[0].job_id == *a ? reply.tasks[0] : reply.tasks[1];
  const TaskSpec& train = reply.tasks[0].job_id == *a ? reply.tasks[1] : reply.tasks[0];
  EXPECT_EQ(resized.task_id, "job-1-g2") << "a new generation: the agent stops g1 and starts this one";
  EXPECT_EQ(std::stoi(Arg(resized, "--workers")) + std::stoi(Arg(train, "--workers")), 4) << "afs-p shares the node";
  EXPECT_EQ(resized.args[0], "run");
  EXPECT_EQ(resized.resume_run, "job-1");
  EXPECT_EQ(train.args[0], "train");
  auto events = m->Events(0, 100);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(std::any_of(events->begin(), events->end(), [](const EventRecord& e) {
    return e.kind == "resize" && e.job_id == 1 && e.message.find("[restart from checkpoint]") != std::string::npos;
  }));
  EXPECT_EQ(m->Job(*a)->restarts, 0) << "a resize is no failure";

  Beat(*m, "host-a", 4, {{"job-1-g1", 143}});  // The stopped generation: ignored.
  EXPECT_EQ(m->Job(*a)->state, JobState::kRunning);
  Beat(*m, "host-a", 4, {{"job-1-g2", 0}});
  EXPECT_EQ(m->Job(*a)->state, JobState::kFinished);
}

// The server checks what the API sends (the CLI's checks are ParseJobFile's).
TEST_F(ManagerTest, RejectsMalformedCommandJobs) {
  auto m = Open(":memory:", "afs-p", /*mixed=*/true);
  auto refused = [&](JobSubmission j, const std::string& why) {
    auto id = m->Submit(j);
    EXPECT_EQ(id.status().code(), Status::Code::kInvalidArgument) << why;
    EXPECT_NE(id.status().message().find(why), std::string::npos) << id.status().message();
  };
  JobSubmission both = CommandJob("both", 1, 2);
  both.config_toml = "model = \"mlp\"\n";
  refused(both, "not both");
  JobSubmission reserved = CommandJob("env", 1, 2);
  reserved.command.env["FRUGAL_RANK"] = "3";
  refused(reserved, "FRUGAL_RANK is set by the cluster");
  JobSubmission badname = CommandJob("env", 1, 2);
  badname.command.env["A B"] = "1";
  refused(badname, "not a variable name");
  JobSubmission relative = CommandJob("rel", 1, 2);
  relative.command.workdir = "jobs";
  refused(relative, "absolute path");
  JobSubmission gpus = CommandJob("gpus", 1, 2);
  gpus.command.gpus_per_worker = 65;
  refused(gpus, "gpus_per_worker must be from 1 to 64");
  JobSubmission empty_program = CommandJob("prog", 1, 2);
  empty_program.command.argv[0] = "";
  refused(empty_program, "program");
  JobSubmission nul = CommandJob("nul", 1, 2);
  nul.command.argv.push_back(std::string("a\0b", 3));
  refused(nul, "NUL");
  EXPECT_TRUE(m->Submit(CommandJob("fine", 1, 2)).ok()) << "1 worker is enough for a command job";
  EXPECT_FALSE(m->Submit(Job("train", 1, 2)).ok()) << "but not for `frugal train` under the restart controller";
}

// A command job's speed is learned from its metrics and shared only with
// jobs of the same command (its profile), never with a train job; the
// command survives a server restart.
TEST_F(ManagerTest, CommandJobsLearnTheirSpeedAndShareItOnlyWithTheSameCommand) {
  const auto path = std::filesystem::temp_directory_path() / ("frugal-command-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  {
    auto m = Open(path.string(), "afs-p", /*mixed=*/true);
    Beat(*m, "host-a", 4);
    ASSERT_TRUE(m->Submit(CommandJob("a", 1, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    AgentReport r;
    r.node = "host-a";
    r.slots = 4;
    r.samples = {{1, 10, 0, 4, 64, 1.0, -1, 100.0}, {1, 20, 0, 4, 64, 0.9, -1, 250.0}};
    ASSERT_TRUE(m->Heartbeat(r).ok());
    EXPECT_EQ(m->Throughputs()[1].samples_per_s, (std::map<int, double>{{4, 250.0}}));
    EXPECT_EQ(m->Job(1)->last_step, 20);
    EXPECT_DOUBLE_EQ(m->Job(1)->progress, 20 * 64) << "samples trained, from the records";
  }
  auto m = Open(path.string(), "afs-p", /*mixed=*/true);
  Beat(*m, "host-a", 4);
  const JobRecord a = *m->Job(1);
  EXPECT_EQ(a.spec.command.argv, CommandJob("a", 1, 4).command.argv) << "persisted";
  EXPECT_EQ(a.spec.command.env, CommandJob("a", 1, 4).command.env);
  EXPECT_EQ(a.spec.command.workdir, "/srv/jobs");
  auto same = m->Submit(CommandJob("a", 1, 4));
  auto other = m->Submit(CommandJob("other", 1, 4));
  auto train = m->Submit(Job("train", 2, 4));
  ASSERT_TRUE(same.ok() && other.ok() && train.ok());
  auto rates = m->Throughputs();
  EXPECT_EQ(rates[*same].profile_samples_per_s, (std::map<int, double>{{4, 250.0}}));
  EXPECT_TRUE(rates[*other].profile_samples_per_s.empty()) << "another script";
  EXPECT_TRUE(rates[*train].profile_samples_per_s.empty()) << "a zoo job";
  EXPECT_NE(CommandJob("a", 1, 4).profile, CommandJob("other", 1, 4).profile);
  std::filesystem::remove(path);
}

// Note [Workers of several GPUs]: a command job whose workers take 2 slots
// each holds whole workers on its host, the task says so (the agent gives
// it workers x 2 devices, `frugal run` 2 to each worker), and the policy's
// shares stay even as another job takes slots; a job whose workers do not
// fit the hosts' slot unit says why it waits.
TEST_F(ManagerTest, ACommandJobOfTwoSlotWorkersHoldsWholeWorkers) {
  auto m = Open(":memory:", "afs-p", /*mixed=*/true);
  Beat(*m, "host-a", 4);
  JobSubmission pairs = CommandJob("pairs", 1, 3);
  pairs.command.gpus_per_worker = 2;
  auto a = m->Submit(pairs);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(*a)->Slots(), 4) << "2 workers of 2 on the 4-slot host (3 do not fit)";
  EXPECT_EQ(m->Job(*a)->Workers(), 2);
  AgentReply reply = Beat(*m, "host-a", 4);
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_EQ(reply.tasks[0].workers, 2);
  EXPECT_EQ(reply.tasks[0].gpus_per_worker, 2);
  EXPECT_EQ(Arg(reply.tasks[0], "--workers"), "2");
  EXPECT_EQ(Arg(reply.tasks[0], "--gpus-per-worker"), "2");

  ASSERT_TRUE(m->Submit(CommandJob("single", 1, 1)).ok());
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(*a)->Slots(), 2) << "one worker of 2 gives way";
  EXPECT_EQ(m->Job(2)->Slots(), 1);
  EXPECT_EQ(m->Throughputs()[*a].estimate.size(), 3u) << "rates by worker count";

  Beat(*m, "host-b", 2);
  JobSubmission quads = CommandJob("quads", 1, 1);
  quads.command.gpus_per_worker = 4;
  auto q = m->Submit(quads);
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(m->RunRound().ok());
  EXPECT_EQ(m->Job(*q)->state, JobState::kQueued);
  EXPECT_NE(m->Job(*q)->message.find("needs 4 slots (workers of 4 slots, each within the hosts' common slot unit "
                                     "of 2)"),
            std::string::npos)
      << m->Job(*q)->message;
}

// A command job's planned rates (frugal.plan's Plan.job_prior) are its prior:
// a script the plan says gains nothing from a second worker is not grown
// onto idle slots, where the unit-free prior (n^0.8) grows it; they outlive
// a restart of the server.
TEST_F(ManagerTest, ACommandJobsPlannedRatesAreItsPrior) {
  const auto path = std::filesystem::temp_directory_path() / ("frugal-planned-" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  JobSubmission flat = CommandJob("flat", 1, 4);
  flat.command.planned_samples_per_s = {100, 100, 100, 100};
  {
    auto m = Open(path.string(), "afs-p", /*mixed=*/true);
    Beat(*m, "host-a", 8);
    ASSERT_TRUE(m->Submit(flat).ok());
    ASSERT_TRUE(m->Submit(CommandJob("unplanned", 1, 4)).ok());
    ASSERT_TRUE(m->RunRound().ok());
    EXPECT_EQ(m->Job(1)->Workers(), 1) << "the plan: no gain past one worker";
    EXPECT_EQ(m->Job(2)->Workers(), 4) << "no plan: n^0.8 grows it";
    EXPECT_EQ(m->Throughputs()[1].estimate, (std::map<int, double>{{1, 100}, {2, 100}, {3, 100}, {4, 100}}));
  }
  auto m = Open(path.string(), "afs-p", /*mixed=*/true);
  EXPECT_EQ(m->Job(1)->spec.command.planned_samples_per_s, flat.command.planned_samples_per_s) << "persisted";
  EXPECT_DOUBLE_EQ(m->Throughputs()[1].estimate[3], 100);
  JobSubmission short_table = CommandJob("short", 1, 4);
  short_table.command.planned_samples_per_s = {100, 190};
  auto refused = m->Submit(short_table);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("one per worker count"), std::string::npos) << refused.status().message();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace frugal::cluster
