#include "frugal/engine/checkpoint.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint_test_util.h"

namespace frugal::engine {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) { return FreshTempDir("frugal_checkpoint_test", name); }

TEST(CheckpointTest, SectionsRoundTrip) {
  std::string path = TempDir("rt") + "/a.ckpt";
  CheckpointSections in{{"alpha", {1, 2, 3}}, {"empty", {}}, {"beta", std::vector<uint8_t>(1000, 7)}};
  ASSERT_TRUE(WriteCheckpointFile(path, in).ok());
  auto out = ReadCheckpointFile(path);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, in);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // The streamed file is byte for byte EncodeCheckpoint's (what joiners receive).
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, EncodeCheckpoint(in));
  // Skipped sections: the encoding of the map without them.
  CheckpointSections without = in;
  without.erase("beta");
  EXPECT_EQ(EncodeCheckpoint(in, {"beta", "absent"}), EncodeCheckpoint(without));
  auto parsed = ParseCheckpoint(EncodeCheckpoint(in, {"beta"}), "joiner state");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, without);
}

TEST(CheckpointTest, TruncatedOrFlippedFilesAreCorruptionNamingTheFile) {
  std::string path = TempDir("bad") + "/a.ckpt";
  ASSERT_TRUE(WriteCheckpointFile(path, {{"x", std::vector<uint8_t>(100, 1)}}).ok());
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put(static_cast<char>(0x55));
  }
  auto flipped = ReadCheckpointFile(path);
  EXPECT_EQ(flipped.status().code(), Status::Code::kCorruption);
  EXPECT_NE(flipped.status().message().find(path), std::string::npos);
  ASSERT_TRUE(WriteCheckpointFile(path, {{"x", std::vector<uint8_t>(100, 1)}}).ok());
  for (uintmax_t cut : {uintmax_t{0}, uintmax_t{5}, size / 2, size - 1}) {
    ASSERT_TRUE(WriteCheckpointFile(path, {{"x", std::vector<uint8_t>(100, 1)}}).ok());
    fs::resize_file(path, cut);
    EXPECT_EQ(ReadCheckpointFile(path).status().code(), Status::Code::kCorruption) << cut;
  }
  EXPECT_EQ(ReadCheckpointFile(path + ".missing").status().code(), Status::Code::kNotFound);
}

// Note [Checkpoint checksum]: files of version 1 (FNV-1a trailer) still read.
TEST(CheckpointTest, VersionOneFilesWithAnFnvChecksumStillRead) {
  std::vector<uint8_t> v1 = EncodeCheckpoint({{"x", {9, 8, 7}}});
  ASSERT_EQ(v1[7], '2');
  v1[7] = '1';
  v1.resize(v1.size() - 8);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t b : v1) h = (h ^ b) * 0x100000001b3ULL;
  for (int i = 0; i < 8; ++i) v1.push_back(static_cast<uint8_t>(h >> (8 * i)));
  auto out = ParseCheckpoint(v1, "v1.ckpt");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at("x"), (std::vector<uint8_t>{9, 8, 7}));
  v1[20] ^= 1;  // and a damaged one is still caught
  EXPECT_EQ(ParseCheckpoint(v1, "v1.ckpt").status().code(), Status::Code::kCorruption);
}

TEST(CheckpointTest, CompleteStepsNewestFirstAndPruned) {
  std::string dir = TempDir("steps");
  for (int64_t step : {10, 30, 20}) {
    std::string sd = CheckpointStepDir(dir, step);
    ASSERT_TRUE(WriteCheckpointFile(CheckpointRankFile(sd, 0), {{"x", {1}}}).ok());
    ASSERT_TRUE(MarkCheckpointComplete(sd, 2).ok());
  }
  // A step without COMPLETE (a crash mid-checkpoint) is not offered.
  ASSERT_TRUE(WriteCheckpointFile(CheckpointRankFile(CheckpointStepDir(dir, 40), 0), {{"x", {1}}}).ok());
  auto all = CompleteCheckpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], CheckpointStepDir(dir, 30));
  EXPECT_EQ(all[2], CheckpointStepDir(dir, 10));
  EXPECT_EQ(*CheckpointWorld(all[0]), 2);
  ASSERT_TRUE(PruneCheckpoints(dir, 2).ok());
  EXPECT_EQ(CompleteCheckpoints(dir).size(), 2u);
  EXPECT_FALSE(fs::exists(CheckpointStepDir(dir, 10)));
}

