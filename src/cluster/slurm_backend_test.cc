// The Slurm backend's pieces that need no Slurm: parsing what its commands
// print, the command runner, and an agent driving a runner it did not start
// (the adoption a restarted server does). The backend against a real Slurm
// is slurm_backend_test.py (ctest cluster_slurm).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "frugal/cluster/agent.h"
#include "frugal/comm/transport/security.h"
#include "json_codec.h"
#include "process.h"
#include "slurm_parse.h"
#include "task_runner.h"

namespace frugal::cluster {
namespace {

TEST(SlurmParseTest, SinfoNodesWithGpusStatesAndDuplicates) {
  const std::string out =
      "gpu01|10.0.0.1|64|gpu:a100:4(S:0-1)|mixed\n"
      "gpu02|10.0.0.2|64|gpu:2,shard:8|down*\n"
      "cpu01|cpu01|32|(null)|idle\n"
      "gpu01|10.0.0.1|64|gpu:a100:4(S:0-1)|mixed\n"  // Listed again for a second partition.
      "garbage line\n";
  std::vector<slurm::Node> nodes = slurm::ParseSinfo(out);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].name, "gpu01");
  EXPECT_EQ(nodes[0].addr, "10.0.0.1");
  EXPECT_EQ(nodes[0].cpus, 64);
  EXPECT_EQ(nodes[0].gpus, 4);
  EXPECT_EQ(nodes[1].gpus, 2);
  EXPECT_EQ(nodes[2].gpus, 0);
  EXPECT_TRUE(slurm::NodeUsable(nodes[0].state));
  EXPECT_FALSE(slurm::NodeUsable(nodes[1].state));
  EXPECT_TRUE(slurm::NodeUsable("idle"));
  EXPECT_TRUE(slurm::NodeUsable("allocated"));
  EXPECT_FALSE(slurm::NodeUsable("drained"));
  EXPECT_FALSE(slurm::NodeUsable("draining"));
  EXPECT_FALSE(slurm::NodeUsable("idle*"));
}

TEST(SlurmParseTest, SqueueRecordsAndExitCodes) {
  const std::string out =
      "41|frugal-job-3-g2-w0       |RUNNING   |0     |vm     |\n"
      "42|frugal-job-3-g2-w1|FAILED|768|vm|\n"
      "43|frugal-job-4-g1|CANCELLED|0||\n"
      "44_1|array|RUNNING|0|vm|\n";
  std::vector<slurm::Job> jobs = slurm::ParseSqueue(out);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, 41);
  EXPECT_EQ(jobs[0].name, "frugal-job-3-g2-w0");
  EXPECT_EQ(jobs[0].node, "vm");
  EXPECT_FALSE(slurm::JobEnded(jobs[0].state));
  EXPECT_TRUE(slurm::JobEnded(jobs[1].state));
  EXPECT_EQ(slurm::ExitCode(jobs[1].state, jobs[1].raw_exit), 3);
  EXPECT_EQ(slurm::ExitCode("CANCELLED", 0), 143);  // Cancelled while pending: not a success.
  EXPECT_EQ(slurm::ExitCode("CANCELLED", 1792), 7);  // Left on SIGTERM with its own code.
  EXPECT_EQ(slurm::ExitCode("FAILED", 9), 137);
  EXPECT_EQ(slurm::ExitCode("NODE_FAIL", 0), 137);
  EXPECT_EQ(slurm::ExitCode("COMPLETED", 0), 0);
  EXPECT_FALSE(slurm::JobEnded("COMPLETING"));
  EXPECT_FALSE(slurm::JobEnded("PENDING"));
}

TEST(SlurmParseTest, ShellQuotingAndSbatchIds) {
  EXPECT_EQ(slurm::ShellQuote({"/a b/frugal", "it's", ""}), "'/a b/frugal' 'it'\\''s' ''");
  EXPECT_EQ(slurm::ParseSbatchId("123\n"), 123);
  EXPECT_EQ(slurm::ParseSbatchId("77;cluster2\n"), 77);
  EXPECT_EQ(slurm::ParseSbatchId("sbatch: error: x\n"), 0);
}

