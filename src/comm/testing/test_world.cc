#include "test_world.h"

#include <gtest/gtest.h>

#include "frugal/comm/transport/inproc_transport.h"
#include "frugal/comm/transport/zmq_transport.h"

namespace frugal::comm::testing {

std::string BackendName(Backend b) { return b == Backend::kInProc ? "InProc" : "Zmq"; }

ZmqOptions FastZmqOptions() {
  ZmqOptions options;
  options.linger = std::chrono::milliseconds(300);
  return options;
}

World MakeWorld(Backend backend, const std::vector<std::string>& cluster_of_rank, ZmqOptions options) {
  World world;
  world.world_size = static_cast<int>(cluster_of_rank.size());
  Result<Topology> topo = Topology::FromClusterNames(cluster_of_rank);
  EXPECT_TRUE(topo.ok()) << topo.status().ToString();
  if (!topo.ok()) return world;
  if (backend == Backend::kInProc) {
    auto hub = std::make_shared<InProcHub>(*topo);
    for (int r = 0; r < topo->world_size(); ++r) {
      auto t = hub->CreateTransport(r);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      world.ranks.push_back(std::move(t).value());
    }
    world.keepalive = hub;
    return world;
  }
  // ZeroMQ: bind every rank first (ephemeral ports), then connect with the
  // table, as a rendezvous would.
  std::vector<std::unique_ptr<ZmqListener>> listeners;
  std::vector<PeerInfo> peers;
  for (int r = 0; r < topo->world_size(); ++r) {
    auto l = ZmqListener::Bind("tcp://127.0.0.1:*", options);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return world;
    peers.push_back(PeerInfo{r, (*l)->endpoint(), cluster_of_rank[r], options.security.keys.public_key});
    world.endpoints.push_back((*l)->endpoint());
    listeners.push_back(std::move(l).value());
  }
  for (int r = 0; r < topo->world_size(); ++r) {
    auto t = ConnectZmqTransport(std::move(listeners[r]), r, peers);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return world;
    world.ranks.push_back(std::move(t).value());
  }
  return world;
}

void RunRanks(int world_size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

void RunRanks(World& world, const std::function<void(int, std::unique_ptr<Transport>&)>& fn) {
  if (static_cast<int>(world.ranks.size()) != world.world_size) {
    ADD_FAILURE() << "the world of " << world.world_size << " ranks has only " << world.ranks.size();
    return;
  }
  RunRanks(world.world_size, [&](int r) { fn(r, world.ranks[r]); });
}

}  // namespace frugal::comm::testing
