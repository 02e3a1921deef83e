// libFuzzer target: the coordinator's request handling (MembershipServer,
// membership_server.cc and membership_forming.cc) driven without a network.
// A fresh server state gets a sequence of requests as if they arrived on its
// ROUTER socket, and after each one the serve loop's steps run (liveness,
// forming a generation, the end of the job). Replies go to an unbound ROUTER,
// which drops them. The state must stay consistent: the generation never
// goes back, a failed job stays failed, the first world never holds more
// registrations than its size, and the members of a generation have
// distinct ranks.
//
// Input: world size, min workers and a timing byte (heartbeat timeout and
// round timeout either 0, so that every member is lost at once, or an
// hour), then requests, one per line: a client byte (its routing id), then
// the JSON frame.
#include <chrono>
#include <set>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "fuzz_input.h"
#include "membership/membership_server_impl.h"

namespace {

using frugal::comm::Member;
using frugal::comm::MembershipServer;

void CheckState(const MembershipServer::Impl& s, int64_t generation_before, bool failed_before) {
  FRUGAL_FUZZ_CHECK(s.generation >= generation_before);
  FRUGAL_FUZZ_CHECK(!failed_before || !s.failed.ok());
  if (s.generation == 0) FRUGAL_FUZZ_CHECK(static_cast<int>(s.regs.size()) <= s.options.world_size);
  std::set<int> ranks;
  for (const Member& m : s.members) {
    FRUGAL_FUZZ_CHECK(m.info.rank >= 0 && m.info.rank <= 65535);
    // Members asked to leave stay listed (to say done) with their old rank.
    if (!m.leaving) FRUGAL_FUZZ_CHECK(ranks.insert(m.info.rank).second);
  }
  FRUGAL_FUZZ_CHECK(s.pending == 0 || s.pending > s.generation);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const int world = 1 + in.Byte() % 4;
  const int min_workers = 1 + in.Byte() % world;
  const uint8_t timing = in.Byte();
  MembershipServer::Impl s;
  s.options.world_size = world;
  s.options.min_workers = min_workers;
  s.options.heartbeat_timeout = std::chrono::milliseconds((timing & 1) ? 0 : 3600000);
  s.options.timeout = std::chrono::milliseconds((timing & 2) ? 0 : 3600000);
  s.options.log = [](const std::string&) {};
  s.options.zmq.log = [](const std::string&) {};
  s.endpoint = "tcp://fuzz:1";
  // One ROUTER for the whole run, lent to each server state: a socket of
  // the state's own context would start and join ZeroMQ's threads for every
  // input (100 inputs/s instead of thousands).
  static zmq::context_t context(1);
  static zmq::socket_t router = [] {
    zmq::socket_t r(context, zmq::socket_type::router);
    r.set(zmq::sockopt::linger, 0);
    return r;
  }();
  std::swap(s.router, router);
  s.forming_deadline = std::chrono::steady_clock::now() + s.options.timeout;

  const std::string rest = in.RestAsString();
  size_t pos = 0;
  int requests = 0;
  while (pos < rest.size() && requests++ < 64) {
    size_t end = rest.find('\n', pos);
    if (end == std::string::npos) end = rest.size();
    const std::string line = rest.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    std::vector<zmq::message_t> parts;
    const std::string routing = "client-" + std::to_string(static_cast<uint8_t>(line[0]) % 8);
    parts.emplace_back(routing.data(), routing.size());
    parts.emplace_back(line.data() + 1, line.size() - 1);
    const int64_t generation_before = s.generation;
    const bool failed_before = !s.failed.ok();
    s.Handle(parts);
    CheckState(s, generation_before, failed_before);
    if (!s.failed.ok()) continue;  // Serve only answers from here on.
    s.CheckLiveness();
    CheckState(s, generation_before, failed_before);
    if (!s.failed.ok()) continue;
    s.TryForm();
    CheckState(s, generation_before, failed_before);
    (void)s.Over();
  }
  std::swap(s.router, router);
  return 0;
}
