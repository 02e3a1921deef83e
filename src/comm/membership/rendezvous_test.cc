#include "frugal/comm/membership/rendezvous.h"

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include "frugal/comm/algorithms/sparse_exchange.h"
#include "membership_wire.h"
#include "rendezvous_wire.h"
#include "testing/test_world.h"

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;

ZmqOptions FastClose() {
  ZmqOptions o;
  o.linger = milliseconds(300);
  return o;
}

TEST(RendezvousTest, JoinsAWorldAndRunsAHierarchicalExchange) {
  constexpr int kRanks = 4;
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", kRanks, FastClose());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(5000)); });

  std::vector<std::string> got(kRanks);
  std::vector<std::string> errors(kRanks);
  testing::RunRanks(kRanks, [&](int i) {
    JoinOptions opts;
    opts.rendezvous = (*server)->endpoint();
    // Ranks 1 and 3 ask for a rank; 0 and 2 take what is left.
    opts.rank = (i % 2 == 1) ? i : -1;
    opts.cluster = i < 2 ? "onprem" : "cloud";
    opts.timeout = milliseconds(5000);
    opts.zmq = FastClose();
    auto t = JoinZmqWorld(opts);
    if (!t.ok()) {
      errors[i] = t.status().ToString();
      return;
    }
    SparseExchange ex(t->get(), [](std::vector<Bytes> parts) -> Result<Bytes> {
      Bytes out;
      for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
      return out;
    });
    auto out = ex.Run(1, Bytes{static_cast<uint8_t>('0' + (*t)->rank())});
    if (!out.ok()) {
      errors[i] = out.status().ToString();
      return;
    }
    got[(*t)->rank()] = std::string(out->begin(), out->end());
    if ((*t)->cluster() != opts.cluster) errors[i] = "wrong cluster " + (*t)->cluster();
  });
  serve.join();
  for (int i = 0; i < kRanks; ++i) EXPECT_EQ(errors[i], "") << "thread " << i;
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_EQ(table->size(), 4u);
  EXPECT_EQ((*table)[1].cluster, "onprem");
  EXPECT_EQ((*table)[3].cluster, "cloud");
  // Every rank ends with the same bytes: a permutation of the four digits,
  // identical everywhere.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(got[r].size(), 4u);
    EXPECT_EQ(got[r], got[0]);
  }
}

// The multi-host path: ranks listen on a wildcard address and publish a
// routable host instead.
TEST(RendezvousTest, WildcardListenWithAdvertisedHost) {
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 2, FastClose());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(5000)); });
  std::vector<std::string> errors(2);
  testing::RunRanks(2, [&](int r) {
    JoinOptions opts;
    opts.rendezvous = (*server)->endpoint();
    opts.rank = r;
    opts.listen = "tcp://0.0.0.0:*";
    opts.advertise_host = "127.0.0.1";
    opts.timeout = milliseconds(5000);
    opts.zmq = FastClose();
    auto t = JoinZmqWorld(opts);
    if (!t.ok()) {
      errors[r] = t.status().ToString();
      return;
    }
    auto all = [&]() -> Status {
      FRUGAL_RETURN_IF_ERROR((*t)->Send(1 - r, 3, Bytes{static_cast<uint8_t>(r)}));
      FRUGAL_ASSIGN_OR_RETURN(Message m, (*t)->Recv(1 - r, 3, milliseconds(5000)));
      if (m.payload != Bytes{static_cast<uint8_t>(1 - r)}) return Status::Internal("wrong payload");
      return Status::Ok();
    }();
    errors[r] = all.ok() ? "" : all.ToString();
  });
  serve.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ((*table)[0].endpoint.rfind("tcp://127.0.0.1:", 0), 0u) << (*table)[0].endpoint;
}

