// The membership service with real sockets on loopback, in one process:
// the coordinator in a thread, clients as the workers' side.
#include "frugal/comm/membership/membership.h"

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

namespace frugal::comm {
namespace {

using namespace std::chrono_literals;

struct Coordinator {
  std::unique_ptr<MembershipServer> server;
  std::future<Status> served;
  std::mutex log_mu;
  std::vector<std::string> log;  // GUARDED_BY(log_mu)

  std::string LostLine() {
    std::lock_guard<std::mutex> lock(log_mu);
    for (const std::string& l : log) {
      if (l.find(" lost: ") != std::string::npos) return l;
    }
    return "";
  }

  explicit Coordinator(int world, int min_workers = 1, std::chrono::milliseconds heartbeat_timeout = 1000ms,
                       const std::string& address = "tcp://127.0.0.1:*",
                       std::chrono::milliseconds link_grace = 30s) {
    MembershipOptions o;
    o.world_size = world;
    o.min_workers = min_workers;
    o.heartbeat_timeout = heartbeat_timeout;
    o.link_grace = link_grace;
    o.timeout = 20s;
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mu);
      log.push_back(line);
    };
    auto s = MembershipServer::Bind(address, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server = std::move(*s);
    served = std::async(std::launch::async, [this] { return server->Serve(); });
  }
  ~Coordinator() {
    server->Shutdown();
    if (served.valid()) served.wait();
  }
  nlohmann::json StatusJson() const {
    auto r = MembershipRequest(server->endpoint(), R"({"op":"status"})", 5s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return nlohmann::json::parse(r.ok() ? *r : "{}");
  }
};

std::unique_ptr<MembershipClient> NewClient(const std::string& server, bool join = false, int max_world = 0) {
  MembershipClientOptions o;
  o.server = server;
  o.join = join;
  o.max_world = max_world;
  o.heartbeat_interval = 50ms;
  o.timeout = 20s;
  auto c = MembershipClient::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

// Registers `clients` concurrently with the given snapshots; returns their generations.
std::vector<Generation> RegisterAll(std::vector<MembershipClient*> clients, std::vector<std::vector<int64_t>> snaps,
                                    std::vector<std::unique_ptr<Transport>>* transports) {
  transports->resize(clients.size());
  std::vector<std::future<Result<Generation>>> futures;
  for (size_t i = 0; i < clients.size(); ++i) {
    futures.push_back(std::async(std::launch::async,
                                 [&, i] { return clients[i]->Register(snaps[i], &(*transports)[i]); }));
  }
  std::vector<Generation> out;
  for (auto& f : futures) {
    Result<Generation> g = f.get();
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    out.push_back(g.ok() ? *g : Generation{});
  }
  return out;
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(MembershipTest, FirstGenerationThenAJoinerGetsTheNewestCommonSnapshot) {
  Coordinator co(2);
  auto a = NewClient(co.server->endpoint());
  auto b = NewClient(co.server->endpoint());
  std::vector<std::unique_ptr<Transport>> t1;
  auto g1 = RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  EXPECT_EQ(g1[0].number, 1);
  EXPECT_EQ(g1[0].restore, -1);
  EXPECT_EQ(t1[0]->world_size(), 2);
  EXPECT_NE(g1[0].rank, g1[1].rank);

  // A joiner asks; the members learn a generation is pending and register
  // with their snapshots; the restore point is the newest they share.
  auto c = NewClient(co.server->endpoint(), /*join=*/true);
  std::unique_ptr<Transport> tc;
  auto joined = std::async(std::launch::async, [&] { return c->Register({}, &tc); });
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2 && b->pending() == 2; }));
  t1.clear();
  std::vector<std::unique_ptr<Transport>> t2;
  auto g2 = RegisterAll({a.get(), b.get()}, {{10, 20}, {20, 30}}, &t2);
  Result<Generation> gc = joined.get();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  for (const Generation& g : {g2[0], g2[1], *gc}) {
    EXPECT_EQ(g.number, 2);
    EXPECT_EQ(g.restore, 20);
    EXPECT_EQ(g.joined, std::vector<int>{2});
    EXPECT_EQ(g.peers.size(), 3u);
  }
  EXPECT_EQ(gc->rank, 2);  // joiners come after the survivors
  EXPECT_EQ(co.StatusJson()["generation"], 2);

