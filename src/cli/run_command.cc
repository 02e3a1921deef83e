// `frugal run`: a torchrun-style launcher for the user's own training
// program (a Python script using the frugal package, or anything else that
// joins through the FRUGAL_* environment).
//
//   frugal run --workers 4 -- /usr/bin/python3 train.py --epochs 2
//
// Local form (no --coordinator): runs the coordinator in this process on
// loopback and N child processes, rank r with FRUGAL_RANK=r. Multi-host form:
// `frugal coordinator --listen tcp://IP:PORT --world W` on one host and
// `frugal run --workers N --coordinator tcp://IP:PORT --cluster NAME
// --key site.key --authorized-keys authorized_keys -- ...` on each. Before
// starting its children the launcher reserves their ranks from the
// coordinator (Note [Rank reservations] in src/comm/membership/rendezvous.cc), so that
// either form gives every child torch.distributed's environment (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as
// torchrun does, with FRUGAL_RANK equal to RANK. The children listen on
// tcp://0.0.0.0:* in the multi-host form and advertise this host's address
// on the route to the coordinator (comm::AdvertisedEndpoint); --port-range
// A-B gives each child a port of that range and torch's store another.
// --key, --authorized-keys and --insecure are resolved as
// `frugal worker` resolves them (a non-loopback coordinator without keys is
// refused) and reach the program's frugal.init() as FRUGAL_KEY,
// FRUGAL_AUTHORIZED_KEYS and FRUGAL_INSECURE; in the local form, keys also
// secure the in-process coordinator. Either way the children are supervised
// as `frugal train` supervises its workers: the first failure is reported
// ("worker 1 failed (exit code 1)"), the others get --timeout-s plus a grace
// period to notice and exit, then are killed; exit code 1.
//
// Children are started and supervised by engine::ProcessLauncher and
// engine::SuperviseProcesses, the code behind `frugal train --workers N`.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include <climits>
#include <cstdlib>

#include "commands.h"
#include "input_checks.h"
#include "frugal/comm/transport/address.h"
#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/transport/security.h"
#include "frugal/engine/run_config.h"
#include "frugal/engine/launcher.h"

namespace frugal::cli {

namespace {

struct RunFlags {
  int workers = 1;
  std::string coordinator;  // empty: run one in this process
  std::string cluster = "local";
  std::string local_clusters;
  std::string listen;  // empty: loopback locally, tcp://0.0.0.0:* with --coordinator
  std::string advertise_host;
  std::string port_range;
  double timeout_s = 60;
  double rendezvous_timeout_s = 120;
  double link_grace_s = 30;
  int threads = 0;
  std::string key;
  std::string authorized_keys;
  bool insecure = false;
  // Elastic (Note [Elastic scripts] in python/frugal/_model.py): a membership
  // coordinator instead of the rendezvous; min_workers 0: 1.
  bool elastic = false;
  int min_workers = 0;
  int max_workers = 0;  // 0: no limit
  bool join = false;    // add the workers to a running elastic job at --coordinator
  double heartbeat_timeout_s = 2.0;
  int64_t elastic_every = 0;  // 0: auto (engine::ElasticEveryOf, resolved by the script's model)
  int gpus_per_worker = 0;    // 0: CUDA_VISIBLE_DEVICES is left as it is (Note [Devices per worker])
  std::vector<std::string> command;
};

// The children may run in another directory: key files go to them as
// absolute paths.
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return path;  // ResolveSecurity has already named a missing file
  std::string out(resolved);
  std::free(resolved);
  return out;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
  return out;
}

// Note [Devices per worker]: with --gpus-per-worker G and
// CUDA_VISIBLE_DEVICES listing this launcher's devices (a cluster agent
// with --gpus sets it, Note [Device slots] in src/cluster/agent.cc), local
// worker r sees devices r*G .. r*G+G-1 of that list as its cuda:0..G-1, so
// no two workers share a GPU. Without CUDA_VISIBLE_DEVICES nothing changes
// (a CPU host, or a script that picks its devices itself); a list shorter
// than --workers x G is refused.
std::vector<std::string> VisibleDevices() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible == nullptr || *visible == '\0' ? std::vector<std::string>{} : SplitCommas(visible);
}

