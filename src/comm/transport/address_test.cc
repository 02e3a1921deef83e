#include "frugal/comm/transport/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace frugal::comm {
namespace {

TEST(AddressTest, EndpointHostAndLoopback) {
  EXPECT_EQ(EndpointHost("tcp://10.0.0.1:29500"), "10.0.0.1");
  EXPECT_EQ(EndpointHost("tcp://[::1]:5"), "::1");
  EXPECT_EQ(EndpointHost("tcp://0.0.0.0:*"), "0.0.0.0");
  EXPECT_EQ(EndpointHost("ipc:///tmp/x"), "");
  EXPECT_EQ(EndpointHost("tcp://nohost"), "");
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.0.1.1"));  // Debian's /etc/hosts entry for the host's own name
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost(""));
  EXPECT_TRUE(IsWildcardHost("0.0.0.0"));
  EXPECT_TRUE(IsWildcardHost("*"));
  EXPECT_FALSE(IsWildcardHost("127.0.0.1"));
  EXPECT_EQ(InterfaceOfAddress("127.0.0.1"), "lo");
  EXPECT_EQ(InterfaceOfAddress("192.0.2.77"), "");  // TEST-NET-1: no interface of a test machine holds it
}

TEST(AddressTest, RouteToLoopbackIsLoopback) {
  auto a = RouteSourceAddress("tcp://127.0.0.1:29500");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, "127.0.0.1");
  EXPECT_EQ(RouteSourceAddress("tcp:/x").status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RouteSourceAddress("tcp://no-such-host.invalid:1").status().code(), Status::Code::kUnavailable);
}

// A host with a route off loopback (any machine with a network) picks a
// non-loopback source for it; without one the kernel says so.
TEST(AddressTest, RouteOffLoopbackIsNeverLoopback) {
  auto a = RouteSourceAddress("tcp://192.0.2.1:29500");  // TEST-NET-1: routed by a default route, never answered
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), Status::Code::kUnavailable);
    GTEST_SKIP() << "no route off loopback here: " << a.status().ToString();
  }
  EXPECT_FALSE(IsLoopbackHost(*a)) << *a;
}

TEST(AddressTest, AdvertisedEndpoint) {
  auto wildcard = AdvertisedEndpoint("tcp://0.0.0.0:4242", "", "tcp://127.0.0.1:29500");
  ASSERT_TRUE(wildcard.ok()) << wildcard.status().ToString();
  EXPECT_EQ(*wildcard, "tcp://127.0.0.1:4242");
  auto given = AdvertisedEndpoint("tcp://0.0.0.0:4242", "10.0.1.2", "tcp://10.0.0.1:29500");
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(*given, "tcp://10.0.1.2:4242");
  auto bound = AdvertisedEndpoint("tcp://10.0.1.2:4242", "", "tcp://10.0.0.1:29500");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(*bound, "tcp://10.0.1.2:4242");
  EXPECT_EQ(*AdvertisedEndpoint("tcp://0.0.0.0:7", "::1", "tcp://[::1]:1"), "tcp://[::1]:7");
  // Loopback towards a coordinator elsewhere: refused, naming what to do.
  for (const auto& [ep, host] : {std::pair<std::string, std::string>{"tcp://127.0.0.1:4242", ""},
                                 {"tcp://0.0.0.0:4242", "127.0.1.1"}}) {
    auto refused = AdvertisedEndpoint(ep, host, "tcp://10.0.0.1:29500");
    ASSERT_FALSE(refused.ok()) << ep;
    EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("--advertise-host"), std::string::npos) << refused.status().message();
  }
  EXPECT_FALSE(AdvertisedEndpoint("ipc:///x", "", "tcp://127.0.0.1:1").ok());
}

TEST(AddressTest, ParsePortRange) {
  auto r = ParsePortRange("29600-29607");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first, 29600);
  EXPECT_EQ(r->last, 29607);
  EXPECT_EQ(r->size(), 8);
  EXPECT_EQ(ParsePortRange("5-5")->size(), 1);
  for (const char* bad : {"", "29600", "-5", "5-", "a-b", "0-10", "10-70000", "9-3", "1-2-3", " 1-2", "1-2 ",
                          "999999999999-1"}) {
    auto b = ParsePortRange(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(b.status().message().find("--port-range"), std::string::npos) << b.status().message();
  }
}

// A port held by a listener is skipped; too few free ports is an error
// naming the ports in use.
TEST(AddressTest, FreePortsInRangeSkipsPortsInUse) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int held = ntohs(addr.sin_port);
  const PortRange range{held, std::min(held + 2, 65535)};
  if (range.size() == 3) {
    auto ports = FreePortsInRange("0.0.0.0", range, 2);
    // held+1 and held+2 are free unless another process took them meanwhile.
    if (ports.ok()) {
      EXPECT_EQ(*ports, (std::vector<int>{held + 1, held + 2}));
    } else {
      EXPECT_NE(ports.status().message().find(std::to_string(held)), std::string::npos);
    }
  }
  auto none = FreePortsInRange("0.0.0.0", PortRange{held, held}, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("in use: " + std::to_string(held)), std::string::npos)
      << none.status().message();
  auto small = FreePortsInRange("0.0.0.0", PortRange{held, held}, 3);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("holds 1 ports, 3 are needed"), std::string::npos) << small.status().message();
  EXPECT_FALSE(FreePortsInRange("a-name", PortRange{held, held}, 1).ok());
  auto any = FreeTcpPort("127.0.0.1");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_GT(*any, 0);
  EXPECT_NE(*any, held);
  EXPECT_EQ(FreeTcpPort("a-name").status().code(), Status::Code::kInvalidArgument);
  close(fd);
}

}  // namespace
}  // namespace frugal::comm
