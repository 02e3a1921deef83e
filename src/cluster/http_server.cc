#include "frugal/common/env.h"
#include "frugal/cluster/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "dashboard.h"
#include "deadline_http_server.h"
#include "json_codec.h"

namespace frugal::cluster {
namespace {

using nlohmann::json;

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  // replace: a message quoting the client's bytes must not throw on bad UTF-8.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// Bodies above this are answered 413 (a heartbeat is a few KiB, a job's
// config at most 1 MiB).
constexpr size_t kMaxBodyBytes = 8 << 20;

void ReplyError(httplib::Response& res, const Status& st) {
  int code = st.code() == Status::Code::kInvalidArgument ? 400 : st.code() == Status::Code::kNotFound ? 404 : 500;
  Reply(res, code, {{"error", st.message()}});
}

class ClusterServerImpl final : public ClusterServer {
 public:
  ClusterServerImpl(ClusterManager& manager, ServerOptions options)
      : manager_(manager),
        options_(std::move(options)),
        http_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(options_.read_timeout_s))) {}
  ~ClusterServerImpl() override { Stop(); }

  Status Bind();
  int port() const override { return port_; }
  Status error() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  void Stop() override;

 private:
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void Routes();
  void ReadRoutes();
  void ErrorAnswers();
  json StateJson() const;
  json JobsJson() const;
  json NodesJson() const;
  void TickLoop();

  ClusterManager& manager_;
  ServerOptions options_;
  DeadlineHttpServer http_;
  int port_ = 0;
  int listen_fd_ = -1;  // The listening socket, seen by the socket-options hook.
  std::thread listener_, ticker_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  Status error_;           // GUARDED_BY(mu_)
};

// Compares in time independent of where the strings differ, so that the
// answer's timing does not tell a guesser how much of the token is right.
// REQUIRES: !token.empty().
bool SameToken(const std::string& given, const std::string& token) {
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ token[i % token.size()]);
  return diff == 0;
}

// Parses the id of /api/jobs/ID: digits only, as an int64.
Result<int64_t> JobId(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 18 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) return Status::InvalidArgument("a job id is a decimal number of up to 18 digits (see GET /api/jobs)");
  return std::stoll(text);
}

bool ClusterServerImpl::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (options_.token.empty()) return true;
  const std::string kBearer = "Bearer ";
  const std::string header = req.get_header_value("Authorization");
  if (header.compare(0, kBearer.size(), kBearer) != 0) {
    res.set_header("WWW-Authenticate", "Bearer");
    Reply(res, 401, {{"error", "missing bearer token: send Authorization: Bearer <token from --token-file>"}});
    return false;
  }
  if (SameToken(header.substr(kBearer.size()), options_.token)) return true;
  Reply(res, 403, {{"error", "wrong bearer token: use the token in the server's --token-file"}});
  return false;
}

json ClusterServerImpl::JobsJson() const {
  json out = json::array();
  std::map<int64_t, ThroughputTable> tput = manager_.Throughputs();
  std::vector<int64_t> queue = manager_.QueueOrder();
  for (const JobRecord& j : manager_.Jobs()) {
    json o = ToJson(j);
    auto by_workers = [](const std::map<int, double>& table) {
      json rates = json::object();
      for (const auto& [n, r] : table) rates[std::to_string(n)] = r;
      return rates;
    };
    o["samples_per_s_by_workers"] = by_workers(tput[j.id].samples_per_s);
    o["profile_samples_per_s_by_workers"] = by_workers(tput[j.id].profile_samples_per_s);
    o["estimated_samples_per_s_by_workers"] = by_workers(tput[j.id].estimate);
    auto pos = std::find(queue.begin(), queue.end(), j.id);
    o["queue_position"] = pos == queue.end() ? -1 : static_cast<int>(pos - queue.begin());
    out.push_back(o);
  }
  return out;
}

json ClusterServerImpl::NodesJson() const {
  json out = json::array();
  std::vector<JobRecord> jobs = manager_.Jobs();
  for (const NodeRecord& n : manager_.Nodes()) {
    json o = ToJson(n);
    json allocs = json::array();
    for (const JobRecord& j : jobs) {
      for (const NodeSlots& s : j.placement) {
        if (s.node_id == n.id) allocs.push_back({{"job_id", j.id}, {"slots", s.slots}});
      }
    }
    o["allocations"] = allocs;
    out.push_back(o);
  }
  return out;
}