  // The joiner's first world fails before it holds any state (a peer died
  // while the state was sent) and a fourth worker asks to join: c registers
  // again with no snapshots and is served as a joiner instead of emptying
  // the common snapshot.
  auto d = NewClient(co.server->endpoint(), /*join=*/true);
  std::unique_ptr<Transport> td;
  auto d_joined = std::async(std::launch::async, [&] { return d->Register({}, &td); });
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 3 && c->pending() == 3; }));
  t2.clear();
  tc.reset();
  std::vector<std::unique_ptr<Transport>> t3;
  auto g3 = RegisterAll({a.get(), b.get(), c.get()}, {{20, 25}, {25}, {}}, &t3);
  ASSERT_TRUE(d_joined.get().ok());
  EXPECT_EQ(g3[0].number, 3);
  EXPECT_EQ(g3[0].restore, 25);
  EXPECT_EQ(g3[0].peers.size(), 4u);
  EXPECT_EQ(g3[0].joined, (std::vector<int>{2, 3}));
  EXPECT_GE(g3[2].rank, 2);  // after the holders of state
}

// A joiner whose run allows at most 2 workers (--global-batch 2) is refused
// with an error naming the limit, and the running world is not disturbed;
// one that allows 3 is taken.
TEST(MembershipTest, AJoinBeyondTheJoinersWorldLimitIsRefusedAndTheJobGoesOn) {
  Coordinator co(2);
  auto a = NewClient(co.server->endpoint());
  auto b = NewClient(co.server->endpoint());
  std::vector<std::unique_ptr<Transport>> t1;
  auto g1 = RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  ASSERT_EQ(g1[0].number, 1);
  auto c = NewClient(co.server->endpoint(), /*join=*/true, /*max_world=*/2);
  std::unique_ptr<Transport> tc;
  Result<Generation> refused = c->Register({}, &tc);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--global-batch"), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("3 workers"), std::string::npos) << refused.status().ToString();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(a->pending(), 0);
  EXPECT_EQ(co.StatusJson()["generation"], 1);

  auto d = NewClient(co.server->endpoint(), /*join=*/true, /*max_world=*/3);
  std::unique_ptr<Transport> td;
  auto joined = std::async(std::launch::async, [&] { return d->Register({}, &td); });
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2 && b->pending() == 2; }));
  t1.clear();
  std::vector<std::unique_ptr<Transport>> t2;
  auto g2 = RegisterAll({a.get(), b.get()}, {{5}, {5}}, &t2);
  ASSERT_TRUE(joined.get().ok());
  EXPECT_EQ(g2[0].peers.size(), 3u);
}

// A join that arrives as the members finish is told the job has finished,
// and the job ends well (it used to fail: no member held the state).
TEST(MembershipTest, AJoinAtTheEndIsToldTheJobFinishedAndTheJobSucceeds) {
  Coordinator co(2);
  auto a = NewClient(co.server->endpoint());
  auto b = NewClient(co.server->endpoint());
  std::vector<std::unique_ptr<Transport>> t1;
  RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  auto c = NewClient(co.server->endpoint(), /*join=*/true);
  std::unique_ptr<Transport> tc;
  auto joined = std::async(std::launch::async, [&] { return c->Register({}, &tc); });
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2; }));
  a->Done();
  b->Done();
  Result<Generation> g = joined.get();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("finished"), std::string::npos) << g.status().ToString();
  c.reset();
  ASSERT_EQ(co.served.wait_for(10s), std::future_status::ready);
  Status served = co.served.get();
  EXPECT_TRUE(served.ok()) << served.ToString();
}

