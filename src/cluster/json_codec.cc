#include "json_codec.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <type_traits>

namespace frugal::cluster {
namespace {

using nlohmann::json;

// Note [Strict request fields]
// The server's inputs (submissions, heartbeats) are decoded strictly: a
// field of the wrong JSON type, an integer out of its C++ type's range or
// with a fraction, and a field no decoder reads are each an InvalidArgument
// naming the field. nlohmann's get<int>() would otherwise truncate 2.7 to 2,
// wrap 1e10 and drop a misspelt "max_worker" without a word. The server's
// replies, read by agents and clients, are read with strict = false, so
// that a newer server can add fields without breaking older agents. An
// optional field given as null counts as absent (nlohmann writes a
// non-finite double as null).

std::string Kind(const json& v) {
  if (v.is_null()) return "null";
  return (v.is_object() || v.is_array() ? "an " : "a ") + std::string(v.type_name());
}

// A client's key as shown in a message: one line, at most 64 characters.
std::string Printable(const std::string& key) {
  constexpr size_t kShown = 64;
  std::string out;
  for (char c : key.substr(0, kShown)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return key.size() > kShown ? out + "..." : out;
}

std::string TypeError(const std::string& field, const char* expected, const json& got) {
  return "field '" + field + "' must be " + expected + ", got " + Kind(got);
}

template <typename T>
Status Convert(const json& v, const std::string& field, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return Status::InvalidArgument(TypeError(field, "true or false", v));
    *out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(std::is_signed_v<T>, "the range check below is for signed types");
    if (!v.is_number_integer()) return Status::InvalidArgument(TypeError(field, "an integer", v));
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
    if (!fits) {
      return Status::InvalidArgument("field '" + field + "' must be an integer in [" +
                                     std::to_string(std::numeric_limits<T>::min()) + ", " +
                                     std::to_string(std::numeric_limits<T>::max()) + "], got " + v.dump());
    }
    *out = v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return Status::InvalidArgument(TypeError(field, "a number", v));
    *out = v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return Status::InvalidArgument(TypeError(field, "a string", v));
    *out = v.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>>) {
    using Item = typename T::value_type;
    const char* expected = std::is_same_v<Item, double> ? "an array of numbers" : "an array of strings";
    if (!v.is_array()) return Status::InvalidArgument(TypeError(field, expected, v));
    out->clear();
    for (size_t i = 0; i < v.size(); ++i) {
      Item item{};
      FRUGAL_RETURN_IF_ERROR(Convert(v[i], field + "[" + std::to_string(i) + "]", &item));
      out->push_back(std::move(item));
    }
  } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
    if (!v.is_object()) return Status::InvalidArgument(TypeError(field, "an object of strings", v));
    out->clear();
    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string s;
      FRUGAL_RETURN_IF_ERROR(Convert(it.value(), field + "." + Printable(it.key()), &s));
      (*out)[it.key()] = std::move(s);
    }
  } else {
    static_assert(std::is_same_v<T, const json*>, "no JSON conversion for this type");
    if (!v.is_array()) return Status::InvalidArgument(TypeError(field, "an array", v));
    *out = &v;
  }
  return Status::Ok();
}

// Reads the fields of one JSON object and remembers which keys it was asked
// for, so that Finish() can name a key that no decoder reads (Note [Strict
// request fields]). `where` prefixes field names in messages ("samples[2].").
class ObjectReader {
 public:
  static Result<ObjectReader> Open(const json& j, std::string where, bool strict) {
    if (!j.is_object()) {
      return Status::InvalidArgument((where.empty() ? std::string("the body") : "'" + where + "'") +
                                     " must be a JSON object, got " + Kind(j));
    }
    return ObjectReader(j, where.empty() ? where : where + ".", strict);
  }

  template <typename T>
  Status Required(const char* key, T* out) {
    known_.push_back(key);
    auto it = j_->find(key);
    if (it == j_->end()) return Status::InvalidArgument("missing field '" + where_ + key + "'");
    return Convert(*it, where_ + key, out);
  }

  template <typename T>
  Status Optional(const char* key, T* out) {
    known_.push_back(key);
    auto it = j_->find(key);
    if (it == j_->end() || it->is_null()) return Status::Ok();
    return Convert(*it, where_ + key, out);
  }

  // A key accepted and not read (the server sets it itself).
  void Ignored(const char* key) { known_.push_back(key); }

  Status Finish() const {
    if (!strict_) return Status::Ok();
    for (auto it = j_->begin(); it != j_->end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
      std::string known;
      for (const std::string& k : known_) known += (known.empty() ? "" : ", ") + k;
      return Status::InvalidArgument("unknown field '" + where_ + Printable(it.key()) + "' (known: " + known + ")");
    }
    return Status::Ok();
  }

