#include "frugal/common/env.h"
#include "frugal/cluster/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "frugal/cluster/client.h"

namespace frugal::cluster {
namespace {

using nlohmann::json;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = StateStore::Open(":memory:");
    ASSERT_TRUE(store.ok());
    auto m = ClusterManager::Open(std::move(*store), NewRestartJobController(), Env::Default(), {});
    ASSERT_TRUE(m.ok());
    manager_ = std::move(*m);
    ServerOptions o;
    o.token = "s3cret";
    auto server = ClusterServer::Start(*manager_, o);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    http_->set_read_timeout(10, 0);
  }
  httplib::Headers Auth() const { return {{"Authorization", "Bearer s3cret"}}; }
  std::unique_ptr<ClusterManager> manager_;
  std::unique_ptr<ClusterServer> server_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(HttpServerTest, MutatingRequestsNeedTheToken) {
  const std::string job = R"({"config_toml": "model = \"mlp\"", "min_workers": 2, "max_workers": 4})";
  auto res = http_->Post("/api/jobs", job, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = http_->Post("/api/jobs", {{"Authorization", "Bearer wrong"}}, job, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  res = http_->Post("/api/agent/heartbeat", R"({"node": "x", "slots": 4})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = http_->Post("/api/jobs", Auth(), job, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201);
  EXPECT_EQ(json::parse(res->body)["id"], 1);
}

TEST_F(HttpServerTest, MalformedRequestsAre400AndTheServerKeepsRunning) {
  struct Case { const char* path; const char* body; const char* says; };
  for (const Case& c : {Case{"/api/jobs", "{not json", "malformed JSON"},
                        Case{"/api/jobs", R"({"min_workers": 2})", "config_toml"},
                        Case{"/api/jobs", R"({"config_toml": "", "min_workers": "two", "max_workers": 4})", "min_workers"},
                        Case{"/api/jobs", R"({"config_toml": "", "min_workers": 1, "max_workers": 4})", "min_workers must be >= 2"},
                        Case{"/api/agent/heartbeat", R"({"node": "", "slots": 4})", "node name"},
                        Case{"/api/agent/heartbeat", R"({"node": "a", "slots": 4, "exited": 7})", "'exited' must be an array"},
                        Case{"/api/agent/heartbeat", "[]", "object"}}) {
    SCOPED_TRACE(c.body);
    auto res = http_->Post(c.path, Auth(), c.body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    EXPECT_NE(json::parse(res->body)["error"].get<std::string>().find(c.says), std::string::npos) << res->body;
  }
  auto res = http_->Post("/api/jobs/42/cancel", Auth(), "", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = http_->Get("/api/events?after=abc");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = http_->Get("/api/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// The dashboard's page and its data endpoint, over HTTP: the page loads
// /api/state, which shows the agent's node, the running job with its
// placement, its samples and the allocation timeline.
TEST_F(HttpServerTest, DashboardAndItsStateEndpoint) {
  auto client = ClusterClient::Create("http://127.0.0.1:" + std::to_string(server_->port()), "s3cret", 10);
  ASSERT_TRUE(client.ok());
  auto id = (*client)->Submit({"dash", "model = \"mlp\"", 2, 4, 40, ""});
  ASSERT_TRUE(id.ok()) << id.status().message();
  AgentReport r;
  r.node = "host-a";
  r.slots = 4;
  ASSERT_TRUE((*client)->Heartbeat(r).ok());
  ASSERT_TRUE(manager_->RunRound().ok());
  // The first record spans the job's start: no rate (Note [Records that span a change]).
  r.samples = {{*id, 10, 0, 4, 256, 2.1, -1, 250}, {*id, 20, 0, 4, 256, 2.0, -1, 300},
               {*id, 20, 0, 4, 256, -1, 0.55, -1}};
  auto reply = (*client)->Heartbeat(r);
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply->tasks.size(), 1u);

  auto page = http_->Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("/api/state"), std::string::npos);
  auto res = http_->Get("/api/state");
  ASSERT_TRUE(res);
  json s = json::parse(res->body);
  ASSERT_EQ(s["nodes"].size(), 1u);
  EXPECT_EQ(s["nodes"][0]["allocations"][0]["job_id"], *id);
  EXPECT_EQ(s["nodes"][0]["allocations"][0]["slots"], 4);
  EXPECT_EQ(s["jobs"][0]["state"], "running");
  EXPECT_EQ(s["jobs"][0]["queue_position"], 0);
  EXPECT_DOUBLE_EQ(s["jobs"][0]["samples_per_s_by_workers"]["4"].get<double>(), 300);
  EXPECT_EQ(s["samples"][std::to_string(*id)].size(), 3u);
  EXPECT_EQ(s["allocations"].size(), 1u);
  auto cancelled = (*client)->Post("/api/jobs/" + std::to_string(*id) + "/cancel", "");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().message();
  EXPECT_TRUE((*client)->Heartbeat(r)->tasks.empty());
}

TEST(ClusterClientTest, BadAddressesAndASilentServerAreErrors) {
  EXPECT_FALSE(ClusterClient::Create("not a url", "", 1).ok());
  EXPECT_FALSE(ClusterClient::Create("127.0.0.1:99999", "", 1).ok());
  auto client = ClusterClient::Create("127.0.0.1:1", "", 1);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Get("/api/health").status().code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace frugal::cluster