// Three members form generation 1 on a coordinator with heartbeat_timeout;
// `lose` makes the third one lost (its process dies, or it withdraws). The
// first two must be told to abort within `limit`, the coordinator's lost
// line must contain `why`, and they form generation 2 from their snapshots
// `snaps`, which is returned with its world size.
using Clients = std::vector<std::unique_ptr<MembershipClient>>;
using Transports = std::vector<std::unique_ptr<Transport>>;
std::pair<Generation, int> LoseTheThird(std::chrono::milliseconds heartbeat_timeout,
                                        const std::function<void(Clients&, Transports&)>& lose, const std::string& why,
                                        std::vector<std::vector<int64_t>> snaps, std::chrono::milliseconds limit) {
  Coordinator co(3, /*min_workers=*/2, heartbeat_timeout);
  Clients cs;
  for (int i = 0; i < 3; ++i) cs.push_back(NewClient(co.server->endpoint()));
  Transports t1;
  RegisterAll({cs[0].get(), cs[1].get(), cs[2].get()}, {{}, {}, {}}, &t1);
  std::atomic<int> aborts{0};
  cs[0]->OnAbort([&](const Status&) { ++aborts; });
  lose(cs, t1);
  EXPECT_TRUE(WaitFor([&] { return aborts.load() == 1 && cs[1]->pending() == 2; }, limit));
  EXPECT_NE(co.LostLine().find(why), std::string::npos) << co.LostLine();
  t1.clear();
  Transports t2;
  auto g2 = RegisterAll({cs[0].get(), cs[1].get()}, std::move(snaps), &t2);
  return {g2[0], t2[0] != nullptr ? t2[0]->world_size() : 0};
}

TEST(MembershipTest, ASilentMemberIsLostAndTheOthersAreToldToAbort) {
  auto [g2, world] = LoseTheThird(300ms, [](Clients& cs, Transports& t1) {
    cs[2].reset();  // the process dies: its heartbeats stop and its port is closed
    t1[2].reset();
  }, "refuses connections", {{5, 10}, {5}}, 10s);
  EXPECT_EQ(g2.number, 2);
  EXPECT_EQ(g2.restore, 5);  // the newest snapshot both survivors hold
  EXPECT_TRUE(g2.joined.empty());
  EXPECT_EQ(world, 2);
}

// Note [Silent members]: after a survivor's failed wait ("probe"), a dead
// member is probed once it misses a heartbeat and lost at once, although
// the heartbeat timeout is 30 s; the live ones, also suspects, are kept.
TEST(MembershipTest, AProbeAfterAFailedWaitFindsTheDeadMemberBeforeTheHeartbeatTimeout) {
  auto [g2, world] = LoseTheThird(30s, [](Clients& cs, Transports& t1) {
    cs[2].reset();  // the process dies
    t1[2].reset();
    cs[0]->AskToProbe();
  }, "refuses connections", {{5}, {5}}, 5s);
  EXPECT_EQ(g2.number, 2);
  EXPECT_EQ(world, 2);  // the two live suspects stayed
}

