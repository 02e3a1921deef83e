#include "frugal/engine/checkpoint_manifest.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint_test_util.h"

#include "testing/test_world.h"
#include "frugal/engine/checkpoint_writer.h"

namespace frugal::engine {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) { return FreshTempDir("frugal_checkpoint_manifest_test", name); }

CheckpointManifest TwoSites() {
  CheckpointManifest m;
  m.world = 3;
  m.files = {{0, "A", "rank-0.ckpt", 1234, 0x0123456789abcdefULL},
             {1, "A", "rank-1.ckpt", 99, 7},
             {2, "B", "rank-2.ckpt", 100, 0xffffffffffffffffULL}};
  return m;
}

TEST(CheckpointManifestTest, SiteDirectoryReplacesEveryPlaceholder) {
  EXPECT_TRUE(IsPerSiteCheckpointDir("/ckpt/{cluster}"));
  EXPECT_FALSE(IsPerSiteCheckpointDir("/ckpt/cluster"));
  EXPECT_EQ(SiteCheckpointDir("/x/{cluster}/y-{cluster}", "siteA"), "/x/siteA/y-siteA");
  EXPECT_EQ(SiteCheckpointDir("/x/shared", "siteA"), "/x/shared");
  EXPECT_TRUE(CheckSiteName("siteA").ok());
  for (const char* bad : {"", ".", "..", "a/b", "a b"}) EXPECT_FALSE(CheckSiteName(bad).ok()) << bad;
}

TEST(CheckpointManifestTest, RoundTripsAndListsFilesPerCluster) {
  const CheckpointManifest m = TwoSites();
  auto back = ParseManifest(EncodeManifest(m), "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->world, 3);
  EXPECT_EQ(back->files, m.files);
  ASSERT_EQ(back->FilesOf("A").size(), 2u);
  EXPECT_EQ(back->FilesOf("B")[0].rank, 2);
  EXPECT_EQ(SeatOf(*back, "A", 1)->rank, 1);
  EXPECT_EQ(SeatOf(*back, "B", 0)->rank, 2);
  EXPECT_EQ(SeatOf(*back, "B", 1), nullptr);  // a second member of B now: no file of its own
  EXPECT_EQ(SeatOf(*back, "C", 0), nullptr);
}

TEST(CheckpointManifestTest, ASharedDirectoryMarkerHasNoFiles) {
  auto m = ParseManifest("4\n", "test");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->world, 4);
  EXPECT_FALSE(m->per_site());
}

TEST(CheckpointManifestTest, RefusesMalformedMarkers) {
  const std::string good = EncodeManifest(TwoSites());
  const std::vector<std::string> bad = {
      "",                                                     // no world
      "0\n",                                                  // world < 1
      "3\nfile 0 A rank-0.ckpt 12 0123456789abcdef\n",         // fewer files than the world
      "1\nfile 1 A rank-1.ckpt 12 0123456789abcdef\n",         // rank out of order
      "1\nfile 0 A rank-1.ckpt 12 0123456789abcdef\n",         // name of another rank
      "1\nfile 0 A rank-0.ckpt 12 0123456789abcdeg\n",         // not hex
      "1\nfile 0 A rank-0.ckpt -12 0123456789abcdef\n",        // negative size
      "1\nfile 0 A rank-0.ckpt 12 0123456789abcdef extra\n",   // trailing word
      "1\nfile 0 .. rank-0.ckpt 12 0123456789abcdef\n",        // cluster that is no directory name
      good + "file 3 B rank-3.ckpt 1 0000000000000000\n",     // more files than the world
  };
  for (const std::string& text : bad) EXPECT_FALSE(ParseManifest(text, "test").ok()) << text;
}

TEST(CheckpointManifestTest, AFileMustBeTheOneListed) {
  const std::string dir = TempDir("listed");
  const std::string path = CheckpointRankFile(dir, 1);
  ASSERT_TRUE(WriteCheckpointFile(path, {{"x", {1, 2, 3}}}).ok());
  auto e = VerifyCheckpointFile(path, 1, "B", nullptr);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size, fs::file_size(path));
  EXPECT_EQ(e->name, "rank-1.ckpt");
  EXPECT_TRUE(ReadManifestFile(path, *e).ok());
  ASSERT_TRUE(WriteCheckpointFile(path, {{"x", {1, 2, 4}}}).ok());  // same size, another checksum
  EXPECT_EQ(ReadManifestFile(path, *e).status().code(), Status::Code::kCorruption);
  auto rejected = VerifyCheckpointFile(path, 1, "B", [](const CheckpointSections&) { return Status::Corruption("no"); });
  EXPECT_FALSE(rejected.ok());
}

// Four ranks in two clusters, each writing into its cluster's directory
// and reporting over the in-process transport.
struct SiteRun {
  std::string pattern;
  std::vector<std::string> clusters = {"A", "A", "B", "B"};
  comm::testing::World world = comm::testing::MakeWorld(comm::testing::Backend::kInProc, clusters);

  explicit SiteRun(const std::string& name) : pattern(TempDir(name) + "/{cluster}") {}