json ClusterServerImpl::StateJson() const {
  const ResizeCost cost = manager_.resize_cost();
  const PriorCalibration calibration = manager_.prior_calibration();
  json state = {{"policy", manager_.policy_name()}, {"rounds", manager_.rounds()},
                {"now", Env::Default().WallSeconds()}, {"nodes", NodesJson()}, {"jobs", JobsJson()},
                {"resize_cost", {{"seconds", cost.seconds}, {"measured", cost.measured},
                                 {"measured_seconds", cost.measured_seconds}}},
                {"prior_scale", {{"scale", calibration.scale}, {"measured", calibration.measured}}}};
  json allocs = json::array(), samples = json::object(), events = json::array();
  if (auto a = manager_.Allocations(); a.ok()) {
    for (const AllocationRecord& r : *a) allocs.push_back(ToJson(r));
  }
  for (const JobRecord& j : manager_.Jobs()) {
    json s = json::array();
    if (auto m = manager_.Samples(j.id); m.ok()) {
      for (const MetricSample& x : *m) s.push_back({x.step, x.loss, x.accuracy, x.samples_per_s, x.workers});
    }
    samples[std::to_string(j.id)] = s;
  }
  if (auto e = manager_.Events(0, 1 << 20); e.ok()) {
    size_t first = e->size() > 50 ? e->size() - 50 : 0;
    for (size_t i = first; i < e->size(); ++i) events.push_back(ToJson((*e)[i]));
  }
  state["allocations"] = allocs;
  state["samples"] = samples;  // job id -> [step, loss, accuracy, samples_per_s, workers]
  state["events"] = events;
  return state;
}

void ClusterServerImpl::ReadRoutes() {
  http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(DashboardHtml(), "text/html; charset=utf-8");
  });
  http_.Get("/api/health", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200, {{"ok", true}, {"policy", manager_.policy_name()}});
  });
  http_.Get("/api/state", [this](const httplib::Request&, httplib::Response& res) { Reply(res, 200, StateJson()); });
  http_.Get("/api/nodes", [this](const httplib::Request&, httplib::Response& res) { Reply(res, 200, NodesJson()); });
  http_.Get("/api/jobs", [this](const httplib::Request&, httplib::Response& res) { Reply(res, 200, JobsJson()); });
  http_.Get(R"(/api/jobs/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    Result<int64_t> id = JobId(req.matches[1]);
    if (!id.ok()) return ReplyError(res, id.status());
    Result<JobRecord> job = manager_.Job(*id);
    if (!job.ok()) return ReplyError(res, job.status());
    json o = ToJson(*job), samples = json::array();
    if (auto m = manager_.Samples(job->id); m.ok()) {
      for (const MetricSample& x : *m) samples.push_back(ToJson(x));
    }
    o["samples"] = samples;
    Reply(res, 200, o);
  });
  http_.Get("/api/events", [this](const httplib::Request& req, httplib::Response& res) {
    int64_t after = 0;
    int limit = 1000;
    try {
      if (req.has_param("after")) after = std::stoll(req.get_param_value("after"));
      if (req.has_param("limit")) limit = std::stoi(req.get_param_value("limit"));
    } catch (const std::exception&) {
      return Reply(res, 400, {{"error", "after and limit must be integers"}});
    }
    Result<std::vector<EventRecord>> events = manager_.Events(after, std::clamp(limit, 1, 100000));
    if (!events.ok()) return ReplyError(res, events.status());
    json out = json::array();
    for (const EventRecord& e : *events) out.push_back(ToJson(e));
    Reply(res, 200, out);
  });
}