// Note [Silent members]: a live member that has closed its generation's
// listener (on its way to the next one) but still heartbeats is kept when a
// probe finds its port refused: it has missed no heartbeat.
TEST(MembershipTest, AProbedMemberThatStillHeartbeatsIsKeptThoughItsPortIsClosed) {
  Coordinator co(3, /*min_workers=*/2, 30s);
  Clients cs;
  for (int i = 0; i < 3; ++i) cs.push_back(NewClient(co.server->endpoint()));
  Transports t1;
  RegisterAll({cs[0].get(), cs[1].get(), cs[2].get()}, {{}, {}, {}}, &t1);
  t1[1].reset();  // its port is closed; its client heartbeats on
  for (int i = 0; i < 6; ++i) {
    cs[0]->AskToProbe();
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_EQ(co.LostLine(), "");
  EXPECT_EQ(cs[2]->pending(), 0) << "no member was lost, so no generation is pending";
}

// A member that withdraws (a script rolled back past the end of its loop)
// is lost at once, long before any heartbeat timeout, although its process
// and heartbeats go on; the others abort and form the next generation.
TEST(MembershipTest, AWithdrawnMemberIsLostAtOnceAndTheOthersAreToldToAbort) {
  auto [g2, world] = LoseTheThird(30s, [](Clients& cs, Transports&) { cs[2]->Withdraw(); }, "it withdrew",
                                  {{5}, {5}}, 5s);
  EXPECT_EQ(g2.number, 2);
  EXPECT_EQ(world, 2);
}

// Note [Silent members]: a member whose heartbeats stop while its host
// still accepts connections to its port (as behind a link that lost only
// some traffic) is not declared dead at the heartbeat timeout but at the
// link grace; the log says which.
TEST(MembershipTest, ASilentMemberWhoseHostAnswersIsKeptForTheLinkGrace) {
  Coordinator co(2, /*min_workers=*/1, /*heartbeat_timeout=*/200ms, "tcp://127.0.0.1:*", /*link_grace=*/1500ms);
  auto a = NewClient(co.server->endpoint());
  auto b = NewClient(co.server->endpoint());
  std::vector<std::unique_ptr<Transport>> t1;
  RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  b.reset();  // heartbeats stop; its transport still listens
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2; }));
  EXPECT_NE(co.LostLine().find("no heartbeat for the link grace of 1500 ms"), std::string::npos) << co.LostLine();
}

TEST(MembershipTest, FewerThanMinWorkersFailsTheJobWithAClearError) {
  Coordinator co(2, /*min_workers=*/2, /*heartbeat_timeout=*/300ms);
  auto a = NewClient(co.server->endpoint());
  auto b = NewClient(co.server->endpoint());
  std::vector<std::unique_ptr<Transport>> t1;
  RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  b.reset();
  t1[1].reset();
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2; }));
  std::unique_ptr<Transport> t;
  Result<Generation> g = a->Register({3}, &t);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("fewer than --min-workers 2"), std::string::npos) << g.status().ToString();
  co.served.wait();
  EXPECT_FALSE(co.served.get().ok());
}

TEST(MembershipTest, ResizeAsksTheHighestRanksToLeaveAndControlErrorsAreClear) {
  Coordinator co(3);
  std::vector<std::unique_ptr<MembershipClient>> cs;
  for (int i = 0; i < 3; ++i) cs.push_back(NewClient(co.server->endpoint()));
  std::vector<std::unique_ptr<Transport>> t1;
  auto g1 = RegisterAll({cs[0].get(), cs[1].get(), cs[2].get()}, {{}, {}, {}}, &t1);
  auto bad = MembershipRequest(co.server->endpoint(), R"({"op":"resize","workers":0})", 5s);
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->find("--min-workers"), std::string::npos) << *bad;
  auto unknown = MembershipRequest(co.server->endpoint(), R"({"op":"dance"})", 5s);
  ASSERT_TRUE(unknown.ok());
  EXPECT_NE(unknown->find("unknown op"), std::string::npos) << *unknown;
  auto ok = MembershipRequest(co.server->endpoint(), R"({"op":"resize","workers":2})", 5s);
  ASSERT_TRUE(ok.ok());
  int leaver = -1;
  for (int i = 0; i < 3; ++i) {
    if (g1[i].rank == 2) leaver = i;
  }
  ASSERT_TRUE(WaitFor([&] { return cs[leaver]->leave_requested(); }));
  for (int i = 0; i < 3; ++i) {
    if (i != leaver) {
      EXPECT_FALSE(cs[i]->leave_requested());
    }
  }
  // The leaver's registration is refused as "left"; the others form g2.
  t1.clear();
  std::unique_ptr<Transport> tl;
  EXPECT_EQ(cs[leaver]->Register({7}, &tl).status().code(), Status::Code::kNotFound);
  cs[leaver]->Done();
  std::vector<MembershipClient*> stay;
  for (int i = 0; i < 3; ++i) {
    if (i != leaver) stay.push_back(cs[i].get());
  }
  std::vector<std::unique_ptr<Transport>> t2;
  auto g2 = RegisterAll(stay, {{7}, {7}}, &t2);
  EXPECT_EQ(g2[0].number, 2);
  EXPECT_EQ(g2[0].peers.size(), 2u);
  EXPECT_EQ(g2[0].restore, 7);
}

}  // namespace
}  // namespace frugal::comm