TEST(CheckpointTest, ByteReaderRejectsTruncation) {
  ByteWriter w;
  w.I64(-5);
  w.F64(0.25);
  float f[3] = {1, 2, 3};
  w.Floats(f, 3);
  std::vector<uint8_t> bytes = w.Take();
  ByteReader r(bytes, "t");
  EXPECT_EQ(*r.I64(), -5);
  EXPECT_EQ(*r.F64(), 0.25);
  float g[2];
  EXPECT_EQ(r.Floats(g, 2).code(), Status::Code::kCorruption);  // sized for 3
  bytes.resize(bytes.size() - 1);
  ByteReader short_reader(bytes, "t");
  (void)short_reader.I64();
  (void)short_reader.F64();
  float h[3];
  EXPECT_FALSE(short_reader.Floats(h, 3).ok());
}

// Note [Recycled checkpoint buffers]: a writer growing past 1 MiB continues
// in the recycled buffer, with the same bytes as without it.
TEST(CheckpointTest, ByteWriterContinuesInARecycledBuffer) {
  std::vector<uint8_t> spare;
  spare.reserve(size_t{8} << 20);
  const uint8_t* memory = spare.data();
  RecycleCheckpointBuffer(std::move(spare));
  std::vector<float> values(size_t{1} << 20);  // 4 MiB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  ByteWriter w;
  w.I64(7);
  w.Floats(values.data(), values.size());
  std::vector<uint8_t> bytes = w.Take();
  EXPECT_EQ(bytes.data(), memory);
  ByteReader r(bytes, "t");
  EXPECT_EQ(*r.I64(), 7);
  std::vector<float> back(values.size());
  ASSERT_TRUE(r.Floats(back.data(), back.size()).ok());
  EXPECT_EQ(back, values);
  EXPECT_TRUE(r.done());
}

