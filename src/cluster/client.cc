#include "frugal/cluster/client.h"

#include <httplib.h>

#include <regex>

#include "json_codec.h"

namespace frugal::cluster {
namespace {

class HttpClusterClient final : public ClusterClient {
 public:
  HttpClusterClient(const std::string& host, int port, std::string token, double timeout_s)
      : http_(host, port), token_(std::move(token)), where_(host + ":" + std::to_string(port)) {
    const long s = static_cast<long>(timeout_s);
    const long us = static_cast<long>((timeout_s - s) * 1e6);
    http_.set_connection_timeout(s, us);
    http_.set_read_timeout(s, us);
    http_.set_write_timeout(s, us);
  }

  Result<std::string> Get(const std::string& path) override { return Finish(http_.Get(path.c_str(), Headers())); }
  Result<std::string> Post(const std::string& path, const std::string& body) override {
    return Finish(http_.Post(path.c_str(), Headers(), body, "application/json"));
  }

  Result<AgentReply> Heartbeat(const AgentReport& report) override {
    FRUGAL_ASSIGN_OR_RETURN(std::string body, Post("/api/agent/heartbeat", ToJson(report).dump()));
    FRUGAL_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(body));
    return ReplyFromJson(j);
  }

  Result<int64_t> Submit(const JobSubmission& job) override {
    FRUGAL_ASSIGN_OR_RETURN(std::string body, Post("/api/jobs", ToJson(job).dump()));
    FRUGAL_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(body));
    if (!j.contains("id") || !j["id"].is_number_integer()) return Status::Internal("server answered without a job id");
    return j["id"].get<int64_t>();
  }

 private:
  httplib::Headers Headers() const {
    httplib::Headers h;
    if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
    return h;
  }

  Result<std::string> Finish(const httplib::Result& res) {
    if (!res) {
      return Status::Unavailable("cluster server " + where_ + " did not answer (" + httplib::to_string(res.error()) + ")");
    }
    if (res->status >= 200 && res->status < 300) return res->body;
    std::string msg = res->body;
    Result<nlohmann::json> j = ParseJson(res->body);
    if (j.ok() && j->is_object() && j->contains("error") && (*j)["error"].is_string()) msg = (*j)["error"];
    switch (res->status) {
      case 400: return Status::InvalidArgument(msg);
      case 401:
      case 403: return Status::InvalidArgument("unauthorized: " + msg);
      case 404: return Status::NotFound(msg);
      default: return Status::Internal("server answered " + std::to_string(res->status) + ": " + msg);
    }
  }

  httplib::Client http_;
  std::string token_;
  std::string where_;
};

}  // namespace

Result<std::unique_ptr<ClusterClient>> ClusterClient::Create(const std::string& server, const std::string& token,
                                                             double timeout_s) {
  static const std::regex kUrl(R"(^(?:http://)?([A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})/?$)");
  std::smatch m;
  if (!std::regex_match(server, m, kUrl)) {
    return Status::InvalidArgument("--server must be http://HOST:PORT or HOST:PORT, got '" + server + "'");
  }
  int port = std::stoi(m[2]);
  if (port < 1 || port > 65535) return Status::InvalidArgument("--server port must be in [1, 65535], got " + m[2].str());
  if (!(timeout_s > 0) || timeout_s > 3600) return Status::InvalidArgument("client timeout must be in (0, 3600] s");
  return std::unique_ptr<ClusterClient>(new HttpClusterClient(m[1], port, token, timeout_s));
}

}  // namespace frugal::cluster