// Workers may start before the coordinator: the registration waits in the
// DEALER's queue until the server binds.
TEST(RendezvousTest, ClientMayStartBeforeTheServer) {
  // Find a free port: bind, note it, close. It is taken below the kernel's
  // ephemeral range (32768-60999 here): a port from that range, once
  // released, can be handed to another test's "tcp://127.0.0.1:*" bind
  // running in parallel (seen in CI: "Address already in use", and the other
  // test's server then received this client's registration).
  std::string endpoint;
  for (int attempt = 0; attempt < 200 && endpoint.empty(); ++attempt) {
    const int port = 21000 + static_cast<int>((std::random_device{}() % 8000));
    std::string candidate = "tcp://127.0.0.1:" + std::to_string(port);
    auto probe = RendezvousServer::Bind(candidate, 1, FastClose());
    if (probe.ok()) endpoint = candidate;
  }
  ASSERT_FALSE(endpoint.empty()) << "no free port in 21000-28999";
  auto client = std::async(std::launch::async, [&] {
    return RegisterWithRendezvous(endpoint, PeerInfo{-1, "tcp://127.0.0.1:9", "a", ""}, milliseconds(5000), FastClose());
  });
  std::this_thread::sleep_for(milliseconds(150));  // Let the client connect first (not required for success).
  auto server = RendezvousServer::Bind(endpoint, 1, FastClose());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto table = (*server)->Serve(milliseconds(5000));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  auto got = client.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->rank, 0);
}

TEST(RendezvousTest, ServerTimesOutNamingMissingRanksAndTellsTheRegistered) {
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 3, FastClose());
  ASSERT_TRUE(server.ok());
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(300)); });
  auto client = RegisterWithRendezvous((*server)->endpoint(), PeerInfo{1, "tcp://127.0.0.1:1", "a", ""},
                                       milliseconds(5000), FastClose());
  serve.join();
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), Status::Code::kTimeout);
  EXPECT_NE(table.status().message().find("1 of 3"), std::string::npos) << table.status().ToString();
  EXPECT_NE(table.status().message().find("free ranks: 0, 2"), std::string::npos) << table.status().ToString();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Status::Code::kTimeout) << client.status().ToString();
}

TEST(RendezvousTest, RejectsDuplicateAndOutOfRangeRanks) {
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 2, FastClose());
  ASSERT_TRUE(server.ok());
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(5000)); });
  const std::string ep = (*server)->endpoint();
  auto register_rank0 = [&](const std::string& endpoint) {
    return std::async(std::launch::async, [&, endpoint] {
      return RegisterWithRendezvous(ep, PeerInfo{0, endpoint, "a", ""}, milliseconds(5000), FastClose());
    });
  };
  // Two ranks claim rank 0: whichever arrives second is rejected at once,
  // the other waits for the table.
  auto first = register_rank0("tcp://127.0.0.1:1");
  auto dup = register_rank0("tcp://127.0.0.1:2");
  while (first.wait_for(milliseconds(5)) != std::future_status::ready &&
         dup.wait_for(milliseconds(5)) != std::future_status::ready) {
  }
  auto out_of_range =
      RegisterWithRendezvous(ep, PeerInfo{7, "tcp://127.0.0.1:3", "a", ""}, milliseconds(5000), FastClose());
  EXPECT_EQ(out_of_range.status().code(), Status::Code::kInvalidArgument);
  auto second = RegisterWithRendezvous(ep, PeerInfo{-1, "tcp://127.0.0.1:4", "b", ""}, milliseconds(5000), FastClose());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->rank, 1);
  auto a = first.get();
  auto b = dup.get();
  ASSERT_NE(a.ok(), b.ok()) << a.status().ToString() << " / " << b.status().ToString();
  const auto& rejected = a.ok() ? b : a;
  const auto& accepted = a.ok() ? a : b;
  EXPECT_EQ(rejected.status().code(), Status::Code::kInvalidArgument) << rejected.status().ToString();
  EXPECT_NE(rejected.status().message().find("already registered"), std::string::npos);
  EXPECT_EQ(accepted->rank, 0);
  EXPECT_EQ(accepted->peers[1].endpoint, "tcp://127.0.0.1:4");
  serve.join();
  ASSERT_TRUE(table.ok());
}

TEST(RendezvousTest, ClientTimesOutWhenNoServerAnswers) {
  // A server that never calls Serve.
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 2, FastClose());
  ASSERT_TRUE(server.ok());
  auto r = RegisterWithRendezvous((*server)->endpoint(), PeerInfo{0, "tcp://x:1", "a", ""}, milliseconds(200));
  EXPECT_EQ(r.status().code(), Status::Code::kTimeout);
  EXPECT_NE(r.status().message().find((*server)->endpoint()), std::string::npos);
}

