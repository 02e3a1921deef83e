#include "frugal/engine/run_config.h"

#include <algorithm>
#include <thread>

#include "frugal/engine/checkpoint_manifest.h"

namespace frugal::engine {

namespace {

std::string Snake(std::string key) {
  for (char& c : key) c = c == '-' ? '_' : c;
  return key;
}

// TOML text of a value: strings quoted and escaped, the rest bare.
template <class T>
std::string TomlValue(const T& v) {
  std::string text = FieldToText(v);
  if constexpr (std::is_same_v<T, std::string> || std::is_enum_v<T>) {
    std::string q = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  } else {
    return text;
  }
}

// The local-update mode's cross-field checks.
Status ValidateSync(const RunConfig& config) {
  const DistributedOptions& d = config.distributed;
  if (!IsLocalUpdates(SyncOf(config))) return Status::Ok();
  if (d.site_values != compress::ValueEncoding::kBf16 && d.site_values != compress::ValueEncoding::kFp32) {
    return Status::InvalidArgument(std::string("--site-values must be bf16 or fp32, got ") + NameOf(d.site_values));
  }
  if (NeedsController(d.adapt)) {
    return Status::InvalidArgument("--sync local runs with --adapt off for now (the controller does not choose "
                                   "--local-steps yet)");
  }
  if (d.staleness != 0) {
    return Status::InvalidArgument("--staleness applies to --sync step only; --sync local needs --staleness 0");
  }
  if (d.leader_residual) {
    return Status::InvalidArgument("--leader-residual applies to --sync step only (the local mode's leaders "
                                   "always compress with a residual): add --sync step, or drop it");
  }
  if (d.local_fragments > 0 && d.local_steps % d.local_fragments != 0) {
    return Status::InvalidArgument("--local-fragments " + std::to_string(d.local_fragments) +
                                   " must divide --local-steps " + std::to_string(d.local_steps) +
                                   " (each fragment syncs every --local-steps steps, one every "
                                   "local_steps / local_fragments; 0 picks a divisor)");
  }
  if (d.local_delay > 0 && !d.local_overlap) {
    return Status::InvalidArgument("--local-delay applies to overlapped rounds: add --local-overlap, or drop "
                                   "--local-delay");
  }
  if (d.local_delay > d.local_steps) {
    return Status::InvalidArgument("--local-delay " + std::to_string(d.local_delay) + " exceeds --local-steps " +
                                   std::to_string(d.local_steps) +
                                   ": a fragment's outer step must land before its next sync");
  }
  if (d.workers < 2) {  // one worker runs the single-process trainer, which has no outer step
    return Status::InvalidArgument("--sync local needs --workers 2 or more (with --workers 1 there is no "
                                   "pseudo-gradient to exchange: drop --sync local)");
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const RunConfig& config) {
  RunConfig& c = const_cast<RunConfig&>(config);  // the visitors only read
  Status first;
  VisitFields(c.distributed, [&](const Field& f, const auto& v) {
    if (first.ok()) first = CheckField(f, v);
  });
  VisitFields(c.worker, [&](const Field& f, const auto& v) {
    if (first.ok()) first = CheckField(f, v);
  });
  VisitFields(c.checkpoint, [&](const Field& f, const auto& v) {
    if (first.ok()) first = CheckField(f, v);
  });
  VisitFields(c.elastic, [&](const Field& f, const auto& v) {
    if (first.ok()) first = CheckField(f, v);
  });
  FRUGAL_RETURN_IF_ERROR(first);
  if (config.elastic.elastic && NeedsController(config.distributed.adapt)) {
    return Status::InvalidArgument("--elastic runs with --adapt off for now (the controller does not follow a "
                                   "changing world yet)");
  }
  FRUGAL_RETURN_IF_ERROR(ValidateSync(config));
  if (IsPerSiteCheckpointDir(config.checkpoint.checkpoint_dir)) {
    if (config.elastic.elastic) {
      return Status::InvalidArgument("--checkpoint-dir with {cluster} (one directory per cluster) does not run "
                                     "--elastic yet: use one shared directory for an elastic run");
    }
    FRUGAL_RETURN_IF_ERROR(CheckSiteName(config.worker.cluster).WithContext("--checkpoint-dir"));
  }
  if (config.elastic.elastic && config.elastic.min_workers > config.distributed.workers &&
      config.worker.coordinator.empty()) {
    return Status::InvalidArgument("--min-workers " + std::to_string(config.elastic.min_workers) +
                                   " is more than --workers " + std::to_string(config.distributed.workers));
  }
  if (config.train.global_batch > 0 && config.train.global_batch < config.distributed.workers &&
      config.worker.coordinator.empty()) {
    return Status::InvalidArgument("--global-batch " + std::to_string(config.train.global_batch) +
                                   " is less than --workers " + std::to_string(config.distributed.workers) +
                                   ": every worker needs at least one sample per step");
  }
  return config.train.Validate();
}

Status SetOption(RunConfig* config, const std::string& key, const std::string& text) {
  const std::string want = Snake(key);
  Status result = Status::InvalidArgument("unknown option '" + key + "'");
  VisitFields(*config, [&](const Field& f, auto& value) {
    if (want == f.key) result = FieldFromText(f, text, &value);
  });
  return result;
}

bool HasOption(const std::string& key) {
  const std::string want = Snake(key);
  bool found = false;
  RunConfig c;
  VisitFields(c, [&](const Field& f, const auto&) { found = found || want == f.key; });
  return found;
}

std::string ToToml(const RunConfig& config) {
  std::string out;
  VisitFields(const_cast<RunConfig&>(config), [&](const Field& f, const auto& value) {
    out += std::string(f.key) + " = " + TomlValue(value) + "\n";
  });
  return out;
}

int ResolveCpuThreads(const RunConfig& config, int workers_on_host) {
  if (config.distributed.cpu_threads > 0) return config.distributed.cpu_threads;
  if (config.train.device.rfind("cpu", 0) == 0) return 2;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(cores / std::max(1, workers_on_host), 1, 4);
}

uint64_t SharedDigest(const RunConfig& config) {
  std::string text;
  VisitFields(const_cast<RunConfig&>(config), [&](const Field& f, const auto& value) {
    if (f.scope == FieldScope::kShared) text += std::string(f.key) + "=" + FieldDigestText(value) + "\n";
  });
  return Fnv1a64(text);
}

std::vector<std::string> SharedKeys() {
  std::vector<std::string> keys;
  RunConfig c;
  VisitFields(c, [&](const Field& f, const auto&) {
    if (f.scope == FieldScope::kShared) keys.push_back(f.key);
  });
  return keys;
}

std::vector<std::string> SpeedNeutralKeys() {
  std::vector<std::string> keys;
  RunConfig c;
  VisitFields(c, [&](const Field& f, const auto&) {
    if (f.speed_neutral) keys.push_back(f.key);
  });
  return keys;
}

std::string CheckpointDirOf(const RunConfig& config) {
  if (!config.checkpoint.checkpoint_dir.empty()) {
    return SiteCheckpointDir(config.checkpoint.checkpoint_dir, config.worker.cluster);
  }
  return config.train.runs_dir + "/" + config.train.run_name + "/checkpoints";
}

double WireBytesPerValue(const DistributedOptions& o) {
  const compress::WireFormat w = WireFormatOf(o);
  return compress::BytesPerValue(w.values) + compress::IndexBytesPerValue(w.indices, DensityOf(o));
}

double MergedWireBytesPerValue(const DistributedOptions& o) {
  const compress::WireFormat w = compress::MergedWireFormat(WireFormatOf(o));
  return compress::BytesPerValue(w.values) + compress::IndexBytesPerValue(w.indices, DensityOf(o));
}

std::chrono::milliseconds TimeoutOf(const DistributedOptions& o) {
  return std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
}

std::chrono::milliseconds LinkGraceOf(const DistributedOptions& o) {
  return std::chrono::milliseconds(static_cast<int64_t>(o.link_grace_s * 1000));
}

// Note [Sync auto]
// The default, --sync auto, trains in the local mode (--local-steps 16, whole
// int4 rounds, overlapped fragments, the outer step OuterOf chooses) wherever
// it can, because in every scenario measured it reached DDP's accuracy minus
// 0.3 points sooner than the step mode and than the stock DDP hooks run
// beside it, and ended within 0.2 points of DDP (docs/results.md, "Train"):
// its rounds go every 16 steps and overlap training, so they hide behind
// compute down to 10 Mbit/s, and its values do not depend on timing. On
// gpt-tiny the step mode's sparse AdamW also learns slower per step at equal
// bytes.
//
// Elastic runs take it too (Note [Local mode across worlds] in
// sync_strategy.cc): a membership change costs it no more than the step mode.
//
// Auto does not take --sync site (Note [Site replicas] in sync_strategy.cc)
// on two or more clusters: on the two-cluster scenario it reached the target
// later than the per-worker local mode and ended no better over two seeds,
// its per-step gradient average taking CPU from compute where workers share
// cores.
//
// The step mode stays where an option needs it: --adapt on or batch (the
// controller chooses the density and batch sizes of the step pipeline),
// --staleness and --density-warmup-steps (step pipeline options), and one
// worker (nothing to exchange). The choice does not look at the link, which
// the launcher cannot measure before the workers start: the local mode won at
// every rate measured, from 10 Mbit/s to 1 Gbit/s.
SyncMode SyncOf(const RunConfig& config) {
  const DistributedOptions& d = config.distributed;
  if (d.sync != SyncMode::kAuto) return d.sync;
  const bool step_only = NeedsController(d.adapt) || d.staleness != 0 || d.density_warmup_steps > 0 || d.workers < 2;
  return step_only ? SyncMode::kStep : SyncMode::kLocal;
}

RunConfig ResolvePlan(RunConfig config, const HostFacts& facts) {
  DistributedOptions& d = config.distributed;
  d.sync = SyncOf(config);
  if (d.adapt == AdaptMode::kAuto) {
    const bool supported = facts.controller_available && !config.elastic.elastic && d.sync == SyncMode::kStep;
    d.adapt = supported ? AdaptMode::kOn : AdaptMode::kOff;
  }
  // Only the auto value (0) is replaced: anything else, valid or not, is
  // left for Validate to accept or name.
  if (d.cpu_threads == 0) d.cpu_threads = ResolveCpuThreads(config, facts.workers_on_host);
  if (d.density == 0) d.density = DensityOf(d);
  if (IsLocalUpdates(d.sync) && d.local_steps > 0) {
    if (d.local_fragments == 0) d.local_fragments = LocalFragmentsOf(d);
    if (d.local_overlap && d.local_delay == 0) d.local_delay = LocalDelayOf(d);
  }
  if (config.elastic.elastic_every == 0) config.elastic.elastic_every = ElasticEveryOf(config);
  return config;
}

// Note [Elastic gates]
// An elastic run's gate keeps a snapshot, which the local modes save where
// their state is at rest (Note [State at rest] in sync_strategy.h): at a
// sync point no round is in flight, anywhere else the one started at the
// last sync point is, and the snapshot waits for its exchange. So auto
// puts the gates on sync points: every multiple of the stride (local_steps
// / fragments, 4 by default) up to kElasticEvery, 8 by default. Measured
// on the 100 Mbit/s testbed (two clusters of two, an elastic mlp script,
// rounds every 5 steps, a 10 s WAN outage): with every gate waiting for
// the round in flight the outage stalled the run 13.6 s; with the gates on
// sync points, saved at rest, 11.0 s, as without any gate. A stride above
// kElasticEvery is the gate period itself: a kill then rolls back at most
// one round.
int64_t ElasticEveryOf(const RunConfig& config) {
  const int64_t given = config.elastic.elastic_every;
  if (given > 0) return given;
  const DistributedOptions& d = config.distributed;
  if (!IsLocalUpdates(d.sync) || d.local_steps < 1) return kElasticEvery;
  const int64_t stride = std::max<int64_t>(1, d.local_steps / LocalFragmentsOf(d));
  return std::max<int64_t>(1, kElasticEvery / stride) * stride;
}

double DensityOf(const DistributedOptions& o) {
  if (o.density > 0) return o.density;
  return IsLocalUpdates(o.sync) ? kLocalDensity : kStepDensity;
}

comm::ExchangeAlgorithm LocalExchangeOf(const DistributedOptions& o, int num_clusters) {
  if (o.exchange != comm::ExchangeAlgorithm::kAuto || num_clusters > 1) return o.exchange;
  return comm::ExchangeAlgorithm::kSharded;
}

int64_t LocalFragmentsOf(const DistributedOptions& o) {
  if (o.local_fragments > 0) return o.local_fragments;
  for (int64_t p = kAutoLocalFragments; p > 1; --p) {
    if (o.local_steps % p == 0) return p;
  }
  return 1;
}

double MinNesterovRounds(double momentum) { return 2.0 / (1.0 - momentum); }

OuterStep OuterOf(const DistributedOptions& o, int64_t total_steps) {
  if (o.outer_lr > 0) return {o.outer_lr, o.outer_momentum};
  if (total_steps <= 0) return {kDiLoCoOuterLr, o.outer_momentum};  // a length that follows the membership
  const double rounds = static_cast<double>(total_steps) / static_cast<double>(std::max<int64_t>(1, o.local_steps));
  if (rounds >= MinNesterovRounds(o.outer_momentum) - 1e-9) {  // 2 / (1 - 0.9) is 20 + 4e-15
    return {kDiLoCoOuterLr, o.outer_momentum};
  }
  return {1.0, 0.0};
}

OuterStep RunOuterOf(const RunConfig& config, int64_t total_steps) {
  const bool fixed_length = !config.elastic.elastic || config.train.global_batch > 0;
  return OuterOf(config.distributed, fixed_length ? total_steps : 0);
}

int64_t LocalDelayOf(const DistributedOptions& o) {
  if (!o.local_overlap) return 0;
  return o.local_delay > 0 ? o.local_delay : std::max<int64_t>(1, o.local_steps / LocalFragmentsOf(o));
}

}  // namespace frugal::engine
