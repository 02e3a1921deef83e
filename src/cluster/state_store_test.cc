#include "frugal/cluster/state_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <map>

namespace frugal::cluster {
namespace {

std::string TempDb(const char* name) {
  auto p = std::filesystem::temp_directory_path() / (std::string("frugal-cluster-") + name + "-" +
                                                     std::to_string(getpid()) + ".db");
  std::filesystem::remove(p);
  return p.string();
}

TEST(StateStoreTest, EverythingReadsBackAfterReopening) {
  const std::string path = TempDb("reopen");
  {
    auto store = StateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().message();
    auto node = (*store)->SaveNode({0, "host-a", 4, true, 0});
    ASSERT_TRUE(node.ok());
    JobRecord j;
    j.spec = {"mnist", "model = \"mlp\"\n", 2, 4, 60, "mlp-0123"};
    j.state = JobState::kRunning;
    j.generation = 3;
    j.placement = {{*node, 4}};
    j.progress = 1280;
    auto id = (*store)->SaveJob(j);
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*store)->ReplaceAllocations(*id, {{*id, *node, 2, 2, 10.0, -1}}, 10.0).ok());
    ASSERT_TRUE((*store)->ReplaceAllocations(*id, {{*id, *node, 4, 3, 20.0, -1}}, 20.0).ok());
    ASSERT_TRUE((*store)->AppendEvent({0, 5.0, "submit", *id, 0, "hello"}).ok());
    ASSERT_TRUE((*store)->AppendSamples({{*id, 10, 1.0, 4, 256, 2.1, -1, 500}, {*id, 10, 1.0, 4, 256, 2.1, -1, 500}}).ok());
    ASSERT_TRUE((*store)->SaveProfileRate("mlp-0123", 2, 300).ok());
    ASSERT_TRUE((*store)->SaveProfileRate("mlp-0123", 4, 450).ok());
    ASSERT_TRUE((*store)->SaveProfileRate("mlp-0123", 4, 500).ok());  // Replaces.
  }
  auto store = StateStore::Open(path);
  ASSERT_TRUE(store.ok());
  auto nodes = (*store)->LoadNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].name, "host-a");
  EXPECT_EQ((*nodes)[0].slots, 4);
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  const JobRecord& j = (*jobs)[0];
  EXPECT_EQ(j.spec.config_toml, "model = \"mlp\"\n");
  EXPECT_EQ(j.spec.profile, "mlp-0123");
  auto rates = (*store)->LoadProfileRates();
  ASSERT_TRUE(rates.ok());
  EXPECT_EQ(*rates, (std::map<std::string, std::map<int, double>>{{"mlp-0123", {{2, 300.0}, {4, 500.0}}}}));
  EXPECT_EQ(j.state, JobState::kRunning);
  EXPECT_EQ(j.generation, 3);
  ASSERT_EQ(j.placement.size(), 1u);
  EXPECT_EQ(j.placement[0].slots, 4);
  EXPECT_DOUBLE_EQ(j.progress, 1280);
  auto allocs = (*store)->LoadAllocations(0);
  ASSERT_TRUE(allocs.ok());
  ASSERT_EQ(allocs->size(), 2u);
  EXPECT_DOUBLE_EQ((*allocs)[0].end, 20.0);  // Closed by the second replacement.
  EXPECT_DOUBLE_EQ((*allocs)[1].end, -1);
  auto samples = (*store)->LoadSamples(j.id);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->size(), 1u);  // The duplicate was ignored.
  auto events = (*store)->LoadEvents(0, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].message, "hello");
  std::filesystem::remove(path);
}

// A database from before job profiles (no jobs.profile column, no
// profile_rates table) opens, and its jobs read back without a profile.
TEST(StateStoreTest, ADatabaseFromBeforeProfilesIsUpgraded) {
  const std::string path = TempDb("old");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* old_schema =
        "CREATE TABLE frugal_cluster (key TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO frugal_cluster VALUES ('schema', '1');"
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT, config TEXT, min_workers INTEGER,"
        "  max_workers INTEGER, max_steps INTEGER, state TEXT, submit_time REAL, start_time REAL, finish_time REAL,"
        "  generation INTEGER, placement TEXT, progress REAL, attained REAL, last_step INTEGER, restarts INTEGER,"
        "  message TEXT, elastic TEXT);"
        "INSERT INTO jobs (name, config, min_workers, max_workers, max_steps, state, submit_time, start_time,"
        "  finish_time, generation, placement, progress, attained, last_step, restarts, message, elastic)"
        "  VALUES ('old', 'model = \"cnn\"', 1, 2, 10, 'queued', 1, -1, -1, 0, '', 0, 0, 0, 0, '', '');";
    ASSERT_EQ(sqlite3_exec(db, old_schema, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = StateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].spec.name, "old");
  EXPECT_EQ((*jobs)[0].spec.profile, "");
  EXPECT_TRUE((*store)->SaveProfileRate("cnn-1", 1, 10).ok());
  std::filesystem::remove(path);
}

TEST(StateStoreTest, AFileThatIsNotADatabaseIsAnError) {
  const std::string path = TempDb("garbage");
  {
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("this is not sqlite, just some text long enough to be a header......................", f);
    std::fclose(f);
  }
  auto store = StateStore::Open(path);
  EXPECT_FALSE(store.ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace frugal::cluster