 private:
  ObjectReader(const json& j, std::string where, bool strict) : j_(&j), where_(std::move(where)), strict_(strict) {}

  const json* j_;
  std::string where_;
  bool strict_;
  std::vector<std::string> known_;
};

std::string Indexed(const char* array, size_t i) { return std::string(array) + "[" + std::to_string(i) + "]"; }

Result<MetricSample> SampleFromJson(const json& j, const std::string& where) {
  FRUGAL_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(j, where, /*strict=*/true));
  MetricSample m;
  FRUGAL_RETURN_IF_ERROR(r.Required("job_id", &m.job_id));
  FRUGAL_RETURN_IF_ERROR(r.Required("step", &m.step));
  FRUGAL_RETURN_IF_ERROR(r.Optional("workers", &m.workers));
  FRUGAL_RETURN_IF_ERROR(r.Optional("global_batch", &m.global_batch));
  FRUGAL_RETURN_IF_ERROR(r.Optional("loss", &m.loss));
  FRUGAL_RETURN_IF_ERROR(r.Optional("accuracy", &m.accuracy));
  FRUGAL_RETURN_IF_ERROR(r.Optional("samples_per_s", &m.samples_per_s));
  r.Ignored("time");  // Server time: the server stamps it on receipt.
  FRUGAL_RETURN_IF_ERROR(r.Finish());
  return m;
}

Result<TaskSpec> TaskFromJson(const json& j, const std::string& where) {
  FRUGAL_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(j, where, /*strict=*/false));
  TaskSpec t;
  FRUGAL_RETURN_IF_ERROR(r.Required("task_id", &t.task_id));
  FRUGAL_RETURN_IF_ERROR(r.Required("job_id", &t.job_id));
  FRUGAL_RETURN_IF_ERROR(r.Required("generation", &t.generation));
  FRUGAL_RETURN_IF_ERROR(r.Required("workers", &t.workers));
  FRUGAL_RETURN_IF_ERROR(r.Optional("gpus_per_worker", &t.gpus_per_worker));
  FRUGAL_RETURN_IF_ERROR(r.Required("args", &t.args));
  FRUGAL_RETURN_IF_ERROR(r.Optional("config_toml", &t.config_toml));
  FRUGAL_RETURN_IF_ERROR(r.Optional("resume_run", &t.resume_run));
  FRUGAL_RETURN_IF_ERROR(r.Optional("resume_args", &t.resume_args));
  FRUGAL_RETURN_IF_ERROR(r.Optional("resume_appends", &t.resume_appends));
  FRUGAL_RETURN_IF_ERROR(r.Optional("reports_endpoint", &t.reports_endpoint));
  FRUGAL_RETURN_IF_ERROR(r.Optional("reads_metrics", &t.reads_metrics));
  FRUGAL_RETURN_IF_ERROR(r.Optional("job_public_key", &t.job_public_key));
  FRUGAL_RETURN_IF_ERROR(r.Optional("job_secret_key", &t.job_secret_key));
  FRUGAL_RETURN_IF_ERROR(r.Optional("insecure_transport", &t.insecure_transport));
  FRUGAL_RETURN_IF_ERROR(r.Optional("env", &t.env));
  FRUGAL_RETURN_IF_ERROR(r.Optional("workdir", &t.workdir));
  return t;
}

// Our messages nest at most 4 levels (a reply's tasks' args).
constexpr int kMaxJsonDepth = 32;

// Checks nesting depth and finds the first syntax error, building nothing.
struct DepthLimit final : nlohmann::json_sax<json> {
  int depth = 0;
  bool too_deep = false;
  std::string where;  // " at byte N: ..." of the first syntax error.

  bool Open() {
    too_deep = ++depth > kMaxJsonDepth;
    return !too_deep;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return --depth, true; }
  bool parse_error(std::size_t position, const std::string&, const json::exception&) override {
    where = " at byte " + std::to_string(position);
    return false;
  }
};

json EnvNames(const CommandSpec& c) {
  json out = json::array();
  for (const auto& [name, value] : c.env) out.push_back(name);
  return out;
}

json Placement(const std::vector<NodeSlots>& p) {
  json out = json::array();
  for (const NodeSlots& s : p) out.push_back({{"node_id", s.node_id}, {"slots", s.slots}});
  return out;
}

}  // namespace

json ToJson(const NodeRecord& n) {
  return {{"id", n.id}, {"name", n.name}, {"slots", n.slots}, {"up", n.up}, {"last_heartbeat", n.last_heartbeat}};
}