TEST(RunCommandTest, OutputExitCodeTimeoutAndMissingProgram) {
  Result<CommandResult> r = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  Result<CommandResult> slow = RunCommand({"sleep", "30"}, 0.3);
  EXPECT_EQ(slow.status().code(), Status::Code::kTimeout);
  Result<CommandResult> missing = RunCommand({"frugal-no-such-program"}, 10);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("frugal-no-such-program"), std::string::npos);
}

// What the agent runs arrives over HTTP: the task flags survive the trip.
TEST(TaskSpecJsonTest, FlagsRoundTrip) {
  AgentReply reply;
  reply.node_id = 3;
  TaskSpec t;
  t.task_id = "job-2-g1-w0";
  t.job_id = 2;
  t.generation = 1;
  t.workers = 1;
  t.gpus_per_worker = 3;
  t.args = {"worker"};
  t.reads_metrics = false;
  t.resume_appends = true;
  reply.tasks = {t};
  Result<AgentReply> back = ReplyFromJson(ToJson(reply));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->tasks.size(), 1u);
  EXPECT_FALSE(back->tasks[0].reads_metrics);
  EXPECT_TRUE(back->tasks[0].resume_appends);
  EXPECT_FALSE(back->tasks[0].reports_endpoint);
  EXPECT_EQ(back->tasks[0].gpus_per_worker, 3);
  nlohmann::json old = ToJson(reply);
  old["tasks"][0].erase("reads_metrics");  // A server from before the flag.
  back = ReplyFromJson(old);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->tasks[0].reads_metrics);
  old["tasks"][0].erase("gpus_per_worker");  // A server from before workers of several slots.
  back = ReplyFromJson(old);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tasks[0].gpus_per_worker, 1);
}

// A runner that runs nothing: tasks are "running" until told to stop.
class FakeRunner final : public TaskRunner {
 public:
  std::map<std::string, int64_t> adopt;
  std::map<int64_t, bool> stopped;  // handle -> killed
  std::vector<std::vector<std::string>> started;
  std::vector<std::map<std::string, std::string>> envs;  // Each started task's TaskSpec::env.
  Result<int64_t> Start(const TaskSpec& spec, const std::vector<std::string>& argv, const std::string&,
                        const std::string&) override {
    started.push_back(argv);
    envs.push_back(spec.env);
    return next_++;
  }
  std::optional<int> PollExit(int64_t handle) override {
    return stopped.count(handle) ? std::optional<int>(143) : std::nullopt;
  }
  void Stop(int64_t handle, bool kill) override { stopped[handle] = kill; }
  std::string Host(const TaskSpec& spec) const override { return spec.workers == 0 ? "127.0.0.1" : "node7"; }
  std::map<std::string, int64_t> Running() override { return adopt; }

 private:
  int64_t next_ = 100;
};

class FakeClient final : public ClusterClient {
 public:
  std::vector<AgentReport> reports;
  AgentReply reply;
  Result<std::string> Get(const std::string&) override { return Status::Unavailable("fake"); }
  Result<std::string> Post(const std::string&, const std::string&) override { return Status::Unavailable("fake"); }
  Result<AgentReply> Heartbeat(const AgentReport& report) override {
    reports.push_back(report);
    return reply;
  }
  Result<int64_t> Submit(const JobSubmission&) override { return Status::Unavailable("fake"); }
};

// An agent of node "node7" (4 slots, work dir DIR) on a FakeRunner that
// finds ADOPT running and a FakeClient; *fake and *server point at them.
Result<std::unique_ptr<Agent>> FakeAgent(const std::filesystem::path& dir, std::map<std::string, int64_t> adopt,
                                         FakeRunner** fake, FakeClient** server,
                                         std::vector<std::string> gpus = {}) {
  auto runner = std::make_unique<FakeRunner>();
  *fake = runner.get();
  runner->adopt = std::move(adopt);
  auto client = std::make_unique<FakeClient>();
  *server = client.get();
  AgentOptions options;
  options.node = "node7";
  options.slots = 4;
  options.frugal_binary = "/bin/true";
  options.work_dir = dir.string();
  if (!gpus.empty()) options.slots = 0;  // As many as the GPUs.
  options.gpus = std::move(gpus);
  return CreateAgentWithRunner(std::move(client), options, std::move(runner));
}

