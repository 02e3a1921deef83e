// engine::RunConfig: every option of a (distributed) training run, as typed
// per-module structs, and the one field list from which the CLI flags, TOML
// reading and writing, Python keywords, validation and the cross-worker
// digest are all generated (common/field_list.h). Torch-free.
//
//   RunConfig c;                          // every default, written once
//   SetOption(&c, "density", "0.04");     // TOML / Python / tests
//   Validate(c);                          // at the edge, once
//   ToToml(c);                            // runs/<run>/config.toml
//   SharedDigest(c);                      // what every worker must agree on
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "frugal/comm/algorithms/sparse_exchange.h"
#include "frugal/common/field_list.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/engine/adaptation.h"
#include "frugal/train/train_fields.h"

template <>
struct frugal::EnumNames<frugal::comm::ExchangeAlgorithm> {
  static constexpr std::pair<comm::ExchangeAlgorithm, const char*> kTable[] = {
      {comm::ExchangeAlgorithm::kAuto, "auto"},
      {comm::ExchangeAlgorithm::kFlat, "flat"},
      {comm::ExchangeAlgorithm::kHierarchical, "hierarchical"},
      {comm::ExchangeAlgorithm::kSharded, "sharded"}};
};

namespace frugal::engine {

// How the replicas synchronise: every step (the gradient pipeline), or
// every local_steps inner steps with an outer step (include/frugal/engine/local_sync.h),
// each worker a replica (local) or each cluster one (site: its members
// average their gradients every step, Note [Site replicas] in
// sync_strategy.cc); auto chooses for the run (SyncOf).
enum class SyncMode { kAuto, kStep, kLocal, kSite };

// Whether the mode trains in local-update rounds (LocalSync): local and site.
constexpr bool IsLocalUpdates(SyncMode s) { return s == SyncMode::kLocal || s == SyncMode::kSite; }

// Whether message values are deflated (codec.h, kDeflatedValues): auto is on
// with --sync local, where with overlapped rounds each rank tries rounds
// with and without it and keeps the mode that trains faster
// (Note [Deflate by trial] in deflate_trial.cc), and off with --sync step, whose
// controller models the bytes of undeflated values (WireFormatOf).
enum class DeflateMode { kAuto, kOn, kOff };

// Where --sync local takes its inner steps
// (Note [Inner steps on the device] in device_inner.cc): on a host copy of the parameters, or on the
// model's own tensors on their device; auto: the device unless it is the CPU.
enum class LocalInner { kAuto, kHost, kDevice };

}  // namespace frugal::engine

template <>
struct frugal::EnumNames<frugal::engine::LocalInner> {
  static constexpr std::pair<engine::LocalInner, const char*> kTable[] = {
      {engine::LocalInner::kAuto, "auto"}, {engine::LocalInner::kHost, "host"}, {engine::LocalInner::kDevice, "device"}};
};

template <>
struct frugal::EnumNames<frugal::engine::DeflateMode> {
  static constexpr std::pair<engine::DeflateMode, const char*> kTable[] = {
      {engine::DeflateMode::kAuto, "auto"}, {engine::DeflateMode::kOn, "on"}, {engine::DeflateMode::kOff, "off"}};
};

template <>
struct frugal::EnumNames<frugal::engine::SyncMode> {
  static constexpr std::pair<engine::SyncMode, const char*> kTable[] = {
      {engine::SyncMode::kAuto, "auto"}, {engine::SyncMode::kStep, "step"}, {engine::SyncMode::kLocal, "local"},
      {engine::SyncMode::kSite, "site"}};
};

