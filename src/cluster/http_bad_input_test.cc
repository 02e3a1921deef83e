// The cluster API under bad input, over a real server on loopback and raw
// sockets (so that requests httplib's client would refuse to send can be
// sent): each bad request is answered with its 4xx and a one-line JSON
// reason naming the problem, and good requests keep working afterwards.
// Every socket has send and receive timeouts, so no wait here is unbounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "frugal/common/env.h"
#include "frugal/cluster/http_server.h"

namespace frugal::cluster {
namespace {

using nlohmann::json;

constexpr char kToken[] = "s3cret";
constexpr int kWaitS = 10;  // Bound on every network wait of a test.

// A connected loopback socket with kWaitS send/receive timeouts; closed on destruction.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    timeval tv{kWaitS, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // Bounds connect() too.
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }

  bool Send(const std::string& bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // Everything until the server closes; nullopt if it did not within kWaitS.
  std::optional<std::string> ReadToClose() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return out;
      if (n < 0) return std::nullopt;  // The receive timeout.
      out.append(buf, static_cast<size_t>(n));
    }
  }

  // True once the server has closed its end (reads EOF or a reset), without waiting.
  bool ClosedByServer() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_;
  bool connected_ = false;
};

struct Answer {
  int status = 0;
  std::string body;
};

// Splits an HTTP/1.1 response into status and body; status 0 if it is not one.
Answer ParseAnswer(const std::string& raw) {
  Answer a;
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || raw.size() < 12) return a;
  a.status = std::stoi(raw.substr(9, 3));
  const size_t end = raw.find("\r\n\r\n");
  if (end != std::string::npos) a.body = raw.substr(end + 4);
  return a;
}

std::string Request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& extra_headers = "Authorization: Bearer s3cret\r\n") {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string Post(const std::string& path, const std::string& body) { return Request("POST", path, body); }
std::string Get(const std::string& path) { return Request("GET", path, "", ""); }
std::string Submission(const std::string& fields) {
  return R"({"config_toml": "model = \"mlp\"\n", "min_workers": 2, "max_workers": 4)" + fields + "}";
}

class HttpBadInputTest : public ::testing::Test {
 protected:
  void StartServer(double read_timeout_s) {
    auto store = StateStore::Open(":memory:");
    ASSERT_TRUE(store.ok());
    auto m = ClusterManager::Open(std::move(*store), NewRestartJobController(), Env::Default(), {});
    ASSERT_TRUE(m.ok());
    manager_ = std::move(*m);
    ServerOptions o;
    o.token = kToken;
    o.read_timeout_s = read_timeout_s;
    auto server = ClusterServer::Start(*manager_, o);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }

  Answer Exchange(const std::string& request) {
    RawConnection c(server_->port());
    if (!c.connected() || !c.Send(request)) return {};
    std::optional<std::string> raw = c.ReadToClose();
    return raw ? ParseAnswer(*raw) : Answer{};
  }

  // A good request of each kind still succeeds.
  void ExpectServing() {
    EXPECT_EQ(Exchange(Get("/api/health")).status, 200);
    Answer submitted = Exchange(Post("/api/jobs", Submission(R"(, "name": "good-job_1.a")")));
    EXPECT_EQ(submitted.status, 201) << submitted.body;
    Answer beat = Exchange(Post("/api/agent/heartbeat", R"({"node": "host-a", "slots": 2})"));
    EXPECT_EQ(beat.status, 200) << beat.body;
  }

  std::unique_ptr<ClusterManager> manager_;
  std::unique_ptr<ClusterServer> server_;
};

struct BadRequest {
  const char* what;
  std::string request;
  int status;
  const char* says;  // A part of the one-line reason.
};