json ToJson(const JobRecord& j) {
  return {{"id", j.id},
          {"name", j.spec.name},
          {"min_workers", j.spec.min_workers},
          {"max_workers", j.spec.max_workers},
          {"max_steps", j.spec.max_steps},
          {"profile", j.spec.profile},
          // A command job's program; its environment's values are not shown
          // (they may hold credentials), only their names.
          {"command", j.spec.command.argv},
          {"env_names", EnvNames(j.spec.command)},
          {"workdir", j.spec.command.workdir},
          {"planned_samples_per_s", j.spec.command.planned_samples_per_s},
          {"state", JobStateName(j.state)},
          {"submit_time", j.submit_time},
          {"start_time", j.start_time},
          {"finish_time", j.finish_time},
          {"generation", j.generation},
          {"workers", j.Workers()},
          {"placement", Placement(j.placement)},
          {"progress_samples", j.progress},
          {"step", j.last_step},
          {"attained_slot_seconds", j.attained_service},
          {"restarts", j.restarts},
          {"incarnation", j.incarnation},
          {"coordinator", j.coordinator},
          {"message", j.message}};
}

json ToJson(const AllocationRecord& a) {
  return {{"job_id", a.job_id}, {"node_id", a.node_id}, {"slots", a.slots},
          {"generation", a.generation}, {"start", a.start}, {"end", a.end}};
}

json ToJson(const EventRecord& e) {
  return {{"id", e.id}, {"time", e.time}, {"kind", e.kind}, {"job_id", e.job_id}, {"node_id", e.node_id},
          {"message", e.message}};
}

json ToJson(const MetricSample& m) {
  return {{"job_id", m.job_id}, {"step", m.step}, {"time", m.time}, {"workers", m.workers},
          {"global_batch", m.global_batch}, {"loss", m.loss}, {"accuracy", m.accuracy},
          {"samples_per_s", m.samples_per_s}};
}

json ToJson(const TaskSpec& t) {
  return {{"task_id", t.task_id}, {"job_id", t.job_id}, {"generation", t.generation}, {"workers", t.workers},
          {"gpus_per_worker", t.gpus_per_worker}, {"args", t.args}, {"config_toml", t.config_toml}, {"resume_run", t.resume_run},
          {"resume_args", t.resume_args}, {"resume_appends", t.resume_appends},
          {"reports_endpoint", t.reports_endpoint}, {"reads_metrics", t.reads_metrics},
          {"job_public_key", t.job_public_key}, {"job_secret_key", t.job_secret_key},
          {"insecure_transport", t.insecure_transport}, {"env", t.env}, {"workdir", t.workdir}};
}

json ToJson(const AgentReport& r) {
  json exited = json::array(), samples = json::array();
  for (const TaskExit& e : r.exited) exited.push_back({{"task_id", e.task_id}, {"exit_code", e.exit_code}});
  for (const MetricSample& m : r.samples) samples.push_back(ToJson(m));
  json endpoints = json::array();
  for (const TaskEndpoint& e : r.endpoints) endpoints.push_back({{"task_id", e.task_id}, {"endpoint", e.endpoint}});
  return {{"node", r.node},       {"slots", r.slots},     {"running", r.running},
          {"exited", exited},     {"samples", samples},   {"endpoints", endpoints}};
}

json ToJson(const AgentReply& r) {
  json tasks = json::array();
  for (const TaskSpec& t : r.tasks) tasks.push_back(ToJson(t));
  return {{"node_id", r.node_id}, {"tasks", tasks}, {"superseded", r.superseded}};
}

json ToJson(const JobSubmission& s) {
  json out = {{"name", s.name}, {"config_toml", s.config_toml}, {"min_workers", s.min_workers},
              {"max_workers", s.max_workers}, {"max_steps", s.max_steps}, {"profile", s.profile}};
  if (s.IsCommand()) {
    out.erase("config_toml");
    out["command"] = s.command.argv;
    out["env"] = s.command.env;
    out["workdir"] = s.command.workdir;
    out["gpus_per_worker"] = s.command.gpus_per_worker;
    if (!s.command.planned_samples_per_s.empty()) out["planned_samples_per_s"] = s.command.planned_samples_per_s;
  }
  return out;
}