namespace frugal::engine {

// What each message carries (compress).
struct CompressionOptions {
  // Fraction of each gradient bucket sent per step (per round with --sync
  // local), (0, 1]; 0: the mode's default (DensityOf). --sync step: 3%, where
  // int4 codes send about the bytes of fp16 at 1% and converge like a denser
  // exchange. --sync local: 1, whole int4 rounds with no index bytes, which
  // ended mlp and gpt-tiny closest to DDP.
  double density = 0;
  int64_t density_warmup_steps = 0;  // WarmupDensity (gradient_pipeline.h); 0 = off
  int64_t dense_bucket_max = 0;      // WholeBuckets (gradient_pipeline.h); 0 = off
  // WholeBuckets: the smallest buckets, together at most this share of the
  // model's values, are sent whole (cnn ended 0.37 points higher).
  double whole_bucket_share = 0.02;
  compress::SparsifierKind sparsifier = compress::SparsifierKind::kBlock;
  compress::ValueEncoding value_encoding = compress::ValueEncoding::kInt4;
  // zlib over each message's values where that saves bytes (codec.h,
  // kDeflatedValues; docs/design/kernels.md, "Deflated values"): 35% fewer bytes
  // for mlp's whole int4 rounds. auto: see DeflateMode.
  DeflateMode deflate = DeflateMode::kAuto;
  double dgc_momentum = 0.0;  // error-feedback momentum correction (0 = off)
};

template <class V>
void VisitFields(CompressionOptions& o, V&& visit) {
  const char* d = "Distributed";
  visit(Field("density", d,
              "Fraction of each gradient bucket sent per step, or per round with --sync local (0: 0.03 with "
              "--sync step, 1 with --sync local)")
            .Min(0)
            .Max(1),
        o.density);
  visit(Field("density_warmup_steps", d,
              "Steps over which the density falls geometrically from 25% to --density (DGC's warm-up; 0 = off)")
            .NonNegative().Max(1000000000),
        o.density_warmup_steps);
  visit(Field("dense_bucket_max", d,
              "Buckets of at most this many values (biases, small heads) are sent whole every step (0 = off)")
            .NonNegative().Max(int64_t{1} << 40),
        o.dense_bucket_max);
  visit(Field("whole_bucket_share", d,
              "The smallest gradient buckets, together at most this share of the model's values, are sent whole "
              "every step (0 = off)")
            .UnitInterval(),
        o.whole_bucket_share);
  visit(Field("sparsifier", d, "block, sampled_topk (exact top-k, fast), topk or randomk"), o.sparsifier);
  visit(Field("value_encoding", d, "Gradient values on the wire: fp32, fp16, bf16, int8 or int4 (error-fed rounding)"), o.value_encoding);
  visit(Field("deflate", d,
              "zlib-compress each message's values where that saves bytes: auto (with --sync local: tried with "
              "and without, kept while it trains faster), on or off"),
        o.deflate);
  visit(Field("dgc_momentum", d, "Error-feedback momentum correction (0 = off)").UnitInterval(), o.dgc_momentum);
}

// The step pipeline (--sync step; gradient_pipeline.h).
struct StepSyncOptions {
  // staleness 0 or 1: forward t uses the parameters after
  // t-1-staleness. Default 0: buckets still overlap backward, and 1 (forward
  // overlaps the whole exchange, StellaTrain's pipeline) diverged on cnn at
  // lr 0.05 momentum 0.9 density 1% and converged slower on mlp.
  int staleness = 0;
  double bucket_mb = 4.0;  // gradient bucket size (MB of fp32), parameters never split
  int cpu_threads = 0;     // CPU pipeline threads per worker; 0 = ResolveCpuThreads
  // On an accelerator, gradients leave and parameters return through pinned
  // buffers on a side stream (Note [Gradients off the GPU]); false = one
  // synchronous copy per parameter (the old path, for comparison).
  bool overlap_device_copies = true;
  // Hierarchical exchange: a cluster leader compresses its cluster's exact
  // sum with a residual of its own instead of merging its members'
  // messages (collective::LeaderMode, Note [Leader residual] in
  // src/collective/compressed_collective.cc). Default false: leaders merge.
  bool leader_residual = false;
};

template <class V>
void VisitFields(StepSyncOptions& o, V&& visit) {
  const char* d = "Distributed";
  visit(Field("staleness", d, "0 or 1: forward t uses the parameters after t-1-staleness").Min(0).Max(1), o.staleness);
  visit(Field("bucket_mb", d, "Gradient bucket size in MB of fp32").Positive().Max(4096), o.bucket_mb);
  visit(Field("cpu_threads", d,
              "CPU pipeline threads per worker (0 = auto: 2 with --device cpu; on a GPU the host's cores per "
              "worker on it, at most 4)")
            .PerWorker()
            .Min(0)
            .Max(256),
        o.cpu_threads);
  visit(Field("overlap_device_copies", d,
              "On a GPU: gradients and parameters cross through pinned buffers on a side stream, overlapped with "
              "backward (false: a synchronous copy per parameter)")
            .PerWorker(),
        o.overlap_device_copies);
  visit(Field("leader_residual", d,
              "Step mode, hierarchical exchange: each cluster leader compresses its cluster's sum with a residual "
              "of its own, at the run's density and wire format (false: leaders merge their members' messages)"),
        o.leader_residual);
}

// Local-update rounds (--sync local and site, DiLoCo-style; local_sync.h).
struct LocalSyncOptions {
  // Local-update mode (sync = local, DiLoCo-style): each worker takes
  // local_steps inner optimizer steps alone, then the workers exchange their
  // sparsified, error-fed parameter change and apply it with an outer
  // step: Nesterov-momentum SGD (DiLoCo's defaults: lr 0.7, momentum 0.9) or
  // plain averaging (lr 1, no momentum). outer_lr 0: the run's length in
  // rounds chooses (OuterOf). sync auto: see SyncOf. local_steps 16: the
  // round length of every local-mode measurement (docs/results.md).
  int64_t local_steps = 16;
  double outer_lr = 0;
  double outer_momentum = 0.9;  // 0 = plain outer SGD
  // true: the outer step's gain over plain averaging, outer_lr / (1 -
  // outer_momentum) (7 by default), decays with the inner learning-rate
  // schedule after its warm-up, down to 1 (Note [Outer annealing] in
  // local_sync.cc). On loopback it ended mlp at 88.01% instead of 87.74%
  // and gpt-tiny at a validation loss 1.2% lower.
  bool outer_anneal = true;
  // true: a fragment's exchange runs on a thread while the inner steps go
  // on, and its outer step lands local_delay steps later
  // (Note [Overlapped rounds] in local_sync.cc). false: the exchange blocks training.
  bool local_overlap = true;
  // Streaming DiLoCo's fragments (Note [Fragments] in local_sync.cc): the
  // parameters in local_fragments slices that sync in turn, one every
  // local_steps / local_fragments steps (0: the largest divisor of
  // local_steps up to kAutoLocalFragments). local_delay: with local_overlap,
  // the steps from a fragment's sync to its outer step (0: local_steps /
  // fragments, when the next fragment syncs). With one fragment the
  // overlapped outer step lands a whole round late, which on mlp at 10
  // Mbit/s ended 3 points lower; 4 fragments converged as the blocking
  // rounds and reached 88% in 0.62x their time.
  int64_t local_fragments = 0;
  int64_t local_delay = 0;
  // Where the inner steps run (LocalInner): on the device they take no
  // host copy of the parameters per step.
  LocalInner local_inner = LocalInner::kAuto;
  // --sync site: the values a cluster's members send each other every step
  // (ClusterAverage): bf16 (default, half the bytes) or fp32.
  compress::ValueEncoding site_values = compress::ValueEncoding::kBf16;
};

template <class V>
void VisitFields(LocalSyncOptions& o, V&& visit) {
  const char* l = "Local updates";
  visit(Field("local_steps", l, "--sync local: inner steps per round").Min(1).Max(1000000), o.local_steps);
  visit(Field("outer_lr", l,
              "--sync local: outer learning rate (0 = auto: DiLoCo's 0.7 with --outer-momentum when the run has "
              "at least 2 / (1 - outer momentum) rounds, else plain averaging, lr 1 without momentum)").SpeedNeutral()
            .NonNegative()
            .Max(10),
        o.outer_lr);
  visit(Field("outer_momentum", l, "--sync local: outer Nesterov momentum (0 = none)").SpeedNeutral().UnitInterval(),
        o.outer_momentum);
  visit(Field("outer_anneal", l,
              "--sync local: the outer step's gain, outer lr / (1 - outer momentum), decays with the inner "
              "learning-rate schedule down to 1 (plain averaging)").SpeedNeutral(),
        o.outer_anneal);
  visit(Field("local_overlap", l,
              "--sync local: exchange a fragment while the inner steps run, its outer step landing "
              "--local-delay steps later (false: the exchange blocks training)"),
        o.local_overlap);
  visit(Field("local_fragments", l,
              "--sync local: cut the parameters into this many fragments that sync in turn, one every "
              "local_steps / local_fragments steps (Streaming DiLoCo); must divide --local-steps (0 = the "
              "largest divisor of --local-steps up to 4)")
            .NonNegative()
            .Max(64),
        o.local_fragments);
  visit(Field("local_delay", l,
              "--sync local --local-overlap: steps from a fragment's sync to its outer step (0 = local_steps / "
              "local_fragments, when the next fragment syncs); at most --local-steps")
            .NonNegative()
            .Max(1000000),
        o.local_delay);
  visit(Field("local_inner", l,
              "--sync local: where the inner steps run: host (a CPU copy of the parameters; every step's "
              "gradients cross to it and the parameters back), device (the model's own tensors, torch operations "
              "on its device; the parameters cross only at syncs) or auto (device unless it is the CPU)")
            .PerWorker(),
        o.local_inner);
  visit(Field("site_values", l,
              "--sync site: gradient values a cluster's members send each other every step: bf16 (half the "
              "bytes, rounded to nearest even; every member sums the same rounded values) or fp32"),
        o.site_values);
}

// The exchange and its waits (comm).
struct NetworkOptions {
  comm::ExchangeAlgorithm exchange = comm::ExchangeAlgorithm::kAuto;
  double timeout_s = 60.0;        // bound on every network wait
  // A peer (or, at the coordinator, an elastic member) whose host does not
  // answer is waited for this long before it is lost; one whose host
  // refuses connections (process died) is lost within a second or two.
  double link_grace_s = 30.0;
};

template <class V>
void VisitFields(NetworkOptions& o, V&& visit) {
  const char* d = "Distributed";
  visit(Field("exchange", d,
              "auto, flat or hierarchical; sharded: a reduce-scatter and an all-gather of "
              "re-compressed shards, 2(N-1)/N of a round's bytes per worker instead of N-1"),
        o.exchange);
  visit(Field("timeout_s", d, "Bound on every network wait, seconds").SpeedNeutral().PerWorker().Positive().Max(86400), o.timeout_s);
  visit(Field("link_grace_s", d,
              "A peer whose link is down is kept this long, seconds; a dead process is still noticed within a "
              "second or two (waits end at --timeout-s all the same)").SpeedNeutral()
            .PerWorker()
            .NonNegative()
            .Max(86400),
        o.link_grace_s);
}

// The bandwidth controller (docs/design/controller.md).
struct AdaptationOptions {
  // auto: the controller wherever it can run (docs/design/controller.md); it
  // reaches the high target at 100 Mbit/s and 1 Gbit/s where a fixed 3%
  // does not.
  AdaptMode adapt = AdaptMode::kAuto;
  int64_t decide_every = 5;       // steps between controller decisions
  // The controller's objective density^a / iteration time
  // (Note [Density objective] in bandwidth_controller.cc).
  double adapt_density_exponent = 0.5;
};

template <class V>
void VisitFields(AdaptationOptions& o, V&& visit) {
  const char* d = "Distributed";
  visit(Field("adapt", d,
              "auto: the controller where frugal train/worker can run it (fixed world, --sync step, a planner "
              "model), else off; on: controller picks density and batch sizes; batch: batch sizes only; off: fixed "
              "--density"),
        o.adapt);
  visit(Field("decide_every", d, "Steps between controller decisions").Min(1), o.decide_every);
  visit(Field("adapt_density_exponent", d,
              "--adapt on: progress per step modelled as density^this; higher favours density over step time")
            .Positive().Max(4),
        o.adapt_density_exponent);
}

// The engine's options: one struct per concern, each with its field list
// next to it, and the few that choose between them. Fields are reached as
// config.distributed.density whichever part holds them.
struct DistributedOptions : CompressionOptions, StepSyncOptions, LocalSyncOptions, NetworkOptions,
                            AdaptationOptions {
  int workers = 4;  // worker processes `frugal train` starts; 1 = no engine
  // How the replicas synchronise (SyncMode); auto: SyncOf.
  SyncMode sync = SyncMode::kAuto;
  int64_t checksum_every = 100;   // compare replica checksums every N steps (0 = only at the end)
  double compute_slowdown = 1.0;  // stretch this worker's compute by this factor (experiments)
};

// Who this worker is; never shared through the config digest.
struct WorkerIdentity {
  std::string cluster = "local";             // this worker's cluster (topology-aware exchange)
  std::string coordinator;                   // tcp://HOST:PORT of the coordinator (frugal worker)
  int rank = -1;                             // -1: assigned by the coordinator
  std::string listen = "tcp://127.0.0.1:*";  // where this worker receives peers' messages
  std::string advertise_host;                // host peers connect to, if listen is a wildcard
  // Transport security (docs/design/security.md): CURVE with a key pair and an
  // allow-list; plain TCP only on loopback or with insecure.
  std::string key;              // CurveZMQ key pair file (frugal keys generate)
  std::string authorized_keys;  // public keys allowed to connect, one per line
  bool insecure = false;        // plain TCP to a non-loopback coordinator
};

// Elastic membership (comm/membership.h, docs/architecture.md "Membership
// generations"): workers may join, leave and die while the job runs.
struct ElasticOptions {
  bool elastic = false;  // off: a fixed world, any lost worker ends the run
  int min_workers = 1;   // the job fails when fewer remain (coordinator)
  // Steps between membership checks; each check also keeps an in-memory
  // snapshot that survivors roll back to after a failure. 0: auto
  // (ElasticEveryOf).
  int64_t elastic_every = 0;
  double heartbeat_timeout_s = 2.0;  // a worker silent this long is dead (coordinator)
  bool join = false;                 // frugal worker: join a running job
};

// Checkpoints of a distributed run (engine/checkpoint.h).
struct CheckpointOptions {
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0 = none
  std::string checkpoint_dir;    // empty = <runs_dir>/<run_name>/checkpoints; "{cluster}" in it: one directory
                                 // per cluster (Note [Per-site checkpoints] in checkpoint_manifest.cc)
  int keep_checkpoints = 3;      // newest complete checkpoints kept
  std::string resume_from;       // a step directory to continue from (frugal train --resume finds it)
};

struct RunConfig {
  train::TrainOptions train;
  DistributedOptions distributed;
  WorkerIdentity worker;
  CheckpointOptions checkpoint;
  ElasticOptions elastic;
};

inline constexpr int kMaxLocalWorkers = 256;

// --sync auto (Note [Sync auto] in run_config.cc): the local mode for a fixed
// world of 2 or more workers, the step mode where an option needs it
// (--elastic, --adapt on or batch, --staleness > 0, --density-warmup-steps)
// or with one worker. step and local are returned as set. A pure function of
// the configuration, so the launcher and every rank choose alike.
SyncMode SyncOf(const RunConfig& config);

template <class V>
void VisitFields(DistributedOptions& o, V&& visit) {
  const char* d = "Distributed";
  const char* l = "Local updates";
  visit(Field("workers", d, "Worker processes (train: started on this machine)")
            .PerWorker().Min(1).Max(kMaxLocalWorkers, "frugal train starts every worker on this machine"),
        o.workers);
  visit(Field("sync", l, "step: exchange gradients every step; local: every --local-steps steps exchange the "
                         "sparsified, error-fed parameter change and take an outer Nesterov step (DiLoCo-style); "
                         "site: as local with one replica per cluster, whose members average their gradients "
                         "every step; auto: local with 2 or more workers, unless --adapt on|batch, --staleness "
                         "or --density-warmup-steps asks for the step mode"),
        o.sync);
  VisitFields(static_cast<CompressionOptions&>(o), visit);
  VisitFields(static_cast<StepSyncOptions&>(o), visit);
  VisitFields(static_cast<LocalSyncOptions&>(o), visit);
  VisitFields(static_cast<NetworkOptions&>(o), visit);
  visit(Field("checksum_every", d, "Compare replica checksums every N steps (0 = at the end)").SpeedNeutral().NonNegative(),
        o.checksum_every);
  VisitFields(static_cast<AdaptationOptions&>(o), visit);
  visit(Field("compute_slowdown", d, "Stretch this worker's compute (experiments)").PerWorker().Min(1).Max(1000),
        o.compute_slowdown);
}

template <class V>
void VisitFields(WorkerIdentity& o, V&& visit) {
  const char* d = "Distributed";
  visit(Field("cluster", d, "This worker's cluster name").PerWorker().NonEmpty(), o.cluster);
  visit(Field("coordinator", d, "Coordinator address tcp://HOST:PORT (frugal worker)").PerWorker(), o.coordinator);
  visit(Field("rank", d, "This worker's rank (-1: assigned)").PerWorker().Min(-1).Max(65535), o.rank);
  visit(Field("listen", d, "Where this worker receives, e.g. tcp://0.0.0.0:*").PerWorker().NonEmpty(), o.listen);
  visit(Field("advertise_host", d, "Host peers connect to when --listen is a wildcard").SpeedNeutral().PerWorker(), o.advertise_host);
  const char* sec = "Security";
  visit(Field("key", sec, "CurveZMQ key pair file (frugal keys generate)").SpeedNeutral().PerWorker(), o.key);
  visit(Field("authorized_keys", sec, "Public keys allowed to connect, one per line").SpeedNeutral().PerWorker(), o.authorized_keys);
  visit(Field("insecure", sec, "Plain TCP without keys to a non-loopback coordinator").SpeedNeutral().PerWorker(), o.insecure);
}

template <class V>
void VisitFields(CheckpointOptions& o, V&& visit) {
  const char* c = "Checkpoints";
  visit(Field("checkpoint_every", c, "Write a checkpoint every N steps (0 = never)").SpeedNeutral().NonNegative(), o.checkpoint_every);
  visit(Field("checkpoint_dir", c, "Checkpoint directory (default: <runs-dir>/<run-name>/checkpoints); {cluster} in it gives each cluster its own").PerWorker(),
        o.checkpoint_dir);
  visit(Field("keep_checkpoints", c, "Newest checkpoints kept").SpeedNeutral().PerWorker().Min(1).Max(1000), o.keep_checkpoints);
  visit(Field("resume_from", c, "Checkpoint step directory to continue from").PerWorker(), o.resume_from);
}

template <class V>
void VisitFields(ElasticOptions& o, V&& visit) {
  const char* e = "Elastic";
  visit(Field("elastic", e, "Workers may join, leave and fail while the job runs"), o.elastic);
  visit(Field("min_workers", e, "Fewest workers the job continues with").PerWorker().Min(1).Max(65535), o.min_workers);
  visit(Field("elastic_every", e, "Steps between membership checks (and in-memory snapshots); 0 = auto: 10, in "
                                  "the local modes a multiple of local_steps / local_fragments").Min(0).Max(1000000),
        o.elastic_every);
  visit(Field("heartbeat_timeout_s", e, "A worker silent this long is declared dead").SpeedNeutral().PerWorker().Min(0.1).Max(3600),
        o.heartbeat_timeout_s);
  visit(Field("join", e, "frugal worker: join a running elastic job").PerWorker(), o.join);
}

template <class V>
void VisitFields(RunConfig& c, V&& visit) {
  train::VisitFields(c.train, visit);
  VisitFields(c.distributed, visit);
  VisitFields(c.worker, visit);
  VisitFields(c.checkpoint, visit);
  VisitFields(c.elastic, visit);
}

// Where a run's checkpoints go: checkpoint_dir, or <runs_dir>/<run_name>/checkpoints;
// "{cluster}" in checkpoint_dir is replaced by this worker's cluster.
std::string CheckpointDirOf(const RunConfig& config);

// Every field's range (numbers finite and in range), then the cross-field
// checks. The message names the option, as users type it (--flag).
Status Validate(const RunConfig& config);

// Sets the option `key` (snake_case or kebab-case) from its text form.
// Unknown keys and unparsable values are InvalidArgument naming them.
Status SetOption(RunConfig* config, const std::string& key, const std::string& text);
// Whether `key` names an option.
bool HasOption(const std::string& key);

// What the "auto" options of a run depend on besides the configuration.
struct HostFacts {
  int workers_on_host = 1;            // workers sharing this host's cores (--cpu-threads auto)
  bool controller_available = false;  // the bandwidth controller models this run's model (--adapt auto)
};

// Note [One resolver]
// Every "auto" that the configuration and the host decide before training
// is resolved here, once: sync (SyncOf), adapt
// (the controller wherever it can run: the step mode, a fixed world, a
// model it models), cpu_threads (ResolveCpuThreads), density (DensityOf),
// and with --sync local local_fragments (LocalFragmentsOf) and, for
// overlapped rounds, local_delay (LocalDelayOf), then elastic_every
// (ElasticEveryOf). `frugal train` writes the
// result to runs/<run>/config.toml, `frugal worker`, Worker::Create and the
// Python package resolve the same way, so a plan is the same whichever
// front end started the run. Idempotent: a resolved plan resolves to
// itself. Three choices stay for later, since what they depend on is not
// known yet: --sync local's exchange (the clusters of the world formed,
// LocalExchangeOf), its outer step (the run's length, RunOuterOf) and
// deflate (a trial during training, Note [Deflate by trial]).
RunConfig ResolvePlan(RunConfig config, const HostFacts& facts);

// The CPU pipeline threads of a worker: --cpu-threads, or for 0 (auto) 2
// when the model computes on the CPU (the cores are its: the second thread
// only overlaps one bucket's network wait with another's CPU stages; mlp at
// 100 Mbit/s and 9%: 0.199 -> 0.174 s per iteration, at 1 Gbit/s equal),
// else the host's cores shared among `workers_on_host` workers, between 1
// and 4. On a GPU the pipeline is what the iteration waits for.
int ResolveCpuThreads(const RunConfig& config, int workers_on_host);

// Every option as `key = value` TOML lines, in field-list order.
std::string ToToml(const RunConfig& config);

// Digest of every kShared field (exact: doubles by their bits). Workers
// whose digests differ run different configurations.
uint64_t SharedDigest(const RunConfig& config);
// The kShared keys, in field-list order (tests, docs).
std::vector<std::string> SharedKeys();
// The keys of the options that leave a step's speed alone (Field::SpeedNeutral),
// in field-list order: the cluster's speed profiles ignore them.
std::vector<std::string> SpeedNeutralKeys();

// Module options derived from the configuration. The wire format: varint
// block ids for the block sparsifier, delta varints for coordinate lists.
// (Inline: the Python DDP hook uses it without the engine library.)
inline compress::WireFormat WireFormatOf(compress::SparsifierKind sparsifier, compress::ValueEncoding values) {
  compress::WireFormat w;
  w.values = values;
  w.indices = sparsifier == compress::SparsifierKind::kBlock ? compress::IndexEncoding::kBlockVarint
                                                              : compress::IndexEncoding::kDeltaVarint;
  return w;
}
inline compress::WireFormat WireFormatOf(const DistributedOptions& o) {
  compress::WireFormat w = WireFormatOf(o.sparsifier, o.value_encoding);
  w.deflate = o.deflate == DeflateMode::kOn || (o.deflate == DeflateMode::kAuto && IsLocalUpdates(o.sync));
  return w;
}
// Wire bytes per selected value: the value plus its share of the index (one
// u32 per 16-value block, or ~2 bytes of varint otherwise). The controller's
// traffic model uses it.
double WireBytesPerValue(const DistributedOptions& o);
// The same for a combined (merged) update, which a cluster leader sends to
// the other clusters and broadcasts to its members: compress::MergedWireFormat
// (int4 codes travel as int8 there).
double MergedWireBytesPerValue(const DistributedOptions& o);
std::chrono::milliseconds TimeoutOf(const DistributedOptions& o);
// link_grace_s as a duration.
std::chrono::milliseconds LinkGraceOf(const DistributedOptions& o);
// The density sent: density, or for 0 the mode's default (kStepDensity with
// --sync step, kLocalDensity with --sync local).
constexpr double kStepDensity = 0.03;
constexpr double kLocalDensity = 1.0;
double DensityOf(const DistributedOptions& o);
// --sync local's exchange: exchange, or for auto the sharded exchange when
// the workers form one cluster (half the flat all-gather's bytes at 4
// workers, and whole int4 rounds ended mlp 0.2 points higher than over the
// flat exchange); with several
// clusters auto stays the topology-aware hierarchical exchange, which the
// sharded one is not.
comm::ExchangeAlgorithm LocalExchangeOf(const DistributedOptions& o, int num_clusters);
// --sync local's fragment count: local_fragments, or for 0 the largest
// divisor of local_steps up to kAutoLocalFragments.
constexpr int64_t kAutoLocalFragments = 4;
int64_t LocalFragmentsOf(const DistributedOptions& o);
// Steps between an elastic run's gates: elastic_every, or for 0 (auto)
// kElasticEvery in the step mode and, in the local modes, the largest
// multiple of local_steps / fragments up to kElasticEvery, at least one
// (Note [Elastic gates]). REQUIRES: sync and local_fragments resolved.
constexpr int64_t kElasticEvery = 10;
int64_t ElasticEveryOf(const RunConfig& config);
// --sync local's steps from a fragment's sync to its outer step: 0 when the
// exchange blocks, else local_delay, or for 0 local_steps / fragments.
int64_t LocalDelayOf(const DistributedOptions& o);
// --sync local's outer step for a run of total_steps: outer_lr and
// outer_momentum as set, or for outer_lr 0 (auto) DiLoCo's Nesterov step
// (kDiLoCoOuterLr, outer_momentum) when the run has at least
// MinNesterovRounds rounds of local_steps, else plain averaging (lr 1,
// momentum 0). The momentum carries about 1 / (1 - momentum) rounds (10 at
// 0.9); over fewer than twice that it never settles: on gpt-tiny's 12.5
// rounds plain averaging ended 1.9% lower in validation loss than the
// annealed Nesterov step, on mlp's 44 rounds the Nesterov step 0.4 points
// higher in accuracy. A pure
// function of the options and the planned steps, so every rank and a
// resumed run choose alike. total_steps 0: a run whose length in steps is
// not fixed (an elastic run, whose steps per epoch follow the world size
// without --global-batch): the Nesterov step, so that every generation
// keeps the outer state the first one built
// (Note [Local mode across worlds]).
struct OuterStep {
  double lr = 1;
  double momentum = 0;
  bool operator==(const OuterStep& o) const { return lr == o.lr && momentum == o.momentum; }
};
constexpr double kDiLoCoOuterLr = 0.7;
double MinNesterovRounds(double momentum);
OuterStep OuterOf(const DistributedOptions& o, int64_t total_steps);
// OuterOf for a run of `config` planned at total_steps: an elastic run's
// length counts only when --global-batch fixes it whatever the world size
// (Note [Outer step on resume] in worker_state.cc), else it is 0.
OuterStep RunOuterOf(const RunConfig& config, int64_t total_steps);

}  // namespace frugal::engine