namespace frugal::comm {
namespace {

// Requests with fields of the wrong type or out of range get an error
// reply; the coordinator keeps serving (no exception reaches its loop).
TEST(MembershipTest, MalformedRequestsAreAnsweredWithErrorsAndTheServerGoesOn) {
  Coordinator co(2);
  const std::string ep = co.server->endpoint();
  for (const char* bad : {R"({"op":"register","id":"x","endpoint":"tcp://127.0.0.1:1","cluster":"a","join":5})",
                          R"({"op":"register","id":7,"endpoint":"tcp://127.0.0.1:1","cluster":"a"})",
                          R"({"op":"register","id":"x","endpoint":"e","cluster":"a","snapshots":[1e300]})",
                          R"({"op":"resize","workers":1e300})", R"({"op":"resize","workers":-3})",
                          R"({"op":5})", R"([1,2,3])", R"(not json)", R"({"op":"heartbeat","id":[],"iteration":1e300})",
                          R"({"op":"done","id":{"a":1}})"}) {
    auto r = MembershipRequest(ep, bad, 5s);
    ASSERT_TRUE(r.ok()) << bad << ": " << r.status().ToString();
    EXPECT_NE(r->find("error"), std::string::npos) << bad << " -> " << *r;
  }
  EXPECT_EQ(co.StatusJson()["generation"], 0);  // still serving, nobody admitted
}

}  // namespace
}  // namespace frugal::comm

namespace frugal::comm {
namespace {

// Note [Coordinator restart]: a coordinator restarted on the same address
// adopts the running generation from the members' heartbeats and serves
// changes as before.
TEST(MembershipTest, ARestartedCoordinatorRecoversTheMembershipFromHeartbeats) {
  auto first = std::make_unique<Coordinator>(2);
  const std::string ep = first->server->endpoint();
  auto a = NewClient(ep);
  auto b = NewClient(ep);
  std::vector<std::unique_ptr<Transport>> t1;
  RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  first.reset();  // the coordinator dies; the workers keep their world
  Coordinator second(2, 1, 1000ms, ep);
  ASSERT_TRUE(WaitFor([&] {
    auto s = second.StatusJson();
    return s["generation"] == 1 && s["members"].size() == 2 && s["recovering"] == false;
  }));
  // It serves a change: b leaves, a registers again alone.
  ASSERT_TRUE(b->RequestLeave().ok());
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2; }));
  t1.clear();
  std::unique_ptr<Transport> t;
  Result<Generation> g = a->Register({40}, &t);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->number, 2);
  EXPECT_EQ(g->restore, 40);
  EXPECT_EQ(t->world_size(), 1);
}