void CheckDeviceFlags(const RunFlags& f) {
  if (f.gpus_per_worker < 0 || f.gpus_per_worker > 64) {
    throw UsageError("--gpus-per-worker must be in [1, 64] (or 0: leave CUDA_VISIBLE_DEVICES alone), got " +
                     std::to_string(f.gpus_per_worker));
  }
  const std::vector<std::string> devices = VisibleDevices();
  if (f.gpus_per_worker > 0 && !devices.empty() &&
      devices.size() < static_cast<size_t>(f.workers) * static_cast<size_t>(f.gpus_per_worker)) {
    throw UsageError("--gpus-per-worker " + std::to_string(f.gpus_per_worker) + " for " + std::to_string(f.workers) +
                     " workers needs " + std::to_string(f.workers * f.gpus_per_worker) +
                     " devices, and CUDA_VISIBLE_DEVICES lists " + std::to_string(devices.size()));
  }
}

void CheckElasticFlags(const RunFlags& f) {
  if (!f.elastic) {
    if (f.join) throw UsageError("--join adds workers to an elastic job: add --elastic");
    if (f.min_workers != 0 || f.max_workers != 0) throw UsageError("--min-workers and --max-workers need --elastic");
    return;
  }
  if (f.join && f.coordinator.empty()) {
    throw UsageError("--join needs the running job's coordinator: --coordinator tcp://HOST:PORT");
  }
  if (f.min_workers < 0 || (!f.join && f.min_workers > f.workers)) {
    throw UsageError("--min-workers must be in [1, --workers=" + std::to_string(f.workers) + "], got " +
                     std::to_string(f.min_workers));
  }
  if (f.max_workers != 0 && (f.max_workers < f.workers || f.max_workers < f.min_workers)) {
    throw UsageError("--max-workers must be >= --workers and --min-workers, got " + std::to_string(f.max_workers));
  }
  if (!(f.heartbeat_timeout_s >= 0.1 && f.heartbeat_timeout_s <= 3600)) {
    throw UsageError("--heartbeat-timeout-s must be in [0.1, 3600]");
  }
  if (f.elastic_every < 0) {
    throw UsageError("--elastic-every must be >= 1 (or 0: auto), got " + std::to_string(f.elastic_every));
  }
}

void CheckFlags(const RunFlags& f, const std::vector<std::string>& clusters) {
  if (f.command.empty()) throw UsageError("frugal run needs a program: frugal run --workers N -- PROGRAM ARGS...");
  if (Result<std::string> program = Env::Default().FindProgram(f.command[0]); !program.ok()) {
    throw UsageError("cannot start " + program.status().message());
  }
  if (f.workers < 1 || f.workers > engine::kMaxLocalWorkers) {
    throw UsageError("--workers must be in [1, " + std::to_string(engine::kMaxLocalWorkers) + "], got " +
                     std::to_string(f.workers) + " (frugal run starts every worker on this machine)");
  }
  if (f.threads < 0 || f.threads > 1024) throw UsageError("--threads must be in [0, 1024], got " + std::to_string(f.threads));
  if (!(f.timeout_s > 0)) throw UsageError("--timeout-s must be > 0");
  if (!(f.link_grace_s >= 0 && f.link_grace_s <= 86400)) throw UsageError("--link-grace-s must be in [0, 86400]");
  if (!(f.rendezvous_timeout_s > 0)) throw UsageError("--rendezvous-timeout-s must be > 0");
  CheckElasticFlags(f);
  if (!clusters.empty() && static_cast<int>(clusters.size()) != f.workers) {
    throw UsageError("--local-clusters names " + std::to_string(clusters.size()) + " clusters for " +
                     std::to_string(f.workers) + " workers");
  }
  if (!f.coordinator.empty() && !clusters.empty()) {
    throw UsageError("--local-clusters is for the local form; with --coordinator give --cluster");
  }
  if (!f.coordinator.empty()) {
    const std::string problem = EndpointProblem(f.coordinator, /*listening=*/false);
    if (!problem.empty()) throw UsageError("--coordinator: " + problem);
  }
  if (!f.listen.empty()) {
    const std::string problem = EndpointProblem(f.listen, /*listening=*/true);
    if (!problem.empty()) throw UsageError("--listen: " + problem);
  }
  if (!f.port_range.empty()) {
    ThrowIfError(comm::ParsePortRange(f.port_range).status());
    if (!f.listen.empty() && f.listen.substr(f.listen.rfind(':')) != ":*") {
      throw UsageError("--port-range gives each worker its port: --listen must end in :*, got " + f.listen);
    }
  }
}