TEST(AgentRunnerTest, TasksFoundRunningAreAdoptedNotStartedAgain) {
  auto dir = std::filesystem::temp_directory_path() / ("frugal-agent-runner-" + std::to_string(getpid()));
  FakeRunner* fake = nullptr;
  FakeClient* server = nullptr;
  Result<std::unique_ptr<Agent>> agent = FakeAgent(dir, {{"job-3-g2-w0", 41}, {"job-5-g1", 52}}, &fake, &server);
  ASSERT_TRUE(agent.ok()) << agent.status().message();

  // The server wants job 3's worker (adopted), its coordinator (not found
  // running: lost) and a new worker of job 3 with {host}; job 5 is no longer
  // wanted.
  TaskSpec kept;
  kept.task_id = "job-3-g2-w0";
  kept.job_id = 3;
  kept.generation = 1;  // The incarnation, which the id does not say.
  kept.workers = 1;
  TaskSpec joiner = kept;
  joiner.task_id = "job-3-g4-w1";
  joiner.args = {"worker", "--listen", "tcp://{host}:*"};
  joiner.insecure_transport = true;  // `serve --insecure-jobs`.
  TaskSpec coordinator = kept;
  coordinator.task_id = "job-3-g1-c";
  coordinator.workers = 0;
  coordinator.reports_endpoint = true;
  server->reply.tasks = {coordinator, kept, joiner};
  ASSERT_TRUE((*agent)->RunOnce().ok());
  ASSERT_EQ(server->reports.size(), 1u);
  EXPECT_EQ(server->reports[0].running, (std::vector<std::string>{"job-3-g2-w0", "job-5-g1"}));
  ASSERT_EQ(fake->started.size(), 1u);  // Only the joiner; the adopted worker is not started twice.
  EXPECT_EQ(fake->started[0].end()[-2], "tcp://node7:*");
  EXPECT_EQ(fake->started[0].back(), "--insecure");
  ASSERT_EQ(fake->stopped.count(52), 1u);
  EXPECT_FALSE(fake->stopped[52]);  // SIGTERM first.
  EXPECT_EQ(fake->stopped.count(41), 0u);

  ASSERT_TRUE((*agent)->RunOnce().ok());  // The coordinator lost, job 5's task exited: reported once.
  ASSERT_EQ(server->reports[1].exited.size(), 2u);
  EXPECT_EQ(server->reports[1].exited[0].task_id, "job-3-g1-c");
  EXPECT_EQ(server->reports[1].exited[0].exit_code, 137);
  EXPECT_EQ(server->reports[1].exited[1].task_id, "job-5-g1");
  EXPECT_EQ(server->reports[1].running, (std::vector<std::string>{"job-3-g2-w0", "job-3-g4-w1"}));
  std::filesystem::remove_all(dir);
}

