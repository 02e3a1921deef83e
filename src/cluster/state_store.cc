#include "frugal/cluster/state_store.h"

#include <sqlite3.h>

#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace frugal::cluster {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS frugal_cluster (key TEXT PRIMARY KEY, value TEXT);
INSERT OR IGNORE INTO frugal_cluster VALUES ('schema', '1');
CREATE TABLE IF NOT EXISTS nodes (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, slots INTEGER NOT NULL,
                                  up INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, name TEXT, config TEXT, min_workers INTEGER,
  max_workers INTEGER, max_steps INTEGER, state TEXT, submit_time REAL, start_time REAL, finish_time REAL,
  generation INTEGER, placement TEXT, progress REAL, attained REAL, last_step INTEGER, restarts INTEGER,
  message TEXT, elastic TEXT, profile TEXT, command TEXT);
CREATE TABLE IF NOT EXISTS allocations (id INTEGER PRIMARY KEY, job_id INTEGER, node_id INTEGER,
  slots INTEGER, generation INTEGER, start REAL, end REAL);
CREATE INDEX IF NOT EXISTS allocations_job ON allocations(job_id);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, time REAL, kind TEXT, job_id INTEGER,
  node_id INTEGER, message TEXT);
CREATE TABLE IF NOT EXISTS samples (job_id INTEGER, step INTEGER, kind INTEGER, time REAL, workers INTEGER,
  global_batch INTEGER, loss REAL, accuracy REAL, samples_per_s REAL, PRIMARY KEY (job_id, step, kind));
CREATE TABLE IF NOT EXISTS profile_rates (profile TEXT, workers INTEGER, samples_per_s REAL,
  PRIMARY KEY (profile, workers));
)sql";

std::string EncodePlacement(const std::vector<NodeSlots>& p) {
  std::string s;
  for (const NodeSlots& n : p) s += (s.empty() ? "" : ",") + std::to_string(n.node_id) + ":" + std::to_string(n.slots);
  return s;
}

std::vector<NodeSlots> DecodePlacement(const std::string& s) {
  std::vector<NodeSlots> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    out.push_back({std::stoll(item.substr(0, colon)), std::stoi(item.substr(colon + 1))});
  }
  return out;
}

// An elastic job's state (JobRecord::incarnation, home_node, coordinator,
// members) in one column: "incarnation;home;endpoint;node:since:index:join,...".
std::string EncodeElastic(const JobRecord& j) {
  std::string s = std::to_string(j.incarnation) + ";" + std::to_string(j.home_node) + ";" + j.coordinator + ";";
  for (size_t k = 0; k < j.members.size(); ++k) {
    const ElasticMember& m = j.members[k];
    s += (k ? "," : "") + std::to_string(m.node_id) + ":" + std::to_string(m.since) + ":" + std::to_string(m.index) +
         ":" + (m.join ? "1" : "0");
  }
  return s;
}

// A command job's CommandSpec as JSON; "" for a `frugal train` job.
std::string EncodeCommand(const CommandSpec& c) {
  if (c.argv.empty()) return "";
  nlohmann::json j{{"argv", c.argv}, {"env", c.env}, {"workdir", c.workdir}, {"gpus_per_worker", c.gpus_per_worker}};
  if (!c.planned_samples_per_s.empty()) j["planned_samples_per_s"] = c.planned_samples_per_s;
  return j.dump();
}

bool DecodeCommand(const std::string& text, CommandSpec* c) {
  if (text.empty()) return true;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  try {
    c->argv = j.at("argv").get<std::vector<std::string>>();
    c->env = j.at("env").get<std::map<std::string, std::string>>();
    c->workdir = j.at("workdir").get<std::string>();
    c->gpus_per_worker = j.at("gpus_per_worker").get<int>();
    if (j.contains("planned_samples_per_s")) {
      c->planned_samples_per_s = j.at("planned_samples_per_s").get<std::vector<double>>();
    }
  } catch (const std::exception&) {
    return false;
  }
  return !c->argv.empty();
}