// Where the children listen, and the address and port of torch.distributed's
// store if this launcher holds rank 0. Resolved once, before any child
// starts, so that a port range too small or taken, or an address peers
// could not reach, fails here with one message.
struct ListenPlan {
  std::vector<std::string> listen;  // one per child
  std::string host;                 // this host's address for the peers (and the store)
  std::string interface;            // the network interface holding `host`, if it is this host's
  int store_port = 0;
};

ListenPlan PlanListening(const RunFlags& f, const std::string& coordinator) {
  const bool local = f.coordinator.empty();
  const std::string listen = !f.listen.empty() ? f.listen : local ? "tcp://127.0.0.1:*" : "tcp://0.0.0.0:*";
  const std::string bind_host = comm::EndpointHost(listen);
  ListenPlan plan;
  // The advertised host of a listener on this address (the port is a stand-in).
  auto advertised = comm::AdvertisedEndpoint("tcp://" + listen.substr(6, listen.rfind(':') - 6) + ":1",
                                             f.advertise_host, coordinator);
  if (!advertised.ok()) throw UsageError(advertised.status().message());
  plan.host = comm::EndpointHost(*advertised);
  plan.interface = comm::InterfaceOfAddress(plan.host);
  if (f.port_range.empty()) {
    plan.listen.assign(f.workers, listen);
    // torch's store listens on every interface.
    auto port = comm::FreeTcpPort("0.0.0.0");
    ThrowIfError(port.status().WithContext("a port for torch.distributed's store"));
    plan.store_port = *port;
    return plan;
  }
  // One port per child, and one for torch's store (MASTER_PORT).
  auto ports = comm::FreePortsInRange(bind_host, *comm::ParsePortRange(f.port_range), f.workers + 1);
  if (!ports.ok()) {
    throw UsageError(ports.status().message() + " (" + std::to_string(f.workers) +
                     " workers: one port each and one for torch.distributed's store)");
  }
  const std::string prefix = listen.substr(0, listen.rfind(':') + 1);
  for (int r = 0; r < f.workers; ++r) plan.listen.push_back(prefix + std::to_string((*ports)[r]));
  plan.store_port = ports->back();
  return plan;
}

// Who the children are in the world: their global ranks, the world size and
// rank 0's store. Locally that is known; across hosts it is reserved from
// the coordinator (Note [Rank reservations]).
comm::RankReservation PlaceChildren(const RunFlags& f, const ListenPlan& plan, const comm::SecurityOptions& security) {
  comm::RankReservation r;
  if (f.elastic && !f.coordinator.empty()) {
    // The membership coordinator assigns ranks per generation; FRUGAL_RANK
    // is the local index only, and torch.distributed's variables are not set.
    for (int i = 0; i < f.workers; ++i) r.ranks.push_back(i);
    r.world_size = f.workers;
    return r;
  }
  if (f.coordinator.empty()) {
    for (int i = 0; i < f.workers; ++i) r.ranks.push_back(i);
    r.world_size = f.workers;
    r.master_host = plan.host;
    r.master_port = plan.store_port;
    return r;
  }
  comm::ZmqOptions zmq;
  zmq.security = security;
  auto reserved = comm::ReserveRanks(f.coordinator, {f.workers, plan.host, plan.store_port},
                                     std::chrono::milliseconds(static_cast<int64_t>(f.rendezvous_timeout_s * 1000)),
                                     zmq);
  if (!reserved.ok()) {
    std::string hint;
    if (reserved.status().message().find("unknown op") != std::string::npos) {
      hint = " (frugal run needs a fixed-world coordinator: frugal coordinator without --elastic)";
    }
    ThrowIfError(reserved.status().WithContext("reserving ranks for " + std::to_string(f.workers) + " workers" + hint));
  }
  const std::vector<int>& ranks = reserved->ranks;
  std::string list;
  for (int k : ranks) list += (list.empty() ? "" : ",") + std::to_string(k);
  std::fprintf(stderr, "frugal run: ranks %s of %d on this host (%s)", list.c_str(), reserved->world_size,
               plan.host.c_str());
  if (reserved->master_host.empty() || reserved->master_port == 0) {
    std::fprintf(stderr, "; rank 0 is not a frugal run worker, so MASTER_ADDR and MASTER_PORT are not set\n");
  } else {
    std::fprintf(stderr, "; torch.distributed's store at %s:%d\n", reserved->master_host.c_str(),
                 reserved->master_port);
  }
  return *reserved;
}