// Note [Job keys]: a task listening on a non-loopback host runs with the
// job's pair written next to its config (mode 0600); one on loopback, or one
// that does not listen, runs with no security flag; one whose server sent no
// key (nor insecure_transport) is not started.
TEST(AgentRunnerTest, TasksListeningOffLoopbackRunWithTheJobsKey) {
  auto dir = std::filesystem::temp_directory_path() / ("frugal-agent-keys-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  FakeRunner* fake = nullptr;
  FakeClient* server = nullptr;
  Result<std::unique_ptr<Agent>> agent = FakeAgent(dir, {}, &fake, &server);
  ASSERT_TRUE(agent.ok()) << agent.status().message();
  Result<comm::CurveKeyPair> keys = comm::GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok()) << keys.status().message();

  TaskSpec worker;
  worker.task_id = "job-4-g1-w0";
  worker.job_id = 4;
  worker.workers = 1;
  worker.args = {"worker", "--listen", "tcp://{host}:*"};
  worker.job_public_key = keys->public_key;
  worker.job_secret_key = keys->secret_key;
  TaskSpec local = worker;  // Host 127.0.0.1 (FakeRunner: no slots).
  local.task_id = "job-4-g1-c";
  local.workers = 0;
  TaskSpec quiet = worker;  // Listens nowhere: `frugal train` of the restart controller.
  quiet.task_id = "job-4-g1";
  quiet.args = {"train"};
  TaskSpec keyless = worker;
  keyless.task_id = "job-6-g1-w0";
  keyless.job_id = 6;
  keyless.job_public_key.clear();
  keyless.job_secret_key.clear();
  server->reply.tasks = {local, worker, quiet, keyless};
  ASSERT_TRUE((*agent)->RunOnce().ok());
  ASSERT_EQ(fake->started.size(), 3u);
  EXPECT_EQ(fake->started[0].back(), "tcp://127.0.0.1:*");
  const std::string key = (dir / "job-4-g1-w0.key").string();
  EXPECT_EQ(std::vector<std::string>(fake->started[1].end() - 5, fake->started[1].end()),
            (std::vector<std::string>{"tcp://node7:*", "--key", key, "--authorized-keys", key + ".pub"}));
  EXPECT_EQ(fake->started[2].back(), "train");
  Result<comm::CurveKeyPair> written = comm::ReadKeyPairFile(key);  // Refuses a file others can read.
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_EQ(written->secret_key, keys->secret_key);
  Result<std::vector<std::string>> allowed = comm::ReadAuthorizedKeysFile(key + ".pub");
  ASSERT_TRUE(allowed.ok()) << allowed.status().message();
  EXPECT_EQ(*allowed, std::vector<std::string>{keys->public_key});

  ASSERT_TRUE((*agent)->RunOnce().ok());
  ASSERT_EQ(server->reports[1].exited.size(), 1u);
  EXPECT_EQ(server->reports[1].exited[0].task_id, "job-6-g1-w0");
  EXPECT_EQ(server->reports[1].exited[0].exit_code, 127);

  // Nothing wanted any more; the server names the worker's run as ended.
  server->reply.tasks.clear();
  server->reply.superseded = {"job-4-g1-w0"};
  ASSERT_TRUE((*agent)->RunOnce().ok());
  EXPECT_EQ(fake->stopped, (std::map<int64_t, bool>{{100, false}, {101, true}, {102, false}}))
      << "SIGKILL for the superseded task only";
  std::filesystem::remove_all(dir);
}