// Regressions of fuzz/rendezvous_fuzz.cc: a float where an integer belongs
// was read as an int (undefined behaviour); an unsigned 2^64-1 rank wrapped
// to -1; a table out of rank order was accepted.
TEST(RendezvousWireTest, MalformedFramesAreRejectedWithAReason) {
  const std::string peers =
      R"([{"rank":0,"endpoint":"tcp://h:1","cluster":"a"},{"rank":1,"endpoint":"tcp://h:2","cluster":"b"}])";
  auto ok = wire::ParseWorldTable(R"({"version":1,"rank":1,"peers":)" + peers + "}", "server");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->rank, 1);
  EXPECT_EQ(ok->peers[1].endpoint, "tcp://h:2");

  auto huge_version = wire::ParseWorldTable(R"({"version":1.4e32,"rank":1,"peers":)" + peers + "}", "server");
  EXPECT_EQ(huge_version.status().code(), Status::Code::kCorruption);
  EXPECT_NE(huge_version.status().message().find("version"), std::string::npos);
  auto generation = membership_wire::ParseTable(
      R"({"version":1e300,"generation":1,"rank":0,"restore":-1,"peers":)" + peers + "}", "coordinator");
  EXPECT_EQ(generation.status().code(), Status::Code::kCorruption);

  const std::string swapped =
      R"([{"rank":1,"endpoint":"tcp://h:1","cluster":"a"},{"rank":0,"endpoint":"tcp://h:2","cluster":"b"}])";
  auto out_of_order = wire::ParseWorldTable(R"({"version":1,"rank":0,"peers":)" + swapped + "}", "server");
  EXPECT_EQ(out_of_order.status().code(), Status::Code::kCorruption);

  std::string why;
  membership_wire::RegistrationRequest r;
  const auto wrapped = nlohmann::json::parse(R"({"rank":18446744073709551615,"endpoint":"tcp://h:1","cluster":"a"})");
  EXPECT_FALSE(membership_wire::ParseRegistration(wrapped, true, &r, &why));
  EXPECT_NE(why.find("rank"), std::string::npos);
  for (const char* bad : {"0", "-3", "1.5", "\"4\""}) {
    const auto j = nlohmann::json::parse(std::string(R"({"id":"w","endpoint":"tcp://h:1","cluster":"a","max_world":)") +
                                         bad + "}");
    why.clear();
    EXPECT_FALSE(membership_wire::ParseRegistration(j, false, &r, &why)) << bad;
    EXPECT_NE(why.find("max_world"), std::string::npos) << bad;
  }
}

// Note [Rank reservations]: two launchers reserve blocks, the first holds
// rank 0 and both learn its store; their children join with those ranks.
TEST(RendezvousTest, LaunchersReserveRanksAndLearnRankZerosStore) {
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 4, FastClose());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(10000)); });
  const std::string ep = (*server)->endpoint();
  auto a = ReserveRanks(ep, {2, "10.0.0.1", 29601}, milliseconds(5000), FastClose());
  auto b = ReserveRanks(ep, {2, "10.0.1.2", 29701}, milliseconds(5000), FastClose());
  std::vector<std::string> errors(4);
  if (a.ok() && b.ok()) {
    testing::RunRanks(4, [&](int i) {
      JoinOptions opts;
      opts.rendezvous = ep;
      opts.rank = i < 2 ? a->ranks[i] : b->ranks[i - 2];
      opts.cluster = i < 2 ? "siteA" : "siteB";
      opts.timeout = milliseconds(5000);
      opts.zmq = FastClose();
      auto t = JoinZmqWorld(opts);
      errors[i] = t.ok() ? ((*t)->rank() == opts.rank ? "" : "wrong rank") : t.status().ToString();
    });
  }
  serve.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(b->ranks, (std::vector<int>{2, 3}));
  for (const RankReservation* r : {&*a, &*b}) {
    EXPECT_EQ(r->world_size, 4);
    EXPECT_EQ(r->master_host, "10.0.0.1");
    EXPECT_EQ(r->master_port, 29601);
  }
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ((*table)[3].cluster, "siteB");
}

