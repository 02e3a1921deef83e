// `frugal coordinator`: the rendezvous point of a multi-host run.
#include <cstdio>

#include "commands.h"
#include "input_checks.h"
#include "frugal/comm/membership/membership.h"
#include "frugal/comm/membership/rendezvous.h"
#include "frugal/engine/launcher.h"

namespace frugal::cli {

namespace {

struct CoordinatorFlags {
  engine::CoordinatorOptions options;
  double timeout_s = 600.0;
  std::string key;
  std::string authorized_keys;
  bool insecure = false;
  double heartbeat_timeout_s = 2.0;
  double link_grace_s = 30.0;
};

// --elastic: the membership service of an elastic job, until the job ends.
void ServeElastic(const CoordinatorFlags& flags, const comm::SecurityOptions& security) {
  comm::MembershipOptions mo;
  mo.world_size = flags.options.world_size;
  mo.min_workers = flags.options.min_workers;
  mo.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.heartbeat_timeout_s * 1000));
  mo.link_grace = std::chrono::milliseconds(static_cast<int64_t>(flags.link_grace_s * 1000));
  mo.timeout = flags.options.timeout;
  mo.zmq.security = security;
  if (mo.min_workers > mo.world_size) throw UsageError("--min-workers is more than --world");
  auto server = comm::MembershipServer::Bind(flags.options.listen, mo);
  if (!server.ok()) {
    if (server.status().code() == Status::Code::kIOError) throw UsageError(server.status().message());
    ThrowIfError(server.status());
  }
  std::printf("elastic coordinator listening on %s (%s); frugal job status --coordinator %s\n",
              (*server)->endpoint().c_str(),
              security.mechanism == comm::SecurityOptions::Mechanism::kCurve ? "CURVE" : "plain TCP",
              (*server)->endpoint().c_str());
  std::fflush(stdout);
  ThrowIfError((*server)->Serve());
  std::printf("job finished\n");
}

// engine::RunCoordinator with socket security: bind, serve, print the table.
void Serve(const CoordinatorFlags& flags, const comm::SecurityOptions& security) {
  comm::ZmqOptions zmq;
  zmq.security = security;
  auto server = comm::RendezvousServer::Bind(flags.options.listen, flags.options.world_size, zmq);
  if (!server.ok()) {
    if (server.status().code() == Status::Code::kIOError) throw UsageError(server.status().message());
    ThrowIfError(server.status());
  }
  std::printf("coordinator listening on %s (%s)\n", (*server)->endpoint().c_str(),
              security.mechanism == comm::SecurityOptions::Mechanism::kCurve ? "CURVE" : "plain TCP");
  std::fflush(stdout);
  auto table = (*server)->Serve(flags.options.timeout);
  ThrowIfError(table.status());
  for (const auto& p : *table) {
    std::printf("rank %d  cluster %s  %s%s%s\n", p.rank, p.cluster.c_str(), p.endpoint.c_str(),
                p.public_key.empty() ? "" : "  key ", comm::KeyFingerprint(p.public_key).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void AddCoordinatorCommand(CLI::App& app) {
  auto flags = std::make_shared<CoordinatorFlags>();
  CLI::App* cmd = app.add_subcommand("coordinator", "Rendezvous point of a multi-host run (frugal worker --coordinator)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--listen", flags->options.listen, "Address to bind, e.g. tcp://10.0.0.1:29500")
      ->required()
      ->check(TcpEndpoint(/*listening=*/true));
  cmd->add_option("--world", flags->options.world_size, "Number of workers")
      ->required()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--timeout-s", flags->timeout_s, "How long to wait for all workers")->check(Bounded(0.001, 86400));
  cmd->add_option("--key", flags->key, "This process's CurveZMQ key pair (frugal keys generate --out FILE)");
  cmd->add_option("--authorized-keys", flags->authorized_keys,
                  "Public keys allowed to join, one per line (the .pub lines of every site)");
  cmd->add_flag("--insecure", flags->insecure, "Plain TCP without keys: anyone who can reach the port can join");
  cmd->add_flag("--elastic", flags->options.elastic,
                "Serve the job's membership until it ends: workers may join, leave and fail (frugal worker --elastic)");
  cmd->add_option("--min-workers", flags->options.min_workers, "Elastic: fewest workers the job continues with")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--heartbeat-timeout-s", flags->heartbeat_timeout_s,
                  "Elastic: a worker silent this long is dead if its host refuses connections to it (process died)")
      ->check(Bounded(0.1, 3600));
  cmd->add_option("--link-grace-s", flags->link_grace_s,
                  "Elastic: a silent worker whose host does not answer (link down) is dead only after this long")
      ->check(Bounded(0, 86400));
  cmd->callback([flags] {
    flags->options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags->timeout_s * 1000));
    const comm::SecurityOptions security =
        ResolveSecurity(flags->key, flags->authorized_keys, flags->insecure, flags->options.listen);
    if (flags->options.elastic) return ServeElastic(*flags, security);
    Serve(*flags, security);
  });
}

}  // namespace frugal::cli