// As `frugal worker`: the coordinator's address decides whether keys are
// needed. Checked here, before any child starts, so a refused run fails at
// once with the CLI's message rather than in every child.
comm::SecurityOptions CheckSecurity(const RunFlags& f) {
  return ResolveSecurity(f.key, f.authorized_keys, f.insecure,
                         f.coordinator.empty() ? std::string("tcp://127.0.0.1:0") : f.coordinator);
}

// The FRUGAL_* variables of child `r` and torch.distributed's env:// ones
// (so an unchanged DDP script starts as under torchrun), as "KEY=VALUE"
// overrides of this process's environment.
std::vector<std::string> ChildEnvironment(const RunFlags& f, int r, const std::string& endpoint,
                                          const std::vector<std::string>& clusters, int threads,
                                          const ListenPlan& plan, const comm::RankReservation& world) {
  const bool local = f.coordinator.empty();
  const int rank = world.ranks[r];
  std::map<std::string, std::string> env = {
      {"FRUGAL_COORDINATOR", endpoint},
      {"FRUGAL_RANK", std::to_string(rank)},
      {"FRUGAL_WORLD_SIZE", std::to_string(world.world_size)},
      {"FRUGAL_LOCAL_RANK", std::to_string(r)},
      {"FRUGAL_CLUSTER", clusters.empty() ? f.cluster : clusters[r]},
      {"FRUGAL_LISTEN", plan.listen[r]},
      {"FRUGAL_TIMEOUT_S", std::to_string(f.timeout_s)},
      {"FRUGAL_LINK_GRACE_S", std::to_string(f.link_grace_s)},
      {"FRUGAL_RENDEZVOUS_TIMEOUT_S", std::to_string(f.rendezvous_timeout_s)},
      {"FRUGAL_THREADS", std::to_string(threads)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world.world_size)},
      {"LOCAL_RANK", std::to_string(r)},
      {"LOCAL_WORLD_SIZE", std::to_string(f.workers)},
  };
  if (!world.master_host.empty() && world.master_port > 0) {
    env["MASTER_ADDR"] = world.master_host;
    env["MASTER_PORT"] = std::to_string(world.master_port);
  }
  // Every child advertises the host the launcher resolved (the peers' view of it).
  if (!local) env["FRUGAL_ADVERTISE_HOST"] = plan.host;
  // Note [Gloo's interface]
  // torch.distributed's gloo backend binds the address this host's name
  // resolves to, 127.0.1.1 on stock Debian: its peers on other hosts cannot
  // connect. Off loopback, unless the user chose one, it is pointed at the
  // interface that holds the address the workers advertise.
  if (!local && std::getenv("GLOO_SOCKET_IFNAME") == nullptr && !plan.interface.empty()) {
    env["GLOO_SOCKET_IFNAME"] = plan.interface;
  }
  if (!f.advertise_host.empty()) env["FRUGAL_ADVERTISE_HOST"] = f.advertise_host;
  if (const std::vector<std::string> devices = VisibleDevices(); f.gpus_per_worker > 0 && !devices.empty()) {
    std::string own;  // Note [Devices per worker].
    for (int k = 0; k < f.gpus_per_worker; ++k) own += (k ? "," : "") + devices[r * f.gpus_per_worker + k];
    env["CUDA_VISIBLE_DEVICES"] = own;
  }
  if (!f.key.empty()) env["FRUGAL_KEY"] = Absolute(f.key);
  if (!f.authorized_keys.empty()) env["FRUGAL_AUTHORIZED_KEYS"] = Absolute(f.authorized_keys);
  if (f.insecure) env["FRUGAL_INSECURE"] = "1";
  if (f.elastic) {
    env["FRUGAL_ELASTIC"] = "1";
    env["FRUGAL_JOIN"] = f.join ? "1" : "0";
    env["FRUGAL_MAX_WORKERS"] = std::to_string(f.max_workers);
    env["FRUGAL_HEARTBEAT_TIMEOUT_S"] = std::to_string(f.heartbeat_timeout_s);
    env["FRUGAL_ELASTIC_EVERY"] = std::to_string(f.elastic_every);
    env.erase("FRUGAL_WORLD_SIZE");  // a generation's size changes
  }
  // Workers sharing the cores should not each start one thread per core.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) env["OMP_NUM_THREADS"] = std::to_string(threads);
  std::vector<std::string> overrides;
  for (const auto& [k, v] : env) overrides.push_back(k + "=" + v);
  return overrides;
}

