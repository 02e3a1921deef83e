#include "frugal/comm/transport/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace frugal::comm {

namespace {

// getaddrinfo's answers, freed on scope exit.
struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

int Resolve(const std::string& host, int socktype, int flags, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = flags;
  return getaddrinfo(host.c_str(), nullptr, &hints, &out->list);
}

bool IsLoopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

std::string Numeric(const sockaddr* a, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(a, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

// "HOST" or "[HOST]" for an endpoint: IPv6 addresses need the brackets.
std::string EndpointForm(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

std::string JoinPorts(const std::vector<int>& ports) {
  std::string out;
  for (int p : ports) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

}  // namespace

std::string EndpointHost(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) return "";
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < scheme.size()) return "";
  std::string host = endpoint.substr(scheme.size(), colon - scheme.size());
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

std::string InterfaceOfAddress(const std::string& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    const socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (Numeric(i->ifa_addr, len) == address) name = i->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

bool IsWildcardHost(const std::string& host) { return host == "0.0.0.0" || host == "*" || host == "::"; }

bool IsLoopbackHost(const std::string& host) {
  if (host.empty() || IsWildcardHost(host)) return false;
  AddrInfo ai;
  if (Resolve(host, SOCK_STREAM, 0, &ai) != 0) return false;
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    if (!IsLoopback(a->ai_addr)) return false;
  }
  return ai.list != nullptr;
}

Result<std::string> RouteSourceAddress(const std::string& endpoint) {
  const std::string host = EndpointHost(endpoint);
  if (host.empty()) return Status::InvalidArgument("not a tcp://HOST:PORT endpoint: " + endpoint);
  AddrInfo ai;
  if (int rc = Resolve(host, SOCK_DGRAM, 0, &ai); rc != 0) {
    return Status::Unavailable("cannot resolve " + host + " (from " + endpoint + "): " + gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    // The port does not matter for the route, but connect() wants one.
    sockaddr_storage to{};
    std::memcpy(&to, a->ai_addr, a->ai_addrlen);
    if (to.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&to)->sin_port = htons(9);
    if (to.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&to)->sin6_port = htons(9);
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage mine{};
    socklen_t len = sizeof(mine);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), a->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0;
    if (!ok) why = std::strerror(errno);
    close(fd);
    if (!ok) continue;
    std::string numeric = Numeric(reinterpret_cast<sockaddr*>(&mine), len);
    if (!numeric.empty()) return numeric;
  }
  return Status::Unavailable("no route to " + host + " (from " + endpoint + "): " + why);
}

Result<std::string> AdvertisedEndpoint(const std::string& bound, const std::string& advertise_host,
                                       const std::string& rendezvous) {
  const std::string bound_host = EndpointHost(bound);
  if (bound_host.empty()) return Status::InvalidArgument("cannot replace the host of endpoint " + bound);
  const size_t colon = bound.rfind(':');
  std::string host = bound_host;
  if (!advertise_host.empty()) {
    host = advertise_host;
  } else if (IsWildcardHost(bound_host)) {
    FRUGAL_ASSIGN_OR_RETURN(host, RouteSourceAddress(rendezvous));
  }
  const std::string rendezvous_host = EndpointHost(rendezvous);
  if (IsLoopbackHost(host) && !rendezvous_host.empty() && !IsLoopbackHost(rendezvous_host)) {
    return Status::InvalidArgument("this worker would tell its peers to connect to " + host +
                                   ", a loopback address, but the coordinator " + rendezvous +
                                   " is not on loopback: listen on tcp://0.0.0.0:* (its address towards the "
                                   "coordinator is advertised) or give --advertise-host");
  }
  return "tcp://" + EndpointForm(host) + bound.substr(colon);
}

Result<PortRange> ParsePortRange(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--port-range " + text + ": " + why + " (expected FIRST-LAST, e.g. 29600-29607)");
  };
  const size_t dash = text.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == text.size()) return bad("not FIRST-LAST");
  PortRange r;
  int* ends[2] = {&r.first, &r.last};
  const std::string parts[2] = {text.substr(0, dash), text.substr(dash + 1)};
  for (int i = 0; i < 2; ++i) {
    if (parts[i].size() > 5 || parts[i].find_first_not_of("0123456789") != std::string::npos) {
      return bad("'" + parts[i] + "' is not a port number");
    }
    *ends[i] = std::stoi(parts[i]);
    if (*ends[i] < 1 || *ends[i] > 65535) return bad("port " + parts[i] + " is outside 1-65535");
  }
  if (r.first > r.last) return bad("the first port is above the last");
  return r;
}

namespace {

// Binds a TCP socket at `host`:`port` and closes it: the port, or the one
// the kernel chose for port 0; 0 when the bind failed.
Result<int> TryBind(const std::string& host, int port) {
  AddrInfo ai;
  if (Resolve(IsWildcardHost(host) ? "0.0.0.0" : host, SOCK_STREAM, AI_NUMERICHOST | AI_PASSIVE, &ai) != 0 ||
      ai.list == nullptr) {
    return Status::InvalidArgument("cannot bind ports on " + host + ": not a numeric address");
  }
  sockaddr_storage at{};
  std::memcpy(&at, ai.list->ai_addr, ai.list->ai_addrlen);
  if (at.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&at)->sin_port = htons(port);
  if (at.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&at)->sin6_port = htons(port);
  const int fd = socket(at.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  // As libzmq's listeners set it: a port in TIME_WAIT is free to them.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int bound = 0;
  socklen_t len = sizeof(at);
  if (bind(fd, reinterpret_cast<sockaddr*>(&at), ai.list->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&at), &len) == 0) {
    bound = ntohs(at.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&at)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&at)->sin6_port);
  }
  close(fd);
  return bound;
}

}  // namespace

Result<int> FreeTcpPort(const std::string& host) {
  FRUGAL_ASSIGN_OR_RETURN(int port, TryBind(host, 0));
  if (port == 0) return Status::IOError("no free TCP port on " + host + ": " + std::strerror(errno));
  return port;
}

Result<std::vector<int>> FreePortsInRange(const std::string& host, PortRange range, int count) {
  const std::string name = std::to_string(range.first) + "-" + std::to_string(range.last);
  if (range.size() < count) {
    return Status::InvalidArgument("--port-range " + name + " holds " + std::to_string(range.size()) + " ports, " +
                                   std::to_string(count) + " are needed");
  }
  std::vector<int> free;
  std::vector<int> taken;
  for (int port = range.first; port <= range.last && static_cast<int>(free.size()) < count; ++port) {
    FRUGAL_ASSIGN_OR_RETURN(int bound, TryBind(host, port));
    (bound == port ? free : taken).push_back(port);
  }
  if (static_cast<int>(free.size()) < count) {
    return Status::InvalidArgument("--port-range " + name + ": " + std::to_string(count) + " ports are needed on " +
                                   host + ", " + std::to_string(free.size()) + " are free (in use: " +
                                   JoinPorts(taken) + ")");
  }
  return free;
}

}  // namespace frugal::comm