void ClusterServerImpl::Routes() {
  ReadRoutes();
  http_.Post("/api/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    Result<json> body = ParseJson(req.body);
    if (!body.ok()) return ReplyError(res, body.status());
    Result<JobSubmission> sub = SubmissionFromJson(*body);
    if (!sub.ok()) return ReplyError(res, sub.status());
    Result<int64_t> id = manager_.Submit(*sub);
    if (!id.ok()) return ReplyError(res, id.status());
    Reply(res, 201, {{"id", *id}});
  });
  http_.Post(R"(/api/jobs/(.+)/cancel)", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    Result<int64_t> id = JobId(req.matches[1]);
    if (!id.ok()) return ReplyError(res, id.status());
    Status st = manager_.Cancel(*id);
    if (!st.ok()) return ReplyError(res, st);
    Reply(res, 200, {{"cancelled", true}});
  });
  http_.Post("/api/agent/heartbeat", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    Result<json> body = ParseJson(req.body);
    if (!body.ok()) return ReplyError(res, body.status());
    Result<AgentReport> report = ReportFromJson(*body);
    if (!report.ok()) return ReplyError(res, report.status());
    Result<AgentReply> reply = manager_.Heartbeat(*report);
    if (!reply.ok()) return ReplyError(res, reply.status());
    Reply(res, 200, ToJson(*reply));
  });
  ErrorAnswers();
}

// Every 4xx and 5xx carries {"error": "<one line>"}: the handlers' own, and
// for those httplib answers before any handler runs, a reason here.
void ClusterServerImpl::ErrorAnswers() {
  // A POST without Content-Length is read until the client closes, and a
  // chunked one without a size limit: refuse both before reading.
  http_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method != "POST") return httplib::Server::HandlerResponse::Unhandled;
    if (req.has_header("Transfer-Encoding") || !req.has_header("Content-Length")) {
      Reply(res, 411, {{"error", "a POST needs a Content-Length header and no Transfer-Encoding "
                                 "(an empty body is Content-Length: 0; curl: -d '')"}});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string why;
    switch (res.status) {
      case 400: why = "malformed HTTP request (request line, headers or body)"; break;
      case 404: why = "no such endpoint: " + req.method + " " + req.path + " (docs/guide/cluster.md, HTTP API)"; break;
      case 413: why = "request body over " + std::to_string(kMaxBodyBytes >> 20) + " MiB"; break;
      case 414: why = "request URI too long"; break;
      default: why = "HTTP " + std::to_string(res.status);
    }
    // The path came from the client: keep the message one printable line.
    for (char& c : why) {
      if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
    }
    Reply(res, res.status, {{"error", why.substr(0, 300)}});
  });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    Reply(res, 500, {{"error", what}});
  });
}

void ClusterServerImpl::TickLoop() {
  const auto interval = std::chrono::duration<double>(options_.tick_interval_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    Status st = manager_.Tick();
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = st;
  }
}

Status ClusterServerImpl::Bind() {
  Routes();
  http_.set_payload_max_length(kMaxBodyBytes);
  // Wider than httplib's default of 8, for 100 agents heartbeating at once
  // (bench/cluster/api_load.py).
  http_.new_task_queue = [] { return new httplib::ThreadPool(16); };
  http_.set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = sock;
  });
  port_ = options_.port == 0 ? http_.bind_to_any_port(options_.host) : options_.port;
  if (options_.port != 0 && !http_.bind_to_port(options_.host, options_.port)) port_ = -1;
  if (port_ <= 0) {
    return Status::Unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                               " (address in use or not local?)");
  }
  // Debian's cpp-httplib listens with a backlog of 5 (compiled into the
  // library): with one connection per request, 100 agents overflowed it,
  // and each dropped connection waited out TCP's 1 s retransmission (the
  // ~1 s maxima of bench/cluster/api_load.py; TcpExtListenOverflows counted
  // them). Listening again on the socket only raises the backlog.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  listener_ = std::thread([this] { http_.listen_after_bind(); });
  ticker_ = std::thread([this] { TickLoop(); });
  return Status::Ok();
}

void ClusterServerImpl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  http_.stop();
  if (listener_.joinable()) listener_.join();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace

Result<std::unique_ptr<ClusterServer>> ClusterServer::Start(ClusterManager& manager, ServerOptions options) {
  auto server = std::make_unique<ClusterServerImpl>(manager, std::move(options));
  FRUGAL_RETURN_IF_ERROR(server->Bind());
  return std::unique_ptr<ClusterServer>(std::move(server));
}

}  // namespace frugal::cluster