// After a join (generation 2 of three workers) the coordinator dies and a
// new one starts on its address: it reports generation 2 with the same
// members in the same ranks, and a further join forms generation 3 with
// the survivors first and the joiner last, as if it had never died.
TEST(MembershipTest, ARestartedCoordinatorKnowsTheGenerationAndServesAJoin) {
  auto first = std::make_unique<Coordinator>(2);
  const std::string ep = first->server->endpoint();
  auto a = NewClient(ep);
  auto b = NewClient(ep);
  auto c = NewClient(ep, /*join=*/true);
  std::vector<std::unique_ptr<Transport>> t1;
  RegisterAll({a.get(), b.get()}, {{}, {}}, &t1);
  std::unique_ptr<Transport> tc;
  auto c_joined = std::async(std::launch::async, [&] { return c->Register({}, &tc); });
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 2 && b->pending() == 2; }));
  t1.clear();
  std::vector<std::unique_ptr<Transport>> t2;
  auto g2 = RegisterAll({a.get(), b.get()}, {{10}, {10}}, &t2);
  Result<Generation> gc = c_joined.get();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  ASSERT_EQ(g2[0].number, 2);
  const std::vector<PeerInfo> table = g2[0].peers;
  const std::vector<std::string> ids = {g2[0].rank == 0 ? a->id() : b->id(), g2[0].rank == 0 ? b->id() : a->id(),
                                        c->id()};
  a->ReportIteration(17);

  first.reset();
  Coordinator second(2, 1, 1000ms, ep);
  nlohmann::json s;
  ASSERT_TRUE(WaitFor([&] {
    s = second.StatusJson();
    return s["recovering"] == false && s["generation"] == 2 && s["members"].size() == 3;
  })) << s.dump();
  EXPECT_EQ(s["pending"], 0);
  for (int r = 0; r < 3; ++r) {
    const nlohmann::json& m = s["members"][r];
    EXPECT_EQ(m["rank"], r);
    EXPECT_EQ(m["id"], ids[r]);
    EXPECT_EQ(m["endpoint"], table[r].endpoint);
    EXPECT_EQ(m["cluster"], table[r].cluster);
    EXPECT_EQ(m["state"], "running");
    if (m["id"] == a->id()) {
      EXPECT_EQ(m["iteration"], 17);
    }
  }

  auto d = NewClient(ep, /*join=*/true);
  std::unique_ptr<Transport> td;
  auto d_joined = std::async(std::launch::async, [&] { return d->Register({}, &td); });
  ASSERT_TRUE(WaitFor([&] { return a->pending() == 3 && b->pending() == 3 && c->pending() == 3; }));
  t2.clear();
  tc.reset();
  std::vector<std::unique_ptr<Transport>> t3;
  auto g3 = RegisterAll({a.get(), b.get(), c.get()}, {{10, 20}, {20}, {20}}, &t3);
  Result<Generation> gd = d_joined.get();
  ASSERT_TRUE(gd.ok()) << gd.status().ToString();
  for (const Generation& g : {g3[0], g3[1], g3[2], *gd}) {
    EXPECT_EQ(g.number, 3);
    EXPECT_EQ(g.restore, 20);
    EXPECT_EQ(g.joined, std::vector<int>{3});
    EXPECT_EQ(g.peers.size(), 4u);
  }
  EXPECT_EQ(g3[0].rank, g2[0].rank);  // survivors keep their rank order
  EXPECT_EQ(g3[2].rank, 2);
  EXPECT_EQ(gd->rank, 3);
  EXPECT_EQ(t3[0]->world_size(), 4);
}

// A worker that dies while no coordinator is up is never heard by the new
// one: once the recovery's wait ends, its rank is lost, the survivors are
// told to abort, and they form the next generation without it.
TEST(MembershipTest, ARankNotHeardAfterARestartIsLostAndTheSurvivorsGoOn) {
  auto first = std::make_unique<Coordinator>(3, /*min_workers=*/2, /*heartbeat_timeout=*/300ms);
  const std::string ep = first->server->endpoint();
  std::vector<std::unique_ptr<MembershipClient>> cs;
  for (int i = 0; i < 3; ++i) cs.push_back(NewClient(ep));
  std::vector<std::unique_ptr<Transport>> t1;
  auto g1 = RegisterAll({cs[0].get(), cs[1].get(), cs[2].get()}, {{}, {}, {}}, &t1);
  std::atomic<int> aborts{0};
  cs[0]->OnAbort([&](const Status&) { ++aborts; });
  first.reset();
  cs[2].reset();  // dies while no coordinator is up
  Coordinator second(3, /*min_workers=*/2, /*heartbeat_timeout=*/300ms, ep);
  ASSERT_TRUE(WaitFor([&] { return aborts.load() == 1 && cs[1]->pending() == 2; }));
  nlohmann::json s = second.StatusJson();
  EXPECT_EQ(s["recovering"], false);
  ASSERT_EQ(s["members"].size(), 3u);
  EXPECT_EQ(s["members"][g1[2].rank]["state"], "lost");
  t1.clear();
  std::vector<std::unique_ptr<Transport>> t2;
  auto g2 = RegisterAll({cs[0].get(), cs[1].get()}, {{5, 10}, {5}}, &t2);
  EXPECT_EQ(g2[0].number, 2);
  EXPECT_EQ(g2[0].restore, 5);
  EXPECT_TRUE(g2[0].joined.empty());
  EXPECT_EQ(t2[0]->world_size(), 2);
}

