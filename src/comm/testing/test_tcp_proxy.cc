#include "test_tcp_proxy.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace frugal::comm::testing {

namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A listening socket on `port` (0: any); returns the fd and sets `port`.
int Listen(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Loopback(*port);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 64) != 0) {
    throw std::runtime_error("TcpProxy: cannot listen on port " + std::to_string(*port));
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

void CloseWithReset(int fd) {
  if (fd < 0) return;
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

}  // namespace

struct TcpProxy::Relay {
  struct Pair {
    int client = -1;
    int upstream = -1;  // -1: the upstream refused
  };
  int upstream_port = 0;
  int port = 0;
  int listen_fd = -1;
  int wake_fd = -1;
  Mode mode = Mode::kForward;
  double rate = 0;  // Bytes/s; 0: unlimited.
  std::vector<Pair> pairs;
  // Control handed over from the test thread.
  std::mutex mu;
  std::condition_variable cv;
  std::function<void(Relay&)> pending;  // GUARDED_BY(mu)
  bool stop = false;                    // GUARDED_BY(mu)

  void Accept() {
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    Pair p{c, -1};
    p.upstream = Connect();
    pairs.push_back(p);
  }

  int Connect() const {
    int u = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(upstream_port);
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(u);
      return -1;
    }
    return u;
  }

  void ResetAll() {
    for (Pair& p : pairs) {
      CloseWithReset(p.client);
      CloseWithReset(p.upstream);
    }
    pairs.clear();
  }

  // Moves bytes from `from`; false when that side closed.
  bool Pump(int from, int to) {
    char buf[1 << 16];
    // At a rate, small reads paced by sleeping the time they take on the link.
    ssize_t n = ::read(from, buf, rate > 0 ? std::min<size_t>(sizeof(buf), 16 << 10) : sizeof(buf));
    if (n <= 0) return false;
    if (mode == Mode::kBlackhole) return true;  // swallowed
    if (to < 0) return false;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) return false;
      off += w;
    }
    if (rate > 0) std::this_thread::sleep_for(std::chrono::duration<double>(static_cast<double>(n) / rate));
    return true;
  }

  void Run() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (pending) {
          pending(*this);
          pending = nullptr;
          cv.notify_all();
        }
        if (stop) break;
      }
      std::vector<pollfd> fds{{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (const Pair& p : pairs) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.upstream, POLLIN, 0});  // poll ignores fd -1
      }
      if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        uint64_t n;
        (void)!::read(wake_fd, &n, sizeof(n));
      }
      const size_t polled = (fds.size() - 2) / 2;
      std::vector<Pair> keep;
      for (size_t i = 0; i < polled; ++i) {
        Pair& p = pairs[i];
        bool open = true;
        if (fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) open = Pump(p.client, p.upstream);
        if (open && p.upstream >= 0 && (fds[3 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR))) {
          open = Pump(p.upstream, p.client);
        }
        if (open) {
          keep.push_back(p);
        } else {
          CloseWithReset(p.client);
          CloseWithReset(p.upstream);
        }
      }
      pairs.swap(keep);
      if (listen_fd >= 0 && (fds[1].revents & POLLIN)) Accept();
    }
    ResetAll();
    if (listen_fd >= 0) ::close(listen_fd);
    ::close(wake_fd);
  }
};

TcpProxy::TcpProxy(int upstream_port) : relay_(std::make_unique<Relay>()) {
  relay_->upstream_port = upstream_port;
  relay_->listen_fd = Listen(&relay_->port);
  relay_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  port_ = relay_->port;
  thread_ = std::thread([this] { relay_->Run(); });
}

TcpProxy::~TcpProxy() {
  {
    // The wake-up is written under the lock: the relay reads stop under it
    // and closes wake_fd once it has, so the fd is still open here.
    std::lock_guard<std::mutex> lock(relay_->mu);
    relay_->stop = true;
    uint64_t one = 1;
    (void)!::write(relay_->wake_fd, &one, sizeof(one));
  }
  thread_.join();
}

void TcpProxy::Apply(std::function<void(Relay&)> change) {
  std::unique_lock<std::mutex> lock(relay_->mu);
  relay_->pending = std::move(change);
  uint64_t one = 1;
  (void)!::write(relay_->wake_fd, &one, sizeof(one));
  relay_->cv.wait(lock, [this] { return !relay_->pending; });
}

void TcpProxy::SetMode(Mode mode) {
  Apply([mode](Relay& r) {
    r.mode = mode;
    if (mode == Mode::kForward && r.listen_fd < 0) r.listen_fd = Listen(&r.port);
  });
}

void TcpProxy::ResetConnections() {
  Apply([](Relay& r) { r.ResetAll(); });
}

void TcpProxy::SetRate(double bytes_per_s) {
  Apply([bytes_per_s](Relay& r) { r.rate = bytes_per_s; });
}

void TcpProxy::ClosePort() {
  Apply([](Relay& r) {
    r.ResetAll();
    if (r.listen_fd >= 0) ::close(r.listen_fd);
    r.listen_fd = -1;
  });
}

int PortOf(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(endpoint.c_str() + colon + 1);
}

}  // namespace frugal::comm::testing
