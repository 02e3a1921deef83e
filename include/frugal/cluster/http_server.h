// ClusterServer: the HTTP/JSON API and dashboard of `frugal cluster serve`
// over a ClusterManager (docs/guide/cluster.md has the endpoint reference). One
// listener thread (cpp-httplib's pool answers requests) and one ticker
// thread that calls ClusterManager::Tick every tick_interval_s.
//
// Mutating endpoints (POST) need `Authorization: Bearer <token>` when a
// token is set (401 without one, 403 for a wrong one). Bad input is a 4xx
// with a one-line JSON reason (docs/guide/cluster.md, "Limits and error
// answers"): a body over 8 MiB, or a POST without Content-Length, malformed
// JSON, unknown fields, wrong types, bad job names or ids. A whole request
// must arrive within read_timeout_s. The server keeps running.
//
// Thread safety: Start/Stop from one thread. Lifetime: the manager must
// outlive the server; the destructor stops it.
#pragma once

#include <memory>
#include <string>

#include "frugal/cluster/cluster_manager.h"
#include "frugal/common/status.h"

namespace frugal::cluster {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                 // 0: an ephemeral port (see port()).
  std::string token;            // Empty: no authentication (the CLI allows that on loopback only).
  double tick_interval_s = 0.5;
  double read_timeout_s = 10;   // Per request; a stalled client cannot hold a worker thread longer.
};

class ClusterServer {
 public:
  virtual ~ClusterServer() = default;
  // Binds and starts serving. Errors: Unavailable if the address cannot be bound.
  static Result<std::unique_ptr<ClusterServer>> Start(ClusterManager& manager, ServerOptions options);
  virtual int port() const = 0;
  // The first error of the ticker thread (a store failure), or Ok.
  virtual Status error() const = 0;
  virtual void Stop() = 0;
};

}  // namespace frugal::cluster