// The recovery over the wire: a heartbeat that names its generation's size
// starts it, a malformed or foreign one is refused with an error, a
// registration that arrives meanwhile waits, and the last rank heard ends it.
TEST(MembershipTest, RecoveryAdoptsWellFormedHeartbeatsOfOneGenerationOnly) {
  Coordinator co(2, 1, 60s);  // the recovery's wait never ends by itself here
  const std::string ep = co.server->endpoint();
  auto send = [&](const std::string& frame) {
    auto r = MembershipRequest(ep, frame, 5s);
    EXPECT_TRUE(r.ok()) << frame << ": " << r.status().ToString();
    return nlohmann::json::parse(r.ok() ? *r : "{}");
  };
  auto beat = [](const std::string& id, int generation, int rank, const std::string& world) {
    return R"({"op":"heartbeat","id":")" + id + R"(","generation":)" + std::to_string(generation) +
           R"(,"iteration":9,"member":{"rank":)" + std::to_string(rank) +
           R"(,"endpoint":"tcp://127.0.0.1:1","cluster":"a","world":)" + world + "}}";
  };
  for (const std::string& bad : {beat("x", 4, 3, "3"), beat("x", 4, 0, "0"), beat("x", 4, 0, "1e300"),
                                 beat("x", 0, 0, "3"), std::string(R"({"op":"heartbeat","id":"x","member":7})")}) {
    EXPECT_TRUE(send(bad).contains("error")) << bad;
  }
  EXPECT_EQ(co.StatusJson()["generation"], 0);

  EXPECT_EQ(send(beat("w0", 4, 0, "3"))["generation"], 4);
  EXPECT_TRUE(send(beat("w9", 5, 1, "3")).contains("error"));  // another generation
  EXPECT_TRUE(send(beat("w9", 4, 0, "3")).contains("error"));  // a rank taken
  EXPECT_TRUE(send(beat("w9", 4, 1, "2")).contains("error"));  // another size
  EXPECT_EQ(send(beat("w2", 4, 2, "3"))["generation"], 4);
  // A join that arrives now waits (its request gives up after 2 s; the
  // server's state is what is checked).
  auto joined = std::async(std::launch::async, [&] {
    return MembershipRequest(ep, R"({"op":"register","id":"j","endpoint":"tcp://127.0.0.1:2","cluster":"a","join":true})",
                             2s);
  });
  nlohmann::json s;
  ASSERT_TRUE(WaitFor([&] { return (s = co.StatusJson())["registered"] == 1; })) << s.dump();
  EXPECT_EQ(s["recovering"], true);
  EXPECT_EQ(s["members"].size(), 2u);
  EXPECT_EQ(s["joining"], 0);
  EXPECT_EQ(s["pending"], 0);

  EXPECT_EQ(send(beat("w1", 4, 1, "3"))["generation"], 4);
  s = co.StatusJson();
  EXPECT_EQ(s["recovering"], false);
  EXPECT_EQ(s["members"].size(), 3u);
  EXPECT_EQ(s["joining"], 1);  // the held join is served now
  EXPECT_EQ(s["pending"], 5);
  joined.wait();
}

}  // namespace
}  // namespace frugal::comm
