#include "json_codec.h"

namespace frugal::cluster {
namespace {

using nlohmann::json;

// Reads j[key] into *out if present (required: error if absent); InvalidArgument on a wrong type.
template <typename T>
Status Field(const json& j, const char* key, T* out, bool required = false) {
  if (!j.is_object()) return Status::InvalidArgument("expected a JSON object");
  auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(std::string("missing field '") + key + "'") : Status::Ok();
  }
  try {
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("field '") + key + "': " + e.what());
  }
  return Status::Ok();
}

Result<MetricSample> SampleFromJson(const json& j) {
  MetricSample m;
  FRUGAL_RETURN_IF_ERROR(Field(j, "job_id", &m.job_id, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "step", &m.step, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "workers", &m.workers));
  FRUGAL_RETURN_IF_ERROR(Field(j, "global_batch", &m.global_batch));
  FRUGAL_RETURN_IF_ERROR(Field(j, "loss", &m.loss));
  FRUGAL_RETURN_IF_ERROR(Field(j, "accuracy", &m.accuracy));
  FRUGAL_RETURN_IF_ERROR(Field(j, "samples_per_s", &m.samples_per_s));
  return m;
}

Result<TaskSpec> TaskFromJson(const json& j) {
  TaskSpec t;
  FRUGAL_RETURN_IF_ERROR(Field(j, "task_id", &t.task_id, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "job_id", &t.job_id, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "generation", &t.generation, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "workers", &t.workers, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "args", &t.args, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "config_toml", &t.config_toml));
  FRUGAL_RETURN_IF_ERROR(Field(j, "resume_run", &t.resume_run));
  FRUGAL_RETURN_IF_ERROR(Field(j, "resume_args", &t.resume_args));
  FRUGAL_RETURN_IF_ERROR(Field(j, "resume_appends", &t.resume_appends));
  FRUGAL_RETURN_IF_ERROR(Field(j, "reports_endpoint", &t.reports_endpoint));
  FRUGAL_RETURN_IF_ERROR(Field(j, "reads_metrics", &t.reads_metrics));
  FRUGAL_RETURN_IF_ERROR(Field(j, "job_public_key", &t.job_public_key));
  FRUGAL_RETURN_IF_ERROR(Field(j, "job_secret_key", &t.job_secret_key));
  FRUGAL_RETURN_IF_ERROR(Field(j, "insecure_transport", &t.insecure_transport));
  return t;
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
          {"args", t.args}, {"config_toml", t.config_toml}, {"resume_run", t.resume_run},
          {"resume_args", t.resume_args}, {"resume_appends", t.resume_appends},
          {"reports_endpoint", t.reports_endpoint}, {"reads_metrics", t.reads_metrics},
          {"job_public_key", t.job_public_key}, {"job_secret_key", t.job_secret_key},
          {"insecure_transport", t.insecure_transport}};
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
  return {{"name", s.name}, {"config_toml", s.config_toml}, {"min_workers", s.min_workers},
          {"max_workers", s.max_workers}, {"max_steps", s.max_steps}, {"profile", s.profile}};
}

Result<JobSubmission> SubmissionFromJson(const json& j) {
  JobSubmission s;
  FRUGAL_RETURN_IF_ERROR(Field(j, "name", &s.name));
  FRUGAL_RETURN_IF_ERROR(Field(j, "config_toml", &s.config_toml, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "min_workers", &s.min_workers, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "max_workers", &s.max_workers, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "max_steps", &s.max_steps));
  FRUGAL_RETURN_IF_ERROR(Field(j, "profile", &s.profile));
  if (s.profile.size() > 256) return Status::InvalidArgument("'profile' is over 256 characters");
  return s;
}

Result<AgentReport> ReportFromJson(const json& j) {
  AgentReport r;
  FRUGAL_RETURN_IF_ERROR(Field(j, "node", &r.node, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "slots", &r.slots, true));
  FRUGAL_RETURN_IF_ERROR(Field(j, "running", &r.running));
  json exited = json::array(), samples = json::array();
  FRUGAL_RETURN_IF_ERROR(Field(j, "exited", &exited));
  FRUGAL_RETURN_IF_ERROR(Field(j, "samples", &samples));
  if (!exited.is_array() || !samples.is_array()) return Status::InvalidArgument("'exited' and 'samples' must be arrays");
  for (const json& e : exited) {
    TaskExit x;
    FRUGAL_RETURN_IF_ERROR(Field(e, "task_id", &x.task_id, true));
    FRUGAL_RETURN_IF_ERROR(Field(e, "exit_code", &x.exit_code, true));
    r.exited.push_back(x);
  }
  for (const json& s : samples) {
    FRUGAL_ASSIGN_OR_RETURN(MetricSample m, SampleFromJson(s));
    r.samples.push_back(m);
  }
  json endpoints = json::array();
  FRUGAL_RETURN_IF_ERROR(Field(j, "endpoints", &endpoints));
  if (!endpoints.is_array()) return Status::InvalidArgument("'endpoints' must be an array");
  for (const json& e : endpoints) {
    TaskEndpoint x;
    FRUGAL_RETURN_IF_ERROR(Field(e, "task_id", &x.task_id, true));
    FRUGAL_RETURN_IF_ERROR(Field(e, "endpoint", &x.endpoint, true));
    r.endpoints.push_back(x);
  }
  return r;
}

Result<AgentReply> ReplyFromJson(const json& j) {
  AgentReply r;
  FRUGAL_RETURN_IF_ERROR(Field(j, "node_id", &r.node_id, true));
  json tasks = json::array();
  FRUGAL_RETURN_IF_ERROR(Field(j, "tasks", &tasks, true));
  if (!tasks.is_array()) return Status::InvalidArgument("'tasks' must be an array");
  for (const json& t : tasks) {
    FRUGAL_ASSIGN_OR_RETURN(TaskSpec spec, TaskFromJson(t));
    r.tasks.push_back(std::move(spec));
  }
  FRUGAL_RETURN_IF_ERROR(Field(j, "superseded", &r.superseded));
  return r;
}

Result<json> ParseJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("malformed JSON");
  return j;
}

}  // namespace frugal::cluster
