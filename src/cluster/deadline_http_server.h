// DeadlineHttpServer: a cpp-httplib Server in which each connection has a
// time budget for reading its request and another for writing the answer
// (internal to the cluster service).
//
// httplib's own timeouts bound each recv() and send(), so a client that
// sends one byte a second, or reads one a second, holds a pool thread for
// as long as it likes. Here the whole request (line, headers and body) must
// arrive within `budget` of the connection's start, and the whole response
// must leave within `budget` of its first byte; otherwise the connection is
// closed and the thread is free again. The handler's own time counts in
// neither. One request per connection: each is closed after its answer.
//
// Thread safety: as httplib::Server (configure, then listen; stop() from any
// thread).
#pragma once

#include <httplib.h>

#include <chrono>

namespace frugal::cluster {

class DeadlineHttpServer final : public httplib::Server {
 public:
  // REQUIRES: budget > 0.
  explicit DeadlineHttpServer(std::chrono::steady_clock::duration budget) : budget_(budget) {}

 private:
  // Called by httplib's listener for each accepted socket, on a pool thread.
  bool process_and_close_socket(socket_t sock) override;

  const std::chrono::steady_clock::duration budget_;
};

}  // namespace frugal::cluster
