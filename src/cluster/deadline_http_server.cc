#include "deadline_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

namespace frugal::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `events` on `sock` until `deadline` or until the server stops;
// true when they came.
bool WaitFor(int sock, short events, Clock::time_point deadline, const std::atomic<socket_t>& listener) {
  // Slices of at most 100 ms so that stop() does not wait a whole budget.
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (listener != INVALID_SOCKET) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{sock, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<std::chrono::milliseconds>(left, kSlice).count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
  return false;
}

void Address(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, text.data(), text.size());
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text.data(), text.size());
    port = ntohs(a->sin6_port);
  }
  ip = text.data();
}

// One connection's socket with the read and write budgets of
// DeadlineHttpServer. Buffered: httplib reads request lines a byte at a time.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, Clock::duration budget, const std::atomic<socket_t>& listener)
      : sock_(sock), budget_(budget), read_deadline_(Clock::now() + budget), listener_(listener) {}

  bool is_readable() const override {
    return begin_ < end_ || WaitFor(sock_, POLLIN, read_deadline_, listener_);
  }
  bool is_writable() const override { return WaitFor(sock_, POLLOUT, WriteDeadline(), listener_); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      if (!is_readable()) return -1;
      ssize_t n;
      do {
        n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      write_deadline_.reset();
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_.data() + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { Address(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Address(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  // The write budget starts at the first write after a read (the response,
  // or a "100 Continue"), so the handler's time is not taken from it.
  Clock::time_point WriteDeadline() const {
    if (!write_deadline_) write_deadline_ = Clock::now() + budget_;
    return *write_deadline_;
  }

  const int sock_;
  const Clock::duration budget_;
  const Clock::time_point read_deadline_;
  mutable std::optional<Clock::time_point> write_deadline_;
  const std::atomic<socket_t>& listener_;
  std::array<char, 4096> buffer_{};
  size_t begin_ = 0, end_ = 0;  // The unread part of buffer_.
};

}  // namespace

// One request per connection: with keep-alive an idle connection holds a
// pool thread until it times out, and 100 agents heartbeating that way
// starved every other request (bench/cluster/api_load.py); reconnecting
// costs far less.
bool DeadlineHttpServer::process_and_close_socket(socket_t sock) {
  bool ok = false;
  {
    DeadlineStream stream(sock, budget_, svr_sock_);
    bool client_closes = false;
    ok = process_request(stream, /*close_connection=*/true, client_closes, nullptr);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace frugal::cluster
