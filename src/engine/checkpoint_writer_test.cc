#include "frugal/engine/checkpoint_writer.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "checkpoint_test_util.h"

namespace frugal::engine {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) { return FreshTempDir("frugal_checkpoint_writer_test", name); }

// A job whose sections carry (step, rank, tag); check_rank_file accepts
// only files of the same step and tag.
CheckpointJob Job(const std::string& root, int64_t step, int rank, int world, uint8_t tag) {
  CheckpointJob job;
  job.root = root;
  job.step = step;
  job.rank = rank;
  job.world = world;
  job.keep = 2;
  job.wait_for_ranks = std::chrono::milliseconds(3000);
  job.sections = {{"id", {static_cast<uint8_t>(step), static_cast<uint8_t>(rank), tag}},
                  {"state", std::vector<uint8_t>(100000, tag)}};
  job.check_rank_file = [step, tag](int r, const CheckpointSections& s) {
    auto it = s.find("id");
    if (it == s.end() || it->second != std::vector<uint8_t>{static_cast<uint8_t>(step), static_cast<uint8_t>(r), tag}) {
      return Status::Corruption("a leftover file");
    }
    return Status::Ok();
  };
  return job;
}

TEST(CheckpointWriterTest, TwoRanksWriteInTheBackgroundAndRankZeroMarksTheStepComplete) {
  const std::string root = TempDir("two");
  CheckpointWriter w0, w1;
  ASSERT_TRUE(w0.Start(Job(root, 5, 0, 2, 9)).ok());
  EXPECT_EQ(w0.Start(Job(root, 6, 0, 2, 9)).code(), Status::Code::kInternal);  // one in flight at most
  ASSERT_TRUE(w1.Start(Job(root, 5, 1, 2, 9)).ok());
  auto o1 = w1.Take(true);
  auto o0 = w0.Take(true);
  ASSERT_TRUE(o0 && o1);
  EXPECT_TRUE(o1->status.ok()) << o1->status.ToString();
  ASSERT_TRUE(o0->status.ok()) << o0->status.ToString();
  EXPECT_TRUE(o0->complete) << o0->abandoned;
  EXPECT_FALSE(o1->complete);  // only rank 0 completes a step
  EXPECT_GT(o0->bytes, 100000u);
  EXPECT_FALSE(w0.Take(true).has_value());  // taken once
  const std::string step = CheckpointStepDir(root, 5);
  ASSERT_EQ(CompleteCheckpoints(root), std::vector<std::string>{step});
  EXPECT_EQ(*CheckpointWorld(step), 2);
  for (int r = 0; r < 2; ++r) {
    auto s = ReadCheckpointFile(CheckpointRankFile(step, r));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->at("state"), std::vector<uint8_t>(100000, 9));
    EXPECT_FALSE(fs::exists(CheckpointRankFile(step, r) + ".tmp"));
  }
}

// A step whose other rank never writes (it died), or left a file of an
// earlier attempt, is abandoned: no COMPLETE, and the previous complete step
// stays the newest.
TEST(CheckpointWriterTest, AMissingOrLeftoverRankFileLeavesTheStepIncomplete) {
  const std::string root = TempDir("missing");
  {
    CheckpointWriter w0, w1;
    ASSERT_TRUE(w0.Start(Job(root, 1, 0, 2, 1)).ok());
    ASSERT_TRUE(w1.Start(Job(root, 1, 1, 2, 1)).ok());
    ASSERT_TRUE(w0.Take(true)->complete);
  }
  // A leftover rank-1 file of step 2 from another attempt (tag 7).
  ASSERT_TRUE(WriteCheckpointFile(CheckpointRankFile(CheckpointStepDir(root, 2), 1), Job(root, 2, 1, 2, 7).sections).ok());
  CheckpointWriter w0;
  CheckpointJob job = Job(root, 2, 0, 2, 3);
  job.wait_for_ranks = std::chrono::milliseconds(300);
  ASSERT_TRUE(w0.Start(std::move(job)).ok());
  auto o = w0.Take(true);
  ASSERT_TRUE(o.has_value());
  EXPECT_TRUE(o->status.ok());  // its own file is written
  EXPECT_FALSE(o->complete);
  EXPECT_NE(o->abandoned.find("leftover"), std::string::npos) << o->abandoned;
  EXPECT_FALSE(fs::exists(fs::path(CheckpointStepDir(root, 2)) / "COMPLETE"));
  EXPECT_EQ(CompleteCheckpoints(root), std::vector<std::string>{CheckpointStepDir(root, 1)});
  // Cancelled while waiting: abandoned at once.
  CheckpointJob late = Job(root, 3, 0, 2, 3);
  late.wait_for_ranks = std::chrono::milliseconds(600000);
  ASSERT_TRUE(w0.Start(std::move(late)).ok());
  w0.Cancel();
  o = w0.Take(true);
  EXPECT_FALSE(o->complete);
  EXPECT_NE(o->abandoned.find("cancelled"), std::string::npos) << o->abandoned;
  // A new attempt clears the incomplete steps and everything after the step it resumes from.
  ASSERT_TRUE(ClearCheckpointsAfter(root, 1).ok());
  EXPECT_FALSE(fs::exists(CheckpointStepDir(root, 2)));
  EXPECT_FALSE(fs::exists(CheckpointStepDir(root, 3)));
  EXPECT_TRUE(fs::exists(CheckpointStepDir(root, 1)));
  ASSERT_TRUE(ClearCheckpointsAfter(root, 0).ok());
  EXPECT_TRUE(CompleteCheckpoints(root).empty());
}

}  // namespace
}  // namespace frugal::engine