// Note [Sized snapshots]: a reserved writer does not move while its blocks
// are appended in place, the bytes equal those of Bytes(), and a later
// writer a little larger still fits its buffer.
TEST(CheckpointTest, ReservedWriterAppendsInPlaceAndItsBufferFitsALargerNextOne) {
  std::vector<uint8_t> block(size_t{3} << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>(i * 7);
  auto write = [&](size_t extra) {
    ByteWriter w;
    w.Reserve(8 + 8 + block.size() + 8 + extra);
    w.I64(5);
    w.BytesAppended(block.size(), [&](std::vector<uint8_t>* out) { out->insert(out->end(), block.begin(), block.end()); });
    w.Bytes(std::vector<uint8_t>(extra, 1));
    return w.Take();
  };
  std::vector<uint8_t> first = write(16);
  ByteWriter plain;
  plain.I64(5);
  plain.Bytes(block);
  plain.Bytes(std::vector<uint8_t>(16, 1));
  EXPECT_EQ(first, plain.Take());
  // Room for a next one up to 1/32 larger (64 KiB more here) without a new buffer.
  EXPECT_GE(first.capacity(), first.size() + (64 << 10));
  RecycleCheckpointBuffer(std::move(first));
  std::vector<uint8_t> second = write(64 << 10);
  ByteReader r(second, "t");
  EXPECT_EQ(*r.I64(), 5);
  EXPECT_EQ(*r.Bytes(), block);
  RecycleCheckpointBuffer(std::move(second));
}

// A step with two rank files and its COMPLETE marker.
void WriteStep(const std::string& dir, int64_t step, int world) {
  const std::string step_dir = CheckpointStepDir(dir, step);
  fs::create_directories(step_dir);
  for (int r = 0; r < world; ++r) {
    CheckpointMeta m;
    m.step = step;
    m.world = world;
    m.rank = r;
    ASSERT_TRUE(WriteCheckpointFile(CheckpointRankFile(step_dir, r), {{"meta", EncodeCheckpointMeta(m)}}).ok());
  }
  ASSERT_TRUE(MarkCheckpointComplete(step_dir, world).ok());
}

TEST(CheckpointTest, NewestIntactCheckpointSkipsDamagedSteps) {
  const std::string dir = TempDir("newest");
  std::vector<std::string> skipped;
  EXPECT_EQ(NewestIntactCheckpoint(dir + "/absent", &skipped).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(NewestIntactCheckpoint(dir, &skipped).status().code(), Status::Code::kNotFound);  // nothing complete
  WriteStep(dir, 10, 2);
  WriteStep(dir, 20, 2);
  fs::create_directories(CheckpointStepDir(dir, 30));  // incomplete: never a candidate
  auto newest = NewestIntactCheckpoint(dir, &skipped);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(*newest, CheckpointStepDir(dir, 20));
  EXPECT_TRUE(skipped.empty());
  // A flipped byte in step 20's rank 1: step 10 is taken, and step 20 named.
  const std::string victim = CheckpointRankFile(CheckpointStepDir(dir, 20), 1);
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x5a');
  }
  newest = NewestIntactCheckpoint(dir, &skipped);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(*newest, CheckpointStepDir(dir, 10));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("rank-1.ckpt"), std::string::npos) << skipped[0];
  // Step 10 loses a rank file: nothing intact is left, and the error says so.
  fs::remove(CheckpointRankFile(CheckpointStepDir(dir, 10), 0));
  newest = NewestIntactCheckpoint(dir, nullptr);
  EXPECT_EQ(newest.status().code(), Status::Code::kCorruption);
  EXPECT_NE(newest.status().message().find("no intact checkpoint"), std::string::npos);
}

TEST(CheckpointTest, MetaRoundTripsAndNamesLeftovers) {
  CheckpointMeta m;
  m.step = 42;
  m.world = 3;
  m.rank = 2;
  m.epoch = 1;
  m.step_in_epoch = 7;
  m.position = 896;
  m.generation = 5;
  CheckpointSections s{{"meta", EncodeCheckpointMeta(m)}};
  auto back = ParseCheckpointMeta(s, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->world, 3);
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->epoch, 1);
  EXPECT_EQ(back->step_in_epoch, 7);
  EXPECT_EQ(back->position, 896);
  EXPECT_EQ(back->generation, 5);
  EXPECT_TRUE(CheckRankFileMeta(s, 42, 3, 2, 5).ok());
  Status leftover = CheckRankFileMeta(s, 43, 3, 2, 5);
  EXPECT_EQ(leftover.code(), Status::Code::kCorruption);
  EXPECT_NE(leftover.message().find("leftover"), std::string::npos);
  EXPECT_FALSE(CheckRankFileMeta(s, 42, 3, 2, 6).ok());
  EXPECT_FALSE(CheckRankFileMeta(s, 42, 4, 2, 5).ok());
  EXPECT_EQ(ParseCheckpointMeta({}, "test").status().code(), Status::Code::kCorruption);
  m.rank = 3;  // not in its world
  EXPECT_FALSE(ParseCheckpointMeta({{"meta", EncodeCheckpointMeta(m)}}, "test").ok());
  s["meta"].pop_back();  // truncated
  EXPECT_FALSE(ParseCheckpointMeta(s, "test").ok());
}

}  // namespace
}  // namespace frugal::engine
