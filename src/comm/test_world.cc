#include "test_world.h"

#include <gtest/gtest.h>

#include "frugal/comm/inproc_transport.h"

namespace frugal::comm::testing {

std::string BackendName(Backend b) { return b == Backend::kInProc ? "InProc" : "Zmq"; }

World MakeWorld(Backend backend, const std::vector<std::string>& cluster_of_rank) {
  World world;
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
  ADD_FAILURE() << "backend not built: " << BackendName(backend);
  return world;
}

void RunRanks(int world_size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

}  // namespace frugal::comm::testing
