#include "peer_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace frugal::comm {

// Note [Dead process or broken link]
// A peer whose connection dropped is either gone (its process died) or
// behind a broken link (a WAN outage between sites), and the two deserve
// different waits: a dead peer should fail the exchange within a second, a
// link outage should be waited out for the link grace. libzmq reports a
// disconnect and its reconnect attempts but not why they fail, so we ask
// the peer's host directly with one TCP connect to the peer's port. A
// refusal (RST) is an answer from the host's kernel that nothing listens
// there: the process is gone. An accepted connection means the process is
// there. No answer (ICMP unreachable, a timeout, a silent drop) is what a
// broken link looks like, and also what a host that lost power looks like;
// both get the link grace, which is the price of not mistaking an outage
// for a death. The probe costs one connection attempt per probe interval
// while a peer is away, and an accepted probe is closed before it sends a
// byte (the peer's ZeroMQ sees a connection that ends before its greeting).

PeerProbe::~PeerProbe() { Close(); }

void PeerProbe::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void PeerProbe::Reset() {
  Close();
  started_ = false;
  answer_ = Answer::kPending;
}

void PeerProbe::Start(const std::string& endpoint, std::chrono::milliseconds timeout, Clock::time_point now) {
  Close();
  started_ = true;
  answer_ = Answer::kPending;
  deadline_ = now + timeout;
  const std::string scheme = "tcp://";
  if (endpoint.compare(0, scheme.size(), scheme) != 0) {
    answer_ = Answer::kRefused;
    return;
  }
  const std::string rest = endpoint.substr(scheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    answer_ = Answer::kNoAnswer;
    return;
  }
  std::string host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const long port = std::strtol(rest.c_str() + colon + 1, &end, 10);
  if (end == nullptr || *end != '\0' || port <= 0 || port > 65535) {
    answer_ = Answer::kNoAnswer;
    return;
  }
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    answer_ = Answer::kNoAnswer;
    return;
  }
  fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    answer_ = Answer::kNoAnswer;
    return;
  }
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
    answer_ = Answer::kListening;
    Close();
  } else if (errno == ECONNREFUSED) {
    answer_ = Answer::kRefused;
    Close();
  } else if (errno != EINPROGRESS) {
    answer_ = Answer::kNoAnswer;
    Close();
  }
}

PeerProbe::Answer PeerProbe::Check(Clock::time_point now) {
  if (answer_ != Answer::kPending || fd_ < 0) return answer_;
  pollfd p{fd_, POLLOUT, 0};
  if (::poll(&p, 1, 0) > 0) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    answer_ = err == 0 ? Answer::kListening : err == ECONNREFUSED ? Answer::kRefused : Answer::kNoAnswer;
    Close();
  } else if (now >= deadline_) {
    answer_ = Answer::kNoAnswer;
    Close();
  }
  return answer_;
}

}  // namespace frugal::comm