  CheckpointJob Job(int rank, int64_t step) {
    CheckpointJob job;
    job.root = SiteCheckpointDir(pattern, clusters[rank]);
    job.step = step;
    job.rank = rank;
    job.world = 4;
    job.keep = 2;
    job.wait_for_ranks = std::chrono::milliseconds(1500);
    job.sections = {{"id", {static_cast<uint8_t>(step), static_cast<uint8_t>(rank)}}};
    job.check_rank_file = [step](int r, const CheckpointSections& s) {
      return s.at("id") == std::vector<uint8_t>{static_cast<uint8_t>(step), static_cast<uint8_t>(r)}
                 ? Status::Ok()
                 : Status::Corruption("a leftover file");
    };
    job.transport = world.ranks[rank].get();
    return job;
  }

  // Runs one step's writes on every rank in `writing`; rank 0's outcome.
  CheckpointOutcome Step(int64_t step, const std::vector<int>& writing = {0, 1, 2, 3}) {
    std::vector<CheckpointOutcome> outcomes(4);
    comm::testing::RunRanks(4, [&](int r) {
      if (std::find(writing.begin(), writing.end(), r) == writing.end()) return;
      CheckpointWriter writer;
      ASSERT_TRUE(writer.Start(Job(r, step)).ok());
      outcomes[r] = *writer.Take(/*wait=*/true);
    });
    return outcomes[0];
  }
  std::string StepDir(const std::string& cluster, int64_t step) const {
    return CheckpointStepDir(SiteCheckpointDir(pattern, cluster), step);
  }
};

TEST(SiteCheckpointTest, EveryClusterHoldsItsFilesAndTheManifest) {
  SiteRun run("complete");
  CheckpointOutcome o = run.Step(10);
  ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  ASSERT_TRUE(o.complete) << o.abandoned;
  EXPECT_TRUE(fs::exists(CheckpointRankFile(run.StepDir("A", 10), 1)));
  EXPECT_FALSE(fs::exists(CheckpointRankFile(run.StepDir("A", 10), 2)));
  EXPECT_TRUE(fs::exists(CheckpointRankFile(run.StepDir("B", 10), 3)));
  EXPECT_FALSE(fs::exists(CheckpointRankFile(run.StepDir("B", 10), 0)));
  auto a = ReadCheckpointManifest(run.StepDir("A", 10));
  auto b = ReadCheckpointManifest(run.StepDir("B", 10));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->files, b->files);
  ASSERT_EQ(a->files.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const CheckpointFileEntry& e = a->files[r];
    EXPECT_EQ(e.cluster, run.clusters[r]);
    EXPECT_TRUE(ReadManifestFile(CheckpointRankFile(run.StepDir(e.cluster, 10), r), e).ok());
  }
  // The resume's search finds it from either site.
  auto newest = NewestIntactSiteCheckpoint(run.pattern, {"B"}, nullptr);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(*newest, run.StepDir("B", 10));
  // Newest K per site: after three more steps only the two newest remain in each.
  for (int64_t t : {20, 30, 40}) ASSERT_TRUE(run.Step(t).complete);
  for (const char* c : {"A", "B"}) {
    EXPECT_EQ(CompleteCheckpoints(SiteCheckpointDir(run.pattern, c)),
              (std::vector<std::string>{run.StepDir(c, 40), run.StepDir(c, 30)}))
        << c;
  }
}

TEST(SiteCheckpointTest, AMissingReportLeavesTheStepIncompleteEverywhere) {
  SiteRun run("missing");
  ASSERT_TRUE(run.Step(10).complete);
  CheckpointOutcome o = run.Step(20, {0, 1, 2});  // rank 3 (cluster B) never reports
  EXPECT_TRUE(o.status.ok());
  EXPECT_FALSE(o.complete);
  EXPECT_NE(o.abandoned.find("rank 3"), std::string::npos) << o.abandoned;
  EXPECT_FALSE(fs::exists(fs::path(run.StepDir("A", 20)) / "COMPLETE"));
  EXPECT_FALSE(fs::exists(fs::path(run.StepDir("B", 20)) / "COMPLETE"));
  auto newest = NewestIntactSiteCheckpoint(run.pattern, {"A", "B"}, nullptr);
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, run.StepDir("A", 10));  // the previous step stays the newest
}

TEST(SiteCheckpointTest, ADamagedFileIsSkippedByTheResumeSearch) {
  SiteRun run("damaged");
  ASSERT_TRUE(run.Step(10).complete);
  ASSERT_TRUE(run.Step(20).complete);
  {
    std::ofstream out(CheckpointRankFile(run.StepDir("B", 20), 2), std::ios::binary | std::ios::trunc);
    out << "not a checkpoint";
  }
  std::vector<std::string> skipped;
  auto newest = NewestIntactSiteCheckpoint(run.pattern, {"A", "B"}, &skipped);
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(fs::path(*newest).filename(), "step-10");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("rank-2.ckpt"), std::string::npos) << skipped[0];
  EXPECT_FALSE(NewestIntactSiteCheckpoint(TempDir("none") + "/{cluster}", {"A"}, nullptr).ok());
}

}  // namespace
}  // namespace frugal::engine
