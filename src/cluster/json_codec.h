// JSON forms of the cluster's value types, shared by the server, the agent
// and the client (internal; the wire format is documented in docs/guide/cluster.md).
// The From* functions validate: a missing or mistyped field is an
// InvalidArgument naming it, never an exception.
#pragma once

#include <nlohmann/json.hpp>

#include "frugal/cluster/types.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

nlohmann::json ToJson(const NodeRecord& n);
nlohmann::json ToJson(const JobRecord& j);
nlohmann::json ToJson(const AllocationRecord& a);
nlohmann::json ToJson(const EventRecord& e);
nlohmann::json ToJson(const MetricSample& m);
nlohmann::json ToJson(const TaskSpec& t);
nlohmann::json ToJson(const AgentReport& r);
nlohmann::json ToJson(const AgentReply& r);
nlohmann::json ToJson(const JobSubmission& s);

Result<JobSubmission> SubmissionFromJson(const nlohmann::json& j);
Result<AgentReport> ReportFromJson(const nlohmann::json& j);
Result<AgentReply> ReplyFromJson(const nlohmann::json& j);
// Parses text; InvalidArgument with the parser's message if it is not JSON.
Result<nlohmann::json> ParseJson(const std::string& text);

}  // namespace frugal::cluster
