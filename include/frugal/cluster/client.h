// ClusterClient: HTTP client of the cluster API, used by the agent and the
// `frugal cluster submit|jobs|...` commands. Every request has a connect and
// read timeout; an HTTP error comes back as a Status carrying the server's
// message (400 -> InvalidArgument, 401 -> InvalidArgument "unauthorized",
// 404 -> NotFound, no answer -> Unavailable).
//
// Thread safety: one client per thread.
#pragma once

#include <memory>
#include <string>

#include "frugal/cluster/types.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

class ClusterClient {
 public:
  virtual ~ClusterClient() = default;
  // `server`: "http://HOST:PORT" or "HOST:PORT". InvalidArgument if malformed.
  static Result<std::unique_ptr<ClusterClient>> Create(const std::string& server, const std::string& token,
                                                       double timeout_s);
  // The response body (JSON) of GET/POST `path`.
  virtual Result<std::string> Get(const std::string& path) = 0;
  virtual Result<std::string> Post(const std::string& path, const std::string& json_body) = 0;
  virtual Result<AgentReply> Heartbeat(const AgentReport& report) = 0;
  virtual Result<int64_t> Submit(const JobSubmission& job) = 0;
};

}  // namespace frugal::cluster
