#include "frugal/cluster/job_file.h"
#include "frugal/cluster/speed_prior.h"

#include <gtest/gtest.h>

#include <string>

namespace frugal::cluster {
namespace {

Result<JobSubmission> Parse(const std::string& text) { return ParseJobFile(text, "job.toml", "/home/u/jobs"); }

// The message of a refused file: InvalidArgument, one line, naming the file.
std::string Refusal(const std::string& text) {
  Result<JobSubmission> job = Parse(text);
  EXPECT_FALSE(job.ok()) << text;
  if (job.ok()) return "";
  EXPECT_EQ(job.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(job.status().message().find('\n'), std::string::npos) << job.status().message();
  EXPECT_EQ(job.status().message().rfind("job.toml", 0), 0u) << job.status().message();
  return job.status().message();
}

TEST(JobFileTest, ACommandJobWithEveryKey) {
  auto job = Parse(
      "name = \"lm\"\n"
      "command = [\"python3\", \"train.py\", \"--lr\", \"0.1\"]\n"
      "env = { PYTHONPATH = \"/opt/frugal\", OMP_NUM_THREADS = \"1\" }\n"
      "workdir = \"scripts/../lm\"\n"
      "min_workers = 1\nmax_workers = 4\ngpus_per_worker = 1\nmax_steps = 300\n");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_TRUE(job->IsCommand());
  EXPECT_EQ(job->name, "lm");
  EXPECT_EQ(job->command.argv, (std::vector<std::string>{"python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(job->command.env, (std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}, {"PYTHONPATH", "/opt/frugal"}}));
  EXPECT_EQ(job->command.workdir, "/home/u/jobs/lm") << "relative to the job file's directory";
  EXPECT_EQ(job->min_workers, 1);
  EXPECT_EQ(job->max_workers, 4);
  EXPECT_EQ(job->max_steps, 300);
  EXPECT_TRUE(job->config_toml.empty());
  EXPECT_EQ(job->profile, CommandProfile(job->command));
  EXPECT_TRUE(CheckSubmission(*job).ok());
}

TEST(JobFileTest, DefaultsOfACommandJob) {
  auto job = Parse("command = [\"./run.sh\"]\nmin_workers = 2\nmax_workers = 2\n");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->command.workdir, "/home/u/jobs") << "the job file's directory";
  EXPECT_EQ(job->name, "job.toml");
  EXPECT_EQ(job->command.gpus_per_worker, 1);
  EXPECT_EQ(job->max_steps, 0);
  EXPECT_TRUE(job->command.env.empty());
  auto absolute = Parse("command = [\"./run.sh\"]\nworkdir = \"/srv/x/\"\nmin_workers = 2\nmax_workers = 2\n");
  ASSERT_TRUE(absolute.ok());
  EXPECT_EQ(absolute->command.workdir, "/srv/x");
  auto given = Parse("command = [\"./run.sh\"]\nprofile = \"mine\"\nmin_workers = 2\nmax_workers = 2\n");
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->profile, "mine");
}

// A command job's own prior (frugal.plan's Plan.job_prior): a rate per
// worker count, integers or floats.
TEST(JobFileTest, PlannedRatesOfACommandJob) {
  auto job = Parse("command = [\"./run.sh\"]\nmin_workers = 1\nmax_workers = 3\n"
                   "planned_samples_per_s = [100, 180.5, 240.25]\n");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->command.planned_samples_per_s, (std::vector<double>{100, 180.5, 240.25}));
  std::shared_ptr<const SpeedPrior> prior = PlannedPrior(*job);
  ASSERT_NE(prior, nullptr);
  EXPECT_DOUBLE_EQ(prior->SamplesPerSecond(2), 180.5);
  EXPECT_EQ(prior->SamplesPerSecond(4), 0) << "no rate beyond the table";
  EXPECT_EQ(prior->SamplesPerSecond(0), 0);
  auto none = Parse("command = [\"./run.sh\"]\nmin_workers = 1\nmax_workers = 3\n");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(PlannedPrior(*none), nullptr);

  const std::string head = "command = [\"./run.sh\"]\nmin_workers = 1\nmax_workers = 3\n";
  EXPECT_NE(Refusal(head + "planned_samples_per_s = [100, 180]\n").find("one per worker count from 1 to max_workers"),
            std::string::npos);
  EXPECT_NE(Refusal(head + "planned_samples_per_s = [100, 0, 5]\n").find("planned_samples_per_s[1] must be a finite "
                                                                       "number > 0"),
            std::string::npos);
  EXPECT_NE(Refusal(head + "planned_samples_per_s = [100, nan, 5]\n").find("[1] must be a finite"), std::string::npos);
  EXPECT_NE(Refusal(head + "planned_samples_per_s = [100, \"x\", 5]\n").find("must be an array of numbers"),
            std::string::npos);
  EXPECT_NE(Refusal(head + "planned_samples_per_s = 100\n").find("must be an array of numbers"), std::string::npos);
  EXPECT_NE(Refusal("model = \"mlp\"\nmin_workers = 1\nmax_workers = 1\nplanned_samples_per_s = [1]\n")
                .find("belongs to a command job"),
            std::string::npos);
}

TEST(JobFileTest, ATrainJobKeepsItsConfiguration) {
  auto job = Parse("name = \"m\"\nmodel = \"mlp\"\nmax_steps = 40\nmin_workers = 2\nmax_workers = 4\n");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_FALSE(job->IsCommand());
  EXPECT_EQ(job->max_steps, 40);
  EXPECT_NE(job->config_toml.find("model = \"mlp\""), std::string::npos) << job->config_toml;
  EXPECT_EQ(job->config_toml.find("min_workers"), std::string::npos) << "the cluster's keys are taken out";
  EXPECT_TRUE(job->profile.empty()) << "the CLI derives it from the configuration";
}

TEST(JobFileTest, CommandProfilesDifferByCommandEnvAndWorkdir) {
  CommandSpec a{{"python3", "t.py"}, {}, "/w", 1};
  CommandSpec split{{"python3 t.py"}, {}, "/w", 1};
  CommandSpec env{{"python3", "t.py"}, {{"SEED", "1"}}, "/w", 1};
  CommandSpec dir{{"python3", "t.py"}, {}, "/v", 1};
  EXPECT_EQ(CommandProfile(a), CommandProfile(CommandSpec{{"python3", "t.py"}, {}, "/w", 1}));
  EXPECT_EQ(CommandProfile(a).rfind("command-", 0), 0u);
  EXPECT_EQ(CommandProfile(a).size(), 8u + 16u);
  for (const CommandSpec& other : {split, env, dir}) EXPECT_NE(CommandProfile(a), CommandProfile(other));
}

TEST(JobFileTest, BadCommandJobsGetOneLineReasons) {
  const std::string range = "min_workers = 1\nmax_workers = 2\n";
  EXPECT_NE(Refusal("command = []\n" + range).find("'command' is empty"), std::string::npos);
  EXPECT_NE(Refusal("command = \"python3 train.py\"\n" + range).find("array of strings"), std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\", 3]\n" + range).find("array of strings"), std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nmodel = \"mlp\"\n" + range).find("not both"), std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nlr = 0.1\n" + range).find("'lr' is not a key of a command job"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nenv = \"A=1\"\n" + range).find("'env' must be a table"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nenv = { A = 1 }\n" + range).find("env.A must be a string"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nenv = { RANK = \"1\" }\n" + range).find("set by the cluster"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nenv = { FRUGAL_RUN_DIR = \"/x\" }\n" + range).find("set by the cluster"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nworkdir = 5\n" + range).find("'workdir' must be a string"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\ngpus_per_worker = 65\n" + range).find("from 1 to 64"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\ngpus_per_worker = 0\n" + range).find("from 1 to 64"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\ngpus_per_worker = \"1\"\n" + range).find("non-negative integer"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nmax_steps = -5\n" + range).find("non-negative integer"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"\"]\n" + range).find("program"), std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nmin_workers = 1\n").find("missing 'max_workers'"), std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nmin_workers = 3\nmax_workers = 2\n").find("min_workers <= max_workers"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"]\nmin_workers = \"1\"\nmax_workers = 2\n").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(Refusal("command = [\"python3\"\n" + range).find("job.toml"), std::string::npos) << "not TOML";
}

TEST(JobFileTest, CommandKeysInATrainJobAndClusterKeysAreRefused) {
  const std::string range = "min_workers = 2\nmax_workers = 2\n";
  EXPECT_NE(Refusal("model = \"mlp\"\nenv = { A = \"1\" }\n" + range).find("belongs to a command job"),
            std::string::npos);
  EXPECT_NE(Refusal("model = \"mlp\"\nworkers = 4\n" + range).find("'workers' is set by the cluster"),
            std::string::npos);
}

}  // namespace
}  // namespace frugal::cluster