// The coordinator serves on its own thread. Its state is shared with that
// thread so that, once every child has exited, the launcher can leave
// without waiting out the coordinator's timeout (children that never
// joined, or failed before joining).
struct CoordinatorState {
  std::atomic<bool> bound{false};
  std::atomic<bool> done{false};
  std::string endpoint;
  Status status;
};

// Starts this host's coordinator (fixed world or elastic) and waits until
// it is bound; its endpoint is in the state.
std::shared_ptr<CoordinatorState> StartCoordinator(const RunFlags& f, const comm::SecurityOptions& security) {
  auto cs = std::make_shared<CoordinatorState>();
  engine::CoordinatorOptions co;
  co.world_size = f.workers;
  co.zmq.security = security;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.rendezvous_timeout_s * 1000));
  co.elastic = f.elastic;
  co.min_workers = f.min_workers > 0 ? f.min_workers : 1;  // as frugal train --elastic
  co.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.heartbeat_timeout_s * 1000));
  co.link_grace = std::chrono::milliseconds(static_cast<int64_t>(f.link_grace_s * 1000));
  std::thread([cs, co] {
    Status s = engine::RunCoordinator(co, [&](const std::string& ep) {
      cs->endpoint = ep;
      cs->bound = true;
    }, false);
    cs->status = s;
    cs->done = true;
    cs->bound = true;  // also on a bind failure
  }).detach();
  while (!cs->bound) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (cs->endpoint.empty()) {
    while (!cs->done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ThrowIfError(cs->status.WithContext("starting the coordinator"));
  }
  if (f.elastic) {
    std::fprintf(stderr, "frugal run: elastic coordinator at %s (more workers: frugal run --elastic --join "
                 "--coordinator %s --workers N -- PROGRAM ...)\n", cs->endpoint.c_str(), cs->endpoint.c_str());
  }
  return cs;
}