Result<JobSubmission> SubmissionFromJson(const json& j) {
  FRUGAL_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(j, "", /*strict=*/true));
  JobSubmission s;
  FRUGAL_RETURN_IF_ERROR(r.Optional("name", &s.name));
  // A command job (CommandSpec) or a `frugal train` configuration.
  const bool command = j.contains("command") && !j["command"].is_null();
  FRUGAL_RETURN_IF_ERROR(r.Optional("command", &s.command.argv));
  if (command && s.command.argv.empty()) {
    return Status::InvalidArgument("field 'command' is empty: give the program and its arguments");
  }
  FRUGAL_RETURN_IF_ERROR(r.Optional("env", &s.command.env));
  FRUGAL_RETURN_IF_ERROR(r.Optional("workdir", &s.command.workdir));
  FRUGAL_RETURN_IF_ERROR(r.Optional("gpus_per_worker", &s.command.gpus_per_worker));
  FRUGAL_RETURN_IF_ERROR(r.Optional("planned_samples_per_s", &s.command.planned_samples_per_s));
  if (command) {
    FRUGAL_RETURN_IF_ERROR(r.Optional("config_toml", &s.config_toml));
  } else {
    FRUGAL_RETURN_IF_ERROR(r.Required("config_toml", &s.config_toml));
    if (!s.command.env.empty() || !s.command.workdir.empty() || j.contains("gpus_per_worker") ||
        j.contains("planned_samples_per_s")) {
      return Status::InvalidArgument("fields 'env', 'workdir', 'gpus_per_worker' and 'planned_samples_per_s' "
                                     "belong to a command job (give 'command')");
    }
  }
  FRUGAL_RETURN_IF_ERROR(r.Required("min_workers", &s.min_workers));
  FRUGAL_RETURN_IF_ERROR(r.Required("max_workers", &s.max_workers));
  FRUGAL_RETURN_IF_ERROR(r.Optional("max_steps", &s.max_steps));
  FRUGAL_RETURN_IF_ERROR(r.Optional("profile", &s.profile));
  FRUGAL_RETURN_IF_ERROR(r.Finish());
  if (s.profile.size() > 256) return Status::InvalidArgument("'profile' is over 256 characters");
  return s;
}

Result<AgentReport> ReportFromJson(const json& j) {
  FRUGAL_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(j, "", /*strict=*/true));
  AgentReport report;
  const json *exited = nullptr, *samples = nullptr, *endpoints = nullptr;
  FRUGAL_RETURN_IF_ERROR(r.Required("node", &report.node));
  FRUGAL_RETURN_IF_ERROR(r.Required("slots", &report.slots));
  FRUGAL_RETURN_IF_ERROR(r.Optional("running", &report.running));
  FRUGAL_RETURN_IF_ERROR(r.Optional("exited", &exited));
  FRUGAL_RETURN_IF_ERROR(r.Optional("samples", &samples));
  FRUGAL_RETURN_IF_ERROR(r.Optional("endpoints", &endpoints));
  FRUGAL_RETURN_IF_ERROR(r.Finish());
  for (size_t i = 0; exited != nullptr && i < exited->size(); ++i) {
    FRUGAL_ASSIGN_OR_RETURN(ObjectReader e, ObjectReader::Open((*exited)[i], Indexed("exited", i), true));
    TaskExit x;
    FRUGAL_RETURN_IF_ERROR(e.Required("task_id", &x.task_id));
    FRUGAL_RETURN_IF_ERROR(e.Required("exit_code", &x.exit_code));
    FRUGAL_RETURN_IF_ERROR(e.Finish());
    report.exited.push_back(std::move(x));
  }
  for (size_t i = 0; samples != nullptr && i < samples->size(); ++i) {
    FRUGAL_ASSIGN_OR_RETURN(MetricSample m, SampleFromJson((*samples)[i], Indexed("samples", i)));
    report.samples.push_back(m);
  }
  for (size_t i = 0; endpoints != nullptr && i < endpoints->size(); ++i) {
    FRUGAL_ASSIGN_OR_RETURN(ObjectReader e, ObjectReader::Open((*endpoints)[i], Indexed("endpoints", i), true));
    TaskEndpoint x;
    FRUGAL_RETURN_IF_ERROR(e.Required("task_id", &x.task_id));
    FRUGAL_RETURN_IF_ERROR(e.Required("endpoint", &x.endpoint));
    FRUGAL_RETURN_IF_ERROR(e.Finish());
    report.endpoints.push_back(std::move(x));
  }
  return report;
}

Result<AgentReply> ReplyFromJson(const json& j) {
  FRUGAL_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(j, "", /*strict=*/false));
  AgentReply reply;
  const json* tasks = nullptr;
  FRUGAL_RETURN_IF_ERROR(r.Required("node_id", &reply.node_id));
  FRUGAL_RETURN_IF_ERROR(r.Required("tasks", &tasks));
  FRUGAL_RETURN_IF_ERROR(r.Optional("superseded", &reply.superseded));
  for (size_t i = 0; i < tasks->size(); ++i) {
    FRUGAL_ASSIGN_OR_RETURN(TaskSpec spec, TaskFromJson((*tasks)[i], Indexed("tasks", i)));
    reply.tasks.push_back(std::move(spec));
  }
  return reply;
}

Result<json> ParseJson(const std::string& text) {
  // A first pass without building values: 8 MiB of '[' would otherwise
  // become millions of nested arrays (hundreds of MB) before failing.
  DepthLimit limit;
  if (!json::sax_parse(text, &limit, json::input_format_t::json, /*strict=*/true) || limit.too_deep) {
    return Status::InvalidArgument(limit.too_deep ? "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                                        " levels"
                                                  : "malformed JSON" + limit.where);
  }
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace frugal::cluster