TEST(RendezvousTest, ReservationsNeverTakeRanksOwedOrReserved) {
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 3, FastClose());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(3000)); });
  const std::string ep = (*server)->endpoint();
  // A rank -1 worker registers first: one rank is owed to it.
  Result<WorldTable> any = Status::Internal("not run");
  std::thread anyone([&] { any = RegisterWithRendezvous(ep, {-1, "tcp://h:9", "c", ""}, milliseconds(5000), FastClose()); });
  // Orders the two requests (they come on different connections).
  std::this_thread::sleep_for(milliseconds(1000));
  auto too_many = ReserveRanks(ep, {3, "h", 1}, milliseconds(5000), FastClose());
  auto two = ReserveRanks(ep, {2, "h", 1}, milliseconds(5000), FastClose());
  // Every rank is now reserved or owed: another rank -1 worker is refused.
  auto refused = RegisterWithRendezvous(ep, {-1, "tcp://h:8", "c", ""}, milliseconds(5000), FastClose());
  anyone.join();  // Only rank 2 of the reservation's children never registers...
  serve.join();   // ...so the server times out naming the ranks reserved.
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("asked for 3 ranks, the world of 3 has 2 left"), std::string::npos)
      << too_many.status().message();
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->ranks, (std::vector<int>{0, 1}));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("reserved"), std::string::npos) << refused.status().message();
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("reserved by a frugal run but not registered: 0, 1"), std::string::npos)
      << table.status().message();
  EXPECT_EQ(any.status().code(), Status::Code::kTimeout);
}

TEST(RendezvousTest, AnyRankWorkersSkipReservedRanks) {
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 3, FastClose());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<std::vector<PeerInfo>> table = Status::Internal("not served");
  std::thread serve([&] { table = (*server)->Serve(milliseconds(5000)); });
  const std::string ep = (*server)->endpoint();
  auto mine = ReserveRanks(ep, {2, "h", 7}, milliseconds(5000), FastClose());
  std::vector<int> got(3, -2);
  testing::RunRanks(3, [&](int i) {
    PeerInfo self{i == 2 ? -1 : i, "tcp://h:" + std::to_string(i + 1), "c", ""};
    auto t = RegisterWithRendezvous(ep, self, milliseconds(5000), FastClose());
    if (t.ok()) got[i] = t->rank;
  });
  serve.join();
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(table.ok()) << table.status().ToString();
}

TEST(RendezvousWireTest, ReservationRepliesAreChecked) {
  const std::string where = "coordinator";
  auto ok = wire::ParseReservationReply(
      R"({"version":1,"ranks":[2,3],"world_size":4,"master_addr":"10.0.0.1","master_port":29500})", where);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(ok->master_host, "10.0.0.1");
  for (const char* bad : {
           R"({"version":2,"ranks":[0],"world_size":1,"master_addr":"","master_port":0})",
           R"({"version":1,"ranks":[3,2],"world_size":4,"master_addr":"","master_port":0})",
           R"({"version":1,"ranks":[4],"world_size":4,"master_addr":"","master_port":0})",
           R"({"version":1,"ranks":[],"world_size":4,"master_addr":"","master_port":0})",
           R"({"version":1,"ranks":[0],"world_size":4,"master_addr":"","master_port":1e300})",
           R"({"version":1,"ranks":[0],"world_size":4,"master_port":1})",
           "[]"}) {
    auto r = wire::ParseReservationReply(bad, where);
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << bad;
  }
  auto refused = wire::ParseReservationReply(R"({"error":"unknown op 'reserve'"})", where);
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);

  RankReservationRequest req;
  std::string why;
  EXPECT_FALSE(wire::ParseReservationRequest(nlohmann::json::parse(R"({"op":"reserve","workers":0,"master_host":"h","master_port":1})"), &req, &why));
  EXPECT_NE(why.find("workers"), std::string::npos) << why;
  EXPECT_FALSE(wire::ParseReservationRequest(nlohmann::json::parse(R"({"op":"reserve","workers":1,"master_port":1})"), &req, &why));
  EXPECT_TRUE(wire::ParseReservationRequest(nlohmann::json::parse(wire::ReservationRequestFrame({3, "h", 5})), &req, &why));
  EXPECT_EQ(req.workers, 3);
  EXPECT_EQ(req.master_port, 5);
}


}  // namespace
}  // namespace frugal::comm