std::vector<BadRequest> BadRequests() {
  const std::string no_token = "";
  return {
      {"oversized body", Post("/api/jobs", std::string(9 << 20, ' ')), 413, "over 8 MiB"},
      {"malformed JSON", Post("/api/jobs", "{\"config_toml\": "), 400, "malformed JSON"},
      {"JSON that is not an object", Post("/api/agent/heartbeat", "[1, 2]"), 400, "must be a JSON object, got an array"},
      {"JSON nested too deep", Post("/api/jobs", std::string(1000, '[') + std::string(1000, ']')), 400,
       "nested deeper than"},
      {"unknown field", Post("/api/jobs", Submission(R"(, "max_worker": 8)")), 400, "unknown field 'max_worker'"},
      {"unknown field with a line break", Post("/api/jobs", Submission(R"(, "a\nb": 1)")), 400, "unknown field 'a?b'"},
      {"unknown nested field", Post("/api/agent/heartbeat", R"({"node": "a", "slots": 1, "samples": [{"job_id": 1, "step": 1, "los": 2.0}]})"),
       400, "unknown field 'samples[0].los'"},
      {"string for an integer", Post("/api/jobs", R"({"config_toml": "", "min_workers": "two", "max_workers": 4})"), 400,
       "field 'min_workers' must be an integer, got a string"},
      {"fraction for an integer", Post("/api/jobs", R"({"config_toml": "", "min_workers": 2.5, "max_workers": 4})"), 400,
       "field 'min_workers' must be an integer, got a number"},
      {"integer out of range", Post("/api/jobs", R"({"config_toml": "", "min_workers": 2, "max_workers": 10000000000})"),
       400, "field 'max_workers' must be an integer in ["},
      {"boolean for an integer", Post("/api/agent/heartbeat", R"({"node": "a", "slots": true})"), 400,
       "field 'slots' must be an integer, got a boolean"},
      {"number for a string", Post("/api/jobs", Submission(R"(, "name": 7)")), 400, "field 'name' must be a string"},
      {"array of the wrong type", Post("/api/agent/heartbeat", R"({"node": "a", "slots": 1, "running": [1]})"), 400,
       "field 'running[0]' must be a string, got a number"},
      {"missing token", Request("POST", "/api/jobs", Submission(""), no_token), 401, "missing bearer token"},
      {"other scheme", Request("POST", "/api/jobs", Submission(""), "Authorization: Basic czNjcmV0\r\n"), 401,
       "missing bearer token"},
      {"wrong token", Request("POST", "/api/jobs", Submission(""), "Authorization: Bearer s3cres\r\n"), 403,
       "wrong bearer token"},
      {"token prefix", Request("POST", "/api/jobs", Submission(""), "Authorization: Bearer s3c\r\n"), 403,
       "wrong bearer token"},
      {"path traversal in a job name", Post("/api/jobs", Submission(R"(, "name": "../../etc/cron.d/x")")), 400,
       "job name must be"},
      {"slash in a job name", Post("/api/jobs", Submission(R"(, "name": "a/b")")), 400, "job name must be"},
      {"line break in a job name", Post("/api/jobs", Submission(R"(, "name": "a\nb")")), 400, "got 'a?b'"},
      {"flag as a job name", Post("/api/jobs", Submission(R"(, "name": "--help")")), 400, "job name must be"},
      {"over-long job name", Post("/api/jobs", Submission(R"(, "name": ")" + std::string(65, 'x') + "\"")), 400,
       "at most 64"},
      {"traversal as a job id", Get("/api/jobs/..%2F..%2Fetc%2Fpasswd"), 400, "job id is a decimal number"},
      {"job id too large", Get("/api/jobs/99999999999999999999999"), 400, "job id is a decimal number"},
      {"letters as a job id", Post("/api/jobs/abc/cancel", ""), 400, "job id is a decimal number"},
      {"unknown job", Post("/api/jobs/42/cancel", ""), 404, "42"},
      {"unknown endpoint", Get("/api/../../etc/passwd"), 404, "no such endpoint"},
      {"garbage request line", "HELLO\r\n\r\n", 400, "malformed HTTP request"},
      {"chunked body", "POST /api/jobs HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "2\r\n{}\r\n0\r\n\r\n",
       411, "Content-Length"},
      {"POST without Content-Length", "POST /api/jobs/1/cancel HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n\r\n", 411,
       "Content-Length"},
      {"query that is not a number", Get("/api/events?after=abc"), 400, "integers"},
  };
}

TEST_F(HttpBadInputTest, EachBadRequestIsA4xxWithAOneLineReasonAndTheServerKeepsServing) {
  StartServer(/*read_timeout_s=*/kWaitS);
  for (const BadRequest& c : BadRequests()) {
    SCOPED_TRACE(c.what);
    Answer a = Exchange(c.request);
    EXPECT_EQ(a.status, c.status) << a.body;
    EXPECT_EQ(a.body.find('\n'), std::string::npos) << "not one line: " << a.body;
    json body = json::parse(a.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_object() && body.contains("error") && body["error"].is_string()) {
      EXPECT_NE(body["error"].get<std::string>().find(c.says), std::string::npos) << a.body;
    } else {
      ADD_FAILURE() << "no {\"error\": reason} body: '" << a.body << "'";
    }
    EXPECT_EQ(Exchange(Get("/api/health")).status, 200);
  }
  ExpectServing();
  EXPECT_EQ(manager_->Jobs().size(), 1u) << "a bad submission was stored";
}

// A client that connects and sends nothing, or trickles a byte at a time,
// loses its connection once its read budget (read_timeout_s for the whole
// request) is spent, while others are served meanwhile.
TEST_F(HttpBadInputTest, SilentAndTricklingClientsAreDisconnected) {
  StartServer(/*read_timeout_s=*/0.5);
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < 20; ++i) {  // More than the server's 16 pool threads.
    silent.push_back(std::make_unique<RawConnection>(server_->port()));
    ASSERT_TRUE(silent.back()->connected());
  }
  RawConnection trickling(server_->port());
  ASSERT_TRUE(trickling.connected());
  ASSERT_TRUE(trickling.Send("GET /api/health HTTP/1.1\r\nX-Slow: "));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kWaitS);
  bool dropped = false;
  while (!dropped && std::chrono::steady_clock::now() < give_up) {
    // Each byte well inside httplib's per-read timeout of the same 0.5 s.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    dropped = !trickling.Send("a") || trickling.ClosedByServer();
  }
  EXPECT_TRUE(dropped) << "a client trickling a header for " << kWaitS << " s still held its connection";
  for (auto& c : silent) {
    std::optional<std::string> got = c->ReadToClose();
    ASSERT_TRUE(got.has_value()) << "a silent client held its connection for " << kWaitS << " s";
    EXPECT_EQ(*got, "");
  }
  ExpectServing();
}

}  // namespace
}  // namespace frugal::cluster