void DecodeElastic(const std::string& s, JobRecord* j) {
  std::stringstream in(s);
  std::string inc, home, endpoint, members;
  if (!std::getline(in, inc, ';') || !std::getline(in, home, ';') || !std::getline(in, endpoint, ';')) return;
  std::getline(in, members);
  j->incarnation = std::stoll(inc);
  j->home_node = std::stoll(home);
  j->coordinator = endpoint;
  std::stringstream ms(members);
  for (std::string item; std::getline(ms, item, ',');) {
    long long node = 0, since = 0;
    int index = 0, join = 0;
    if (std::sscanf(item.c_str(), "%lld:%lld:%d:%d", &node, &since, &index, &join) == 4) {
      j->members.push_back({node, since, index, join != 0});
    }
  }
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); return *this; }
  Stmt& Bind(int i, double v) { sqlite3_bind_double(s_, i, v); return *this; }
  Stmt& Bind(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT); return *this; }
  // Makes the statement ready to run again with new bindings.
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return rc_ == SQLITE_OK ? sqlite3_step(s_) : rc_; }
  Status Run() {
    int rc = Step();
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? Status::Ok() : Error();
  }
  Status Error() const { return Status::IOError(std::string("sqlite: ") + sqlite3_errmsg(db_)); }
  int64_t Int(int c) const { return sqlite3_column_int64(s_, c); }
  double Real(int c) const { return sqlite3_column_double(s_, c); }
  std::string Text(int c) const {
    const unsigned char* t = sqlite3_column_text(s_, c);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

class SqliteStateStore final : public StateStore {
 public:
  explicit SqliteStateStore(sqlite3* db) : db_(db) {}
  ~SqliteStateStore() override { sqlite3_close(db_); }

  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return Status::IOError("sqlite: " + msg);
    }
    return Status::Ok();
  }

  // A database written before the elastic controller lacks jobs.elastic,
  // one written before profiles jobs.profile, one written before command
  // jobs jobs.command.
  Status AddMissingColumns() {
    for (const char* column : {"elastic", "profile", "command"}) {
      Stmt s(db_, "SELECT 1 FROM pragma_table_info('jobs') WHERE name = ?1");
      s.Bind(1, std::string(column));
      const int rc = s.Step();
      if (rc == SQLITE_ROW) continue;
      if (rc != SQLITE_DONE) return s.Error();
      FRUGAL_RETURN_IF_ERROR(Exec(("ALTER TABLE jobs ADD COLUMN " + std::string(column) + " TEXT").c_str()));
    }
    return Status::Ok();
  }

  Result<std::vector<NodeRecord>> LoadNodes() override {
    Stmt s(db_, "SELECT id, name, slots, up FROM nodes ORDER BY id");
    std::vector<NodeRecord> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out.push_back({s.Int(0), s.Text(1), static_cast<int>(s.Int(2)), s.Int(3) != 0, 0});
    if (rc != SQLITE_DONE) return s.Error();
    return out;
  }

  Result<std::vector<JobRecord>> LoadJobs() override {
    Stmt s(db_,
           "SELECT id, name, config, min_workers, max_workers, max_steps, state, submit_time, start_time, "
           "finish_time, generation, placement, progress, attained, last_step, restarts, message, elastic, profile, "
           "command FROM jobs ORDER BY id");
    std::vector<JobRecord> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      JobRecord j;
      j.id = s.Int(0);
      j.spec = {s.Text(1), s.Text(2), static_cast<int>(s.Int(3)), static_cast<int>(s.Int(4)),
                static_cast<int>(s.Int(5)), s.Text(18)};
      std::optional<JobState> state = ParseJobState(s.Text(6));
      if (!state) return Status::Corruption("cluster database: job " + std::to_string(j.id) + " has state '" + s.Text(6) + "'");
      j.state = *state;
      j.submit_time = s.Real(7);
      j.start_time = s.Real(8);
      j.finish_time = s.Real(9);
      j.generation = s.Int(10);
      j.placement = DecodePlacement(s.Text(11));
      j.progress = s.Real(12);
      j.attained_service = s.Real(13);
      j.last_step = static_cast<int>(s.Int(14));
      j.restarts = static_cast<int>(s.Int(15));
      j.message = s.Text(16);
      try {
        DecodeElastic(s.Text(17), &j);
      } catch (const std::exception&) {
        return Status::Corruption("cluster database: job " + std::to_string(j.id) + " has elastic state '" +
                                  s.Text(17) + "'");
      }
      if (!DecodeCommand(s.Text(19), &j.spec.command)) {
        return Status::Corruption("cluster database: job " + std::to_string(j.id) + " has a malformed command");
      }
      out.push_back(std::move(j));
    }
    if (rc != SQLITE_DONE) return s.Error();
    return out;
  }

  Result<std::vector<AllocationRecord>> LoadAllocations(int64_t job_id) override {
    Stmt s(db_, job_id == 0 ? "SELECT job_id, node_id, slots, generation, start, end FROM allocations ORDER BY id"
                            : "SELECT job_id, node_id, slots, generation, start, end FROM allocations WHERE job_id = ?1 "
                              "ORDER BY id");
    if (job_id != 0) s.Bind(1, job_id);
    std::vector<AllocationRecord> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      out.push_back({s.Int(0), s.Int(1), static_cast<int>(s.Int(2)), s.Int(3), s.Real(4), s.Real(5)});
    }
    if (rc != SQLITE_DONE) return s.Error();
    return out;
  }

  Result<std::vector<EventRecord>> LoadEvents(int64_t after_id, int limit) override {
    Stmt s(db_, "SELECT id, time, kind, job_id, node_id, message FROM events WHERE id > ?1 ORDER BY id LIMIT ?2");
    s.Bind(1, after_id).Bind(2, static_cast<int64_t>(limit));
    std::vector<EventRecord> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out.push_back({s.Int(0), s.Real(1), s.Text(2), s.Int(3), s.Int(4), s.Text(5)});
    if (rc != SQLITE_DONE) return s.Error();
    return out;
  }

  Result<std::vector<MetricSample>> LoadSamples(int64_t job_id) override {
    Stmt s(db_, "SELECT job_id, step, time, workers, global_batch, loss, accuracy, samples_per_s FROM samples "
                "WHERE job_id = ?1 ORDER BY step, kind");
    s.Bind(1, job_id);
    std::vector<MetricSample> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      out.push_back({s.Int(0), static_cast<int>(s.Int(1)), s.Real(2), static_cast<int>(s.Int(3)),
                     static_cast<int>(s.Int(4)), s.Real(5), s.Real(6), s.Real(7)});
    }
    if (rc != SQLITE_DONE) return s.Error();
    return out;
  }

  Result<std::map<std::string, std::map<int, double>>> LoadProfileRates() override {
    Stmt s(db_, "SELECT profile, workers, samples_per_s FROM profile_rates");
    std::map<std::string, std::map<int, double>> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out[s.Text(0)][static_cast<int>(s.Int(1))] = s.Real(2);
    if (rc != SQLITE_DONE) return s.Error();
    return out;
  }

  Result<std::string> LoadSetting(const std::string& key) override {
    Stmt s(db_, "SELECT value FROM frugal_cluster WHERE key = ?1");
    s.Bind(1, "setting:" + key);
    const int rc = s.Step();
    if (rc == SQLITE_ROW) return s.Text(0);
    if (rc != SQLITE_DONE) return s.Error();
    return std::string();
  }

  Status SaveSetting(const std::string& key, const std::string& value) override {
    Stmt s(db_, "INSERT OR REPLACE INTO frugal_cluster VALUES (?1, ?2)");
    s.Bind(1, "setting:" + key).Bind(2, value);
    return s.Run();
  }

  Status SaveProfileRate(const std::string& profile, int workers, double samples_per_s) override {
    Stmt s(db_, "INSERT OR REPLACE INTO profile_rates VALUES (?1, ?2, ?3)");
    s.Bind(1, profile).Bind(2, static_cast<int64_t>(workers)).Bind(3, samples_per_s);
    return s.Run();
  }

  Result<int64_t> SaveNode(const NodeRecord& n) override {
    Stmt s(db_, n.id == 0 ? "INSERT INTO nodes (name, slots, up) VALUES (?1, ?2, ?3)"
                          : "UPDATE nodes SET name = ?1, slots = ?2, up = ?3 WHERE id = ?4");
    s.Bind(1, n.name).Bind(2, static_cast<int64_t>(n.slots)).Bind(3, static_cast<int64_t>(n.up));
    if (n.id != 0) s.Bind(4, n.id);
    FRUGAL_RETURN_IF_ERROR(s.Run());
    return n.id == 0 ? sqlite3_last_insert_rowid(db_) : n.id;
  }

  Result<int64_t> SaveJob(const JobRecord& j) override {
    Stmt s(db_, j.id == 0
                    ? "INSERT INTO jobs (name, config, min_workers, max_workers, max_steps, state, submit_time, "
                      "start_time, finish_time, generation, placement, progress, attained, last_step, restarts, "
                      "message, elastic, profile, command) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                      "?13, ?14, ?15, ?16, ?18, ?19, ?20)"
                    : "UPDATE jobs SET name = ?1, config = ?2, min_workers = ?3, max_workers = ?4, max_steps = ?5, "
                      "state = ?6, submit_time = ?7, start_time = ?8, finish_time = ?9, generation = ?10, "
                      "placement = ?11, progress = ?12, attained = ?13, last_step = ?14, restarts = ?15, "
                      "message = ?16, elastic = ?18, profile = ?19, command = ?20 WHERE id = ?17");
    s.Bind(1, j.spec.name).Bind(2, j.spec.config_toml).Bind(3, static_cast<int64_t>(j.spec.min_workers));
    s.Bind(4, static_cast<int64_t>(j.spec.max_workers)).Bind(5, static_cast<int64_t>(j.spec.max_steps));
    s.Bind(6, std::string(JobStateName(j.state))).Bind(7, j.submit_time).Bind(8, j.start_time).Bind(9, j.finish_time);
    s.Bind(10, j.generation).Bind(11, EncodePlacement(j.placement)).Bind(12, j.progress).Bind(13, j.attained_service);
    s.Bind(14, static_cast<int64_t>(j.last_step)).Bind(15, static_cast<int64_t>(j.restarts)).Bind(16, j.message);
    if (j.id != 0) s.Bind(17, j.id);
    s.Bind(18, EncodeElastic(j)).Bind(19, j.spec.profile).Bind(20, EncodeCommand(j.spec.command));
    FRUGAL_RETURN_IF_ERROR(s.Run());
    return j.id == 0 ? sqlite3_last_insert_rowid(db_) : j.id;
  }

  Status SaveAttained(const std::vector<std::pair<int64_t, double>>& attained) override {
    Stmt s(db_, "UPDATE jobs SET attained = ?1 WHERE id = ?2");
    for (const auto& [id, value] : attained) {
      s.Reset();
      s.Bind(1, value).Bind(2, id);
      FRUGAL_RETURN_IF_ERROR(s.Run());
    }
    return Status::Ok();
  }

  Status ReplaceAllocations(int64_t job_id, const std::vector<AllocationRecord>& open, double time) override {
    Stmt close(db_, "UPDATE allocations SET end = ?1 WHERE job_id = ?2 AND end < 0");
    close.Bind(1, time).Bind(2, job_id);
    FRUGAL_RETURN_IF_ERROR(close.Run());
    for (const AllocationRecord& a : open) {
      Stmt s(db_, "INSERT INTO allocations (job_id, node_id, slots, generation, start, end) VALUES (?1,?2,?3,?4,?5,-1)");
      s.Bind(1, job_id).Bind(2, a.node_id).Bind(3, static_cast<int64_t>(a.slots)).Bind(4, a.generation).Bind(5, a.start);
      FRUGAL_RETURN_IF_ERROR(s.Run());
    }
    return Status::Ok();
  }

  Result<int64_t> AppendEvent(const EventRecord& e) override {
    Stmt s(db_, "INSERT INTO events (time, kind, job_id, node_id, message) VALUES (?1, ?2, ?3, ?4, ?5)");
    s.Bind(1, e.time).Bind(2, e.kind).Bind(3, e.job_id).Bind(4, e.node_id).Bind(5, e.message);
    FRUGAL_RETURN_IF_ERROR(s.Run());
    return sqlite3_last_insert_rowid(db_);
  }

  Status AppendSamples(const std::vector<MetricSample>& samples) override {
    for (const MetricSample& m : samples) {
      Stmt s(db_, "INSERT OR IGNORE INTO samples VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
      s.Bind(1, m.job_id).Bind(2, static_cast<int64_t>(m.step)).Bind(3, static_cast<int64_t>(m.accuracy >= 0));
      s.Bind(4, m.time).Bind(5, static_cast<int64_t>(m.workers)).Bind(6, static_cast<int64_t>(m.global_batch));
      s.Bind(7, m.loss).Bind(8, m.accuracy).Bind(9, m.samples_per_s);
      FRUGAL_RETURN_IF_ERROR(s.Run());
    }
    return Status::Ok();
  }

  Status Begin() override { return Exec("BEGIN IMMEDIATE"); }
  Status Commit() override { return Exec("COMMIT"); }
  Status Rollback() override { return Exec("ROLLBACK"); }

 private:
  sqlite3* db_;
};

}  // namespace

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kFinished: return "finished";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "?";
}

std::optional<JobState> ParseJobState(const std::string& name) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kFinished, JobState::kFailed, JobState::kCancelled}) {
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::IOError(path + ": cannot open the cluster database: " + msg);
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::make_unique<SqliteStateStore>(db);
  Status st = store->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (st.ok()) st = store->Exec(kSchema);
  if (st.ok()) st = store->AddMissingColumns();
  if (!st.ok()) {
    return Status::Corruption(path + ": not a usable Frugal cluster database (" + st.message() + ")");
  }
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace frugal::cluster