void Run(const RunFlags& f) {
  const std::vector<std::string> clusters = SplitCommas(f.local_clusters);
  CheckFlags(f, clusters);
  CheckDeviceFlags(f);
  const comm::SecurityOptions security = CheckSecurity(f);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  const bool local = f.coordinator.empty();

  std::shared_ptr<CoordinatorState> cs = local ? StartCoordinator(f, security) : nullptr;
  const std::string endpoint = local ? cs->endpoint : f.coordinator;

  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, cores / static_cast<unsigned>(f.workers)));
  const ListenPlan plan = PlanListening(f, endpoint);
  const comm::RankReservation world = PlaceChildren(f, plan, security);
  Env& env = Env::Default();
  std::unique_ptr<engine::ProcessLauncher> launcher = engine::NewProcessLauncher(env);
  std::vector<engine::ProcessLauncher::Id> ids;
  Status spawn_error;
  for (int r = 0; r < f.workers; ++r) {
    std::vector<std::string> overrides = ChildEnvironment(f, r, endpoint, clusters, threads, plan, world);
    auto id = launcher->Spawn(f.command[0], std::vector<std::string>(f.command.begin() + 1, f.command.end()),
                              overrides);
    if (!id.ok()) {
      spawn_error = id.status();
      break;
    }
    ids.push_back(*id);
  }
  // An elastic job goes on without a child that died while the coordinator
  // keeps at least --min-workers; its outcome is then the coordinator's.
  const bool tolerate = f.elastic && local;
  ThrowIfError(engine::SuperviseProcesses(ids, spawn_error, timeout + std::chrono::seconds(10), tolerate, *launcher,
                                          env));
  if (tolerate) {
    // Every child has exited: the coordinator ends once it has seen them
    // finish, leave or go silent (a heartbeat timeout per round).
    const auto deadline =
        env.Now() + 4 * std::chrono::milliseconds(static_cast<int64_t>(f.heartbeat_timeout_s * 1000)) +
        std::chrono::seconds(5);
    while (!cs->done && env.Now() < deadline) env.SleepFor(std::chrono::milliseconds(20));
    if (!cs->done) ThrowIfError(Status::Unavailable("every worker exited before the elastic job finished"));
    ThrowIfError(cs->status.WithContext("elastic job"));
  }
  // Every child succeeded; a coordinator still waiting means some never
  // joined a world, which is their business (a program may not use Frugal).
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run your own training program on N workers (frugal run --workers N -- python3 train.py ...)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--workers", f->workers, "Processes to start on this machine");
  cmd->add_option("--coordinator", f->coordinator,
                  "Coordinator of a multi-host run, tcp://HOST:PORT (default: one in this process, loopback)");
  cmd->add_option("--cluster", f->cluster, "Cluster name of the workers started here");
  cmd->add_option("--local-clusters", f->local_clusters, "Comma-separated cluster of each local worker, e.g. a,a,b,b");
  cmd->add_option("--listen", f->listen,
                  "Where each worker receives (default: tcp://127.0.0.1:* locally, tcp://0.0.0.0:* with --coordinator)");
  cmd->add_option("--advertise-host", f->advertise_host,
                  "Host peers connect to when --listen is a wildcard (default: this host's address towards the coordinator)");
  cmd->add_option("--port-range", f->port_range,
                  "Ports the workers listen on, FIRST-LAST: one per worker and one for torch.distributed's store");
  cmd->add_option("--timeout-s", f->timeout_s, "Bound on every network wait, seconds");
  cmd->add_option("--link-grace-s", f->link_grace_s,
                  "A peer whose link is down is kept this long, seconds (a dead process is noticed within a second or two)");
  cmd->add_option("--rendezvous-timeout-s", f->rendezvous_timeout_s,
                  "How long workers may take to start and join (imports included), seconds");
  cmd->add_option("--threads", f->threads, "Torch threads per worker (0 = cores / workers)");
  cmd->add_option("--key", f->key, "This site's CurveZMQ key pair (frugal keys generate --out FILE), for every worker");
  cmd->add_option("--authorized-keys", f->authorized_keys, "Public keys of every site of the job, one per line");
  cmd->add_flag("--insecure", f->insecure, "Plain TCP to a non-loopback coordinator: anyone who can reach a port can join");
  cmd->add_flag("--elastic", f->elastic,
                "Elastic job: a worker that dies or leaves (SIGTERM) does not end the run while --min-workers remain; "
                "workers may join (--join)");
  cmd->add_option("--min-workers", f->min_workers, "Elastic: fewest workers the job continues with (default 1, as frugal train --elastic)");
  cmd->add_option("--max-workers", f->max_workers, "Elastic: a joiner beyond this many workers is refused (0 = no limit)");
  cmd->add_flag("--join", f->join, "Elastic: add these workers to the running job at --coordinator");
  cmd->add_option("--heartbeat-timeout-s", f->heartbeat_timeout_s,
                  "Elastic: a worker silent this long is declared dead, seconds");
  cmd->add_option("--elastic-every", f->elastic_every,
                  "Elastic: steps between membership checks and in-memory snapshots (0 = auto: 10, in the local "
                  "modes a multiple of the steps between two fragments' rounds)");
  cmd->add_option("--gpus-per-worker", f->gpus_per_worker,
                  "Give each worker its own this many of CUDA_VISIBLE_DEVICES's devices (0: leave it alone)");
  cmd->add_option("command", f->command, "The program and its arguments, after --")->expected(-1);
  cmd->callback([f] { Run(*f); });
}

}  // namespace frugal::cli