// Note [Device slots]: each task gets workers x gpus_per_worker GPUs of its
// own, the lowest free, as CUDA_VISIBLE_DEVICES; a task that does not get
// enough waits, and starts once a stopping task has exited and freed its
// GPUs. Tasks without workers (coordinators) get none.
TEST(AgentRunnerTest, EachTaskGetsItsOwnGpusAndWaitsWhileOthersHoldThem) {
  auto dir = std::filesystem::temp_directory_path() / ("frugal-agent-gpus-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  FakeRunner* fake = nullptr;
  FakeClient* server = nullptr;
  Result<std::unique_ptr<Agent>> agent = FakeAgent(dir, {}, &fake, &server, {"0", "1", "2", "3"});
  ASSERT_TRUE(agent.ok()) << agent.status().message();
  TaskSpec a;  // A restart-controller task: 2 workers of 1 GPU.
  a.task_id = "job-1-g1";
  a.job_id = 1;
  a.workers = 2;
  a.env = {{"CUDA_VISIBLE_DEVICES", "7"}};  // The job's own value yields to the agent's.
  TaskSpec b = a;  // An elastic member: 1 worker of 2 GPUs.
  b.task_id = "job-2-g1-w0";
  b.job_id = 2;
  b.workers = 1;
  b.gpus_per_worker = 2;
  b.env.clear();
  TaskSpec coordinator = b;
  coordinator.task_id = "job-2-g1-c";
  coordinator.workers = 0;
  server->reply.tasks = {a, b, coordinator};
  ASSERT_TRUE((*agent)->RunOnce().ok());
  EXPECT_EQ(server->reports[0].slots, 4) << "the GPUs are the slots";
  ASSERT_EQ(fake->envs.size(), 3u);
  EXPECT_EQ(fake->envs[0].at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(fake->envs[1].at("CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(fake->envs[2].count("CUDA_VISIBLE_DEVICES"), 0u) << "a coordinator holds no GPU";

  // Job 1 shrinks: its task stops, and the new one waits for its GPUs.
  TaskSpec a2 = a;
  a2.task_id = "job-1-g2";
  a2.generation = 2;
  a2.workers = 1;
  server->reply.tasks = {b, coordinator, a2};
  ASSERT_TRUE((*agent)->RunOnce().ok());
  EXPECT_EQ(fake->started.size(), 3u) << "job-1-g1 still holds 0 and 1 while it stops";
  ASSERT_TRUE((*agent)->RunOnce().ok());  // It has exited.
  ASSERT_EQ(fake->envs.size(), 4u);
  EXPECT_EQ(fake->envs[3].at("CUDA_VISIBLE_DEVICES"), "0");

  TaskSpec big = b;  // More GPUs than are free: waits.
  big.task_id = "job-3-g1-w0";
  big.job_id = 3;
  big.gpus_per_worker = 2;
  server->reply.tasks = {b, coordinator, a2, big};
  ASSERT_TRUE((*agent)->RunOnce().ok());
  EXPECT_EQ(fake->started.size(), 4u) << "one GPU free, two wanted";
  std::filesystem::remove_all(dir);
}

TEST(AgentRunnerTest, GpuListsAndTheirErrors) {
  auto ids = ParseGpus("0,1,3");
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, (std::vector<std::string>{"0", "1", "3"}));
  ids = ParseGpus("GPU-8a1b-22,MIG-3:1");
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids->size(), 2u);
  for (const char* bad : {"", "0,,1", "0,0", "0 1", "0;1", ","}) {
    Result<std::vector<std::string>> r = ParseGpus(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_NE(r.status().message().find("--gpus"), std::string::npos) << r.status().message();
  }
  auto dev = std::filesystem::temp_directory_path() / ("frugal-agent-dev-" + std::to_string(getpid()));
  std::filesystem::remove_all(dev);
  std::filesystem::create_directories(dev);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = visible != nullptr ? visible : "";
  unsetenv("CUDA_VISIBLE_DEVICES");
  Result<std::vector<std::string>> none = ParseGpus("auto", dev.string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("found no GPU"), std::string::npos) << none.status().message();
  for (const char* name : {"nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-caps"}) {
    std::ofstream(dev / name) << "";
  }
  Result<std::vector<std::string>> found = ParseGpus("auto", dev.string());
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(*found, (std::vector<std::string>{"0", "1"}));
  setenv("CUDA_VISIBLE_DEVICES", "2,5", 1);
  found = ParseGpus("auto", dev.string());
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, (std::vector<std::string>{"2", "5"})) << "the agent's own CUDA_VISIBLE_DEVICES first";
  if (visible != nullptr) {
    setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  } else {
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  std::filesystem::remove_all(dev);

  AgentOptions options;  // --slots that disagree with --gpus.
  options.node = "n";
  options.slots = 3;
  options.gpus = {"0", "1"};
  options.frugal_binary = "/bin/true";
  options.work_dir = dev.string();
  Result<std::unique_ptr<Agent>> agent =
      CreateAgentWithRunner(std::make_unique<FakeClient>(), options, std::make_unique<FakeRunner>());
  ASSERT_FALSE(agent.ok());
  EXPECT_NE(agent.status().message().find("drop --slots"), std::string::npos) << agent.status().message();
  std::filesystem::remove_all(dev);
}

}  // namespace
}  // namespace frugal::cluster
