#include "frugal/engine/local_sync.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "control_kinds.h"
#include "device_inner.h"
#include "frugal/comm/algorithms/collectives.h"
#include "frugal/compress/round_kernels.h"
#include "frugal/engine/compressed_allreduce.h"
#include "frugal/engine/deflate_trial.h"
#include "frugal/optim/sparse_optimizer.h"
#include "frugal/common/clock.h"
#include "frugal/common/hash.h"
#include "frugal/common/finite.h"

namespace frugal::engine {

namespace {

// 1: blocking rounds only; 2: adds the overlapped round's state (a merged
// pseudo-gradient waiting for its outer step; each rank's base); 3: per
// fragment (Note [Local-update state]).
constexpr uint64_t kStateVersion = 3;

// FNV-1a over the anchors' 32-bit words, as the pipeline's checksum, from
// the seed the local mode's checksums were first written with.
uint64_t Fingerprint(const std::vector<std::vector<float>>& buckets) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& b : buckets) h = Fnv1a64Words(b.data(), b.size(), h);
  return h;
}

}  // namespace

// One fragment of the parameters (--local-fragments; Note [Fragments]): per
// bucket b the slice [lo[b], hi[b]), its last sync point, and its exchange.
struct Fragment {
  std::vector<size_t> lo, hi;
  int64_t synced_at = 0;  // the iteration whose forward first used its last sync
  // Its merged pseudo-gradient (in `sending`, once the exchange is joined)
  // takes its outer step before iteration apply_at; -1: none.
  int64_t apply_at = -1;
  std::thread flight;  // joinable while its exchange runs
  Status flight_status;
  // While its round is open, from its sync to its outer step (Note [Host
  // memory]), per bucket its slices of: base, the inner parameters at the
  // sync; sending, the pseudo-gradient sent, replaced by the ranks' merged
  // average by the exchange. Outside a round its base is the anchor.
  std::vector<std::vector<float>> base, sending;
  bool open() const { return !sending.empty(); }
};

class LocalSync::Impl {
 public:
  RunConfig config;
  std::function<double(int64_t)> lr_at;
  BucketLayout layout;
  std::vector<torch::Tensor> params;  // per slot
  comm::Transport* transport = nullptr;
  std::chrono::milliseconds timeout{60000};

  // grad: the host's inner steps read the gradients into it; empty when
  // the model's tensors take the inner steps (Note [Host memory]).
  std::vector<std::vector<float>> anchor, master, grad;  // per bucket
  // A closed round's buffers, kept for the next fragment's round.
  std::vector<std::vector<float>> spare_base, spare_sending;
  std::vector<std::unique_ptr<optim::SparseOptimizer>> inner;  // per bucket
  // Note [Inner steps on the device]: set when the inner steps run on the
  // model's tensors; `inner` then exists only around a checkpoint
  // (Note [Host memory]), and `master` is current only while !master_stale.
  std::unique_ptr<DeviceInner> device_inner;
  // Note [Inner steps by the caller]: the caller steps the model's tensors;
  // `inner` is never stepped.
  bool caller_steps = false;
  bool master_stale = false;  // the model's tensors have inner steps that master lacks
  bool master_nonfinite = false;
  std::vector<std::unique_ptr<optim::SparseOptimizer>> outer;  // per bucket and fragment: b * P + f
  std::unique_ptr<CompressedAllReduce> reduce;  // bucket ids b * P + f
  std::vector<std::unique_ptr<Fragment>> frags;
  int64_t stride = 1;  // iterations between two fragments' sync points: local_steps / P
  int64_t delay = 0;   // iterations from a fragment's sync to its outer step (0: blocking)
  int64_t next_fragment = 0;
  int64_t synced_at = 0;  // the iteration of the last fragment's sync point
  int64_t last_step = 0;  // iterations with an inner step are < last_step
  int64_t rounds = 0;     // fragment syncs
  double optimizer_s = 0;
  double wait_s = 0;  // the compute thread waiting for an overlapped round's exchange
  // Note [Deflate by trial] in deflate_trial.cc: on with --deflate auto
  // and overlapped rounds; last_sync_wall: when the last fragment synced.
  bool adapt_deflate = false;
  DeflateTrial deflate_trial;
  Clock::time_point last_sync_wall;
  bool synced_before = false;
  mutable std::mutex stats_mu;  // guards reduce_stats (the exchange threads write it)
  CompressedAllReduceStats reduce_stats;

  ~Impl() { (void)DrainAll(); }
  // The model's tensors are the inner parameters, master a copy of them
  // downloaded when a round needs it.
  bool ModelIsInner() const { return device_inner != nullptr || caller_steps; }
  size_t P() const { return frags.size(); }
  Status Init(bool broadcast_initial);
  void MakeFragments();
  Status BroadcastInitial();
  Status MakeInner();
  // Fresh host optimizers in `inner` if there are none; ReleaseInner frees
  // them when the model's tensors take the inner steps.
  Status EnsureInner();
  void ReleaseInner();
  // Fragment f's round buffers, sized to its slices (from the spare ones
  // when there are); CloseRound keeps them as the spare ones.
  void OpenRound(Fragment& fr);
  void CloseRound(Fragment& fr);
  // An open round's base := the anchor (a rank that starts its round there).
  void BaseFromAnchor();
  Status MakeOuter();
  Status MakeReduce();
  // average: apply the round as a plain average, not an outer step (Finish).
  Status SyncFragment(size_t f, int64_t t, int64_t after, bool average = false);
  Status Exchange(size_t f, int64_t t);
  Status Drain(size_t f);
  Status DrainAll();
  double OuterLrAt(int64_t t) const;
  Status Apply(size_t f, bool average = false);
  void DecideDeflate();
  Status ApplyDue(int64_t t, bool* applied);
  void ReadGradients();
  Status PullMaster();
  std::vector<uint8_t> SaveShared() const;
  std::vector<uint8_t> SaveOwn() const;
  Status LoadShared(const std::vector<uint8_t>& bytes, int64_t* version);
  Status LoadOwn(const std::vector<uint8_t>& bytes, int64_t version, bool keep_residuals);
};

Status LocalSync::Impl::Init(bool broadcast_initial) {
  const size_t nb = layout.bucket_sizes.size();
  anchor.resize(nb);
  for (size_t b = 0; b < nb; ++b) anchor[b].assign(layout.bucket_sizes[b], 0.0f);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlot& slot = layout.slots[i];
    torch::Tensor cpu = params[i].detach().to(torch::kCPU).contiguous();
    std::memcpy(anchor[slot.bucket].data() + slot.offset, cpu.data_ptr<float>(), slot.numel * sizeof(float));
  }
  if (broadcast_initial) FRUGAL_RETURN_IF_ERROR(BroadcastInitial());
  master = anchor;
  MakeFragments();
  FRUGAL_RETURN_IF_ERROR(MakeInner());
  FRUGAL_RETURN_IF_ERROR(MakeOuter());
  return MakeReduce();
}

// Every replica starts from rank 0's parameters (as Replica does for its
// pipeline's masters; the local mode keeps its own copy).
Status LocalSync::Impl::BroadcastInitial() {
  for (size_t b = 0; b < anchor.size(); ++b) {
    comm::Bytes mine;
    if (transport->rank() == 0) {
      mine.resize(anchor[b].size() * sizeof(float));
      std::memcpy(mine.data(), anchor[b].data(), mine.size());
    }
    auto got = comm::Broadcast(*transport, ControlTag(b, kLocalInitialParams), 0, std::move(mine), timeout);
    if (!got.ok()) return got.status().WithContext("receiving the initial parameters (--sync local)");
    if (got->size() != anchor[b].size() * sizeof(float)) {
      return Status::Corruption("initial parameters of bucket " + layout.bucket_names[b] +
                                " have the wrong size: do all workers build the same model?");
    }
    std::memcpy(anchor[b].data(), got->data(), got->size());
  }
  return Status::Ok();
}

// Note [Host memory]: a rank's host state is what its rounds need: the
// anchor, its inner parameters (master), the outer momentum and the
// exchange's residuals, 4 bytes per parameter each, and for each fragment
// whose round is open (from its sync to its outer step) its slices of the
// round's base and pseudo-gradient; outside a round a fragment's base is
// the anchor, so with P fragments and one in flight these take 8 / P bytes
// per parameter, and a closed round's buffers serve the next. The host's
// inner steps add their gradient copy and the optimizer's state. When the
// model's tensors take the inner steps (on the device, or by the caller's
// own optimizer), the host keeps neither: the optimizer's state lives with
// the tensors, and host optimizers exist only while a checkpoint is written
// or read (their byte form is the checkpoint's). On the language-model
// examples that is 12 bytes per parameter less with AdamW.

// The run's own optimizer, one per bucket, this rank's state: on the host
// (`inner` and `grad`), or with the model's tensors.
Status LocalSync::Impl::MakeInner() {
  const optim::OptimizerOptions o = MakeOptimizerOptions(config.train);
  const LocalInner place = config.distributed.local_inner;
  const bool on_device = place == LocalInner::kDevice ||
                         (place == LocalInner::kAuto && !params.empty() && !params[0].device().is_cpu());
  device_inner = on_device && !caller_steps ? std::make_unique<DeviceInner>(o, params) : nullptr;
  master_stale = false;
  ReleaseInner();
  if (ModelIsInner()) return Status::Ok();
  grad.resize(anchor.size());
  for (size_t b = 0; b < anchor.size(); ++b) grad[b].assign(anchor[b].size(), 0.0f);
  return EnsureInner();
}

Status LocalSync::Impl::EnsureInner() {
  if (!inner.empty()) return Status::Ok();
  const optim::OptimizerOptions o = MakeOptimizerOptions(config.train);
  for (size_t b = 0; b < anchor.size(); ++b) {
    FRUGAL_ASSIGN_OR_RETURN(auto opt, optim::CreateSparseOptimizer(o, anchor[b].size(), layout.bucket_names[b]));
    inner.push_back(std::move(opt));
  }
  return Status::Ok();
}

void LocalSync::Impl::ReleaseInner() {
  inner.clear();
  inner.shrink_to_fit();
  grad.clear();
  grad.shrink_to_fit();
}

void LocalSync::Impl::OpenRound(Fragment& fr) {
  fr.base = std::move(spare_base);
  fr.sending = std::move(spare_sending);
  fr.base.resize(anchor.size());
  fr.sending.resize(anchor.size());
  for (size_t b = 0; b < anchor.size(); ++b) {
    fr.base[b].resize(fr.hi[b] - fr.lo[b]);
    fr.sending[b].resize(fr.hi[b] - fr.lo[b]);
  }
}

void LocalSync::Impl::BaseFromAnchor() {
  for (auto& fr : frags) {
    if (!fr->open()) continue;
    for (size_t b = 0; b < anchor.size(); ++b) {
      std::copy(anchor[b].begin() + fr->lo[b], anchor[b].begin() + fr->hi[b], fr->base[b].begin());
    }
  }
}

void LocalSync::Impl::CloseRound(Fragment& fr) {
  spare_base = std::move(fr.base);
  spare_sending = std::move(fr.sending);
  fr.base.clear();
  fr.sending.clear();
}

// Fragment f holds, of every bucket of n values, [n f / P, n (f + 1) / P).
void LocalSync::Impl::MakeFragments() {
  const DistributedOptions& d = config.distributed;
  const int64_t p = LocalFragmentsOf(d);
  stride = std::max<int64_t>(1, d.local_steps / p);
  delay = LocalDelayOf(d);
  frags.clear();
  for (int64_t f = 0; f < p; ++f) {
    auto fr = std::make_unique<Fragment>();
    for (size_t n : layout.bucket_sizes) {
      fr->lo.push_back(n * f / p);
      fr->hi.push_back(n * (f + 1) / p);
    }
    frags.push_back(std::move(fr));
  }
}

// DiLoCo's outer optimizer: SGD with Nesterov momentum on the anchor, the
// averaged pseudo-gradient as its gradient (plain SGD without momentum); one
// per bucket slice of each fragment.
Status LocalSync::Impl::MakeOuter() {
  const DistributedOptions& d = config.distributed;
  optim::OptimizerOptions o;
  o.kind = "sgd";
  o.lr = d.outer_lr;
  o.momentum = d.outer_momentum;
  o.nesterov = d.outer_momentum > 0;
  outer.clear();
  for (size_t b = 0; b < anchor.size(); ++b) {
    for (const auto& fr : frags) {
      FRUGAL_ASSIGN_OR_RETURN(auto opt, optim::CreateSparseOptimizer(o, fr->hi[b] - fr->lo[b], layout.bucket_names[b]));
      outer.push_back(std::move(opt));
    }
  }
  return Status::Ok();
}

Status LocalSync::Impl::MakeReduce() {
  const DistributedOptions& d = config.distributed;
  CompressedAllReduceOptions o;
  o.sparsifier = d.sparsifier;
  o.density = DensityOf(d);
  o.wire = WireFormatOf(d);
  o.dgc_momentum = static_cast<float>(d.dgc_momentum);
  o.exchange.algorithm = LocalExchangeOf(d, transport->topology().num_clusters());
  o.exchange.timeout = timeout;
  o.seed = config.train.seed;
  o.instance = 0;  // the worker's only CompressedAllReduce
  FRUGAL_ASSIGN_OR_RETURN(reduce, CompressedAllReduce::Create(o, transport));
  adapt_deflate = d.deflate == DeflateMode::kAuto && o.wire.deflate && delay > 0;
  return Status::Ok();
}

// Note [Fragments]: with --local-fragments P, the parameters are cut into P
// fragments (a 1/P slice of every bucket) that sync in turn, one every
// local_steps / P iterations, so each fragment still syncs every local_steps
// (its first round is shorter) and the link carries 1/P of a round at a time,
// as in Streaming DiLoCo (Douillard et al., 2025). Each fragment has its
// own outer optimizer state and its own error-feedback residual.
//
// A sync of fragment f at iteration t: delta = base - master on f's slices
// (this rank's progress since f's last sync point), sent; base = master.
// Its outer step lands before iteration t + delay: anchor <- NesterovSGD(
// anchor, merged delta), then the rank rebases its own progress since t on
// the new anchor: master <- anchor - (base - master), base <- anchor. With
// delay 0 (blocking) the exchange runs inline and nothing has progressed:
// master = base = anchor. Note [Overlapped rounds] has the delay > 0 case.
Status LocalSync::Impl::SyncFragment(size_t f, int64_t t, int64_t after, bool average) {
  Fragment& fr = *frags[f];
  if (fr.apply_at >= 0) {  // Validate keeps the delay within a round, so this is a bug
    return Status::Internal("--sync local: fragment " + std::to_string(f) + " syncs at step " + std::to_string(t) +
                            " before its outer step of step " + std::to_string(fr.apply_at) + " landed");
  }
  FRUGAL_RETURN_IF_ERROR(PullMaster().WithContext("--sync local round ending before step " + std::to_string(t)));
  OpenRound(fr);
  for (size_t b = 0; b < master.size(); ++b) {  // base is the anchor outside a round
    const size_t lo = fr.lo[b], n = fr.hi[b] - fr.lo[b];
    compress::PseudoGradient(Span<const float>(anchor[b].data() + lo, n), Span<const float>(master[b].data() + lo, n),
                             Span<float>(fr.sending[b]), Span<float>(fr.base[b]));
  }
  fr.synced_at = t;
  fr.apply_at = t + after;
  ++rounds;
  if (after == 0) {
    FRUGAL_RETURN_IF_ERROR(Exchange(f, t));
    return Apply(f, average);
  }
  DecideDeflate();
  fr.flight_status = Status::Ok();
  fr.flight = std::thread([this, f, t] { frags[f]->flight_status = Exchange(f, t); });
  return Status::Ok();
}

// Replaces fragment f's slices of `sending` by the ranks' merged average
// (residual added, sparsified, encoded, exchanged, decoded).
Status LocalSync::Impl::Exchange(size_t f, int64_t t) {
  Fragment& fr = *frags[f];
  for (size_t b = 0; b < fr.sending.size(); ++b) {
    if (fr.hi[b] == fr.lo[b]) continue;
    Status s = reduce->Run(b * P() + f, Span<float>(fr.sending[b].data(), fr.sending[b].size()));
    if (!s.ok()) return s.WithContext("--sync local round ending before step " + std::to_string(t));
  }
  const CompressedAllReduceStats after = reduce->stats();
  std::lock_guard<std::mutex> lock(stats_mu);
  reduce_stats = after;
  return Status::Ok();
}

// The mode of the exchange that starts now (Note [Deflate by trial]), from
// the time since the last fragment's sync.
void LocalSync::Impl::DecideDeflate() {
  if (!adapt_deflate) return;
  const auto now = transport->clock().Now();
  reduce->SetDeflate(deflate_trial.Next(synced_before ? Seconds(now - last_sync_wall) : 0.0));
  last_sync_wall = now;
  synced_before = true;
}

// Waits for fragment f's exchange, if one is running.
Status LocalSync::Impl::Drain(size_t f) {
  Fragment& fr = *frags[f];
  if (!fr.flight.joinable()) return Status::Ok();
  const auto t0 = transport->clock().Now();
  fr.flight.join();
  wait_s += Seconds(transport->clock().Now() - t0);
  if (!fr.flight_status.ok()) fr.apply_at = -1;
  return fr.flight_status;
}

Status LocalSync::Impl::DrainAll() {
  Status first;
  for (size_t f = 0; f < frags.size(); ++f) {
    Status s = Drain(f);
    if (first.ok()) first = s;
  }
  return first;
}

// Note [Outer annealing]: DiLoCo's outer step (lr 0.7, Nesterov momentum
// 0.9) moves the anchor by about outer_lr / (1 - momentum) = 7 times the
// workers' average progress when successive rounds agree, and its momentum
// carries the progress of about 1 / (1 - momentum) = 10 past rounds. When
// the inner learning rate decays at the end of a run, the anchor therefore
// keeps its large, lagging steps: the replicas never settle as a
// synchronous run does in its last steps. With --outer-anneal the outer lr
// of a round synced at iteration t is outer_lr x s(t), s the inner
// schedule's decay since its warm-up (lr_at(t) / lr_at(warmup)), but never
// below 1 - momentum: the gain falls with the inner lr to 1, plain
// averaging of the workers' progress. s is at most 1: a schedule that
// rises after `warmup` (a Python caller's own set_lr, whose warm-up may be
// longer) never raises the gain above outer_lr. A pure function of the
// sync point, so every rank and a resumed run step alike.
double LocalSync::Impl::OuterLrAt(int64_t t) const {
  const DistributedOptions& d = config.distributed;
  if (!d.outer_anneal) return d.outer_lr;
  const int64_t w = config.train.warmup_steps;
  const double peak = lr_at(w);
  const double s = peak > 0 ? std::min(1.0, lr_at(std::max(t, w)) / peak) : 1.0;
  return std::max(d.outer_lr * s, std::min(d.outer_lr, 1.0 - d.outer_momentum));
}

// Note [A lone worker]: an elastic job may run in a world of one worker
// (a cluster job shrunk to one slot, or started on one). Its merged delta is
// then its own progress, and DiLoCo's outer step would move the anchor by up
// to outer_lr / (1 - momentum) = 7 times it: the effect of a 7x learning
// rate with nothing averaged to damp it. Measured: cnn on synthetic data
// with a global batch of 256 reached a loss of 1e-6 and then diverged at
// step 141 (loss 3e5) in a one-worker elastic world, where the
// single-process trainer ran 300 steps to the end. So a round of a world of
// one is a plain average (the anchor takes the worker's progress as it is,
// as `frugal train --workers 1` would), and the outer momentum stays as the
// last world of two or more left it. Every rank of a world sees its size,
// so the ranks still step alike.
//
// Fragment f's outer step on the anchor (with average, the plain average of
// Note [The last round]), then the rebase (Note [Fragments]).
Status LocalSync::Impl::Apply(size_t f, bool average) {
  FRUGAL_RETURN_IF_ERROR(Drain(f));
  FRUGAL_RETURN_IF_ERROR(PullMaster());
  average = average || transport->world_size() == 1;  // Note [A lone worker]
  Fragment& fr = *frags[f];
  const auto t0 = transport->clock().Now();
  const double outer_lr = OuterLrAt(fr.synced_at);
  for (size_t b = 0; b < anchor.size(); ++b) {
    const size_t lo = fr.lo[b], n = fr.hi[b] - fr.lo[b];
    if (n == 0) continue;
    const std::vector<float>& merged = fr.sending[b];
    const std::vector<float>& base = fr.base[b];
    if (average) {
      for (size_t i = lo, j = 0; i < lo + n; ++i, ++j) anchor[b][i] -= merged[j];
    } else {
      outer[b * P() + f]->set_lr(outer_lr);
      FRUGAL_RETURN_IF_ERROR(outer[b * P() + f]->StepDense(Span<float>(anchor[b].data() + lo, n),
                                                           Span<const float>(merged.data(), n)));
    }
    compress::Rebase(Span<const float>(anchor[b].data() + lo, n), Span<const float>(base),
                     Span<float>(master[b].data() + lo, n));
  }
  optimizer_s += Seconds(transport->clock().Now() - t0);
  fr.apply_at = -1;
  CloseRound(fr);  // its base is the anchor again
  return Status::Ok();
}

// The outer steps due before iteration t, in fragment order (their slices
// are disjoint, so the order does not change the result).
Status LocalSync::Impl::ApplyDue(int64_t t, bool* applied) {
  for (size_t f = 0; f < frags.size(); ++f) {
    if (frags[f]->apply_at < 0 || frags[f]->apply_at > t) continue;
    FRUGAL_RETURN_IF_ERROR(Apply(f));
    *applied = true;
  }
  return Status::Ok();
}

// Note [Overlapped rounds]: with --local-overlap, a fragment's exchange runs
// on a thread while the inner steps go on, and its outer step lands `delay`
// iterations after its sync point (--local-delay; default local_steps / P,
// when the next fragment syncs). Without fragments that is one whole round:
// at the sync ending round k the rank applies round k-1's merged step, so it
// continues from the global model with the rounds up to k-1 merged plus its
// own round k, which round k's merged average replaces one round later (the
// "eager" own update of Kale et al., 2025). The inner steps never wait for
// the link unless an exchange outlasts its delay (wait_s). Anchors change
// only by merged averages, at the same iterations and in the same order on
// every rank, so they stay bit-identical; the models differ between ranks
// by their own progress since the fragment's sync, as in blocking mode
// between sync points. Finish takes the outer steps in flight, then syncs
// every fragment's steps since its last sync in a blocking round, so a run
// ends on identical replicas. A whole round's delay with DiLoCo's outer
// momentum 0.9 converged 3 points lower on mlp; fragments shorten the delay
// to local_steps / P.

void LocalSync::Impl::ReadGradients() {
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlot& slot = layout.slots[i];
    float* dst = grad[slot.bucket].data() + slot.offset;
    torch::Tensor& g = params[i].mutable_grad();
    if (!g.defined()) {
      std::fill(dst, dst + slot.numel, 0.0f);
      continue;
    }
    torch::Tensor cpu = g.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    std::memcpy(dst, cpu.data_ptr<float>(), slot.numel * sizeof(float));
    g = torch::Tensor();
  }
}

// The model's tensors into master, when inner steps on the device changed
// them since the last download (Note [Inner steps on the device]). The host
// optimizer rejects a non-finite gradient at its step; on the device it
// shows here, at the next download.
Status LocalSync::Impl::PullMaster() {
  if (ModelIsInner() && master_stale) {
    bool finite = true;
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSlot& slot = layout.slots[i];
      float* dst = master[slot.bucket].data() + slot.offset;
      torch::Tensor cpu = params[i].detach().to(torch::kCPU).contiguous();
      std::memcpy(dst, cpu.data_ptr<float>(), slot.numel * sizeof(float));
      finite = finite && AllFinite(Span<const float>(dst, slot.numel));
    }
    master_stale = false;
    master_nonfinite = master_nonfinite || !finite;
  }
  if (master_nonfinite && caller_steps) {
    return Status::InvalidArgument(
        "a parameter is NaN or Inf after the optimizer's steps (a non-finite gradient: skip such a step, as "
        "torch.cuda.amp.GradScaler does, or lower the learning rate)");
  }
  if (master_nonfinite) {
    return Status::InvalidArgument(
        "a parameter is NaN or Inf after the inner steps on the device (a non-finite gradient: lower --lr; "
        "--local-inner host names the step and tensor)");
  }
  return Status::Ok();
}

// Note [Local-update state]: the shared section (rank 0 writes it; equal on
// every rank) holds a version, the round counters, and (version 3) the
// fragment count, the next fragment to sync and per fragment its last sync
// point and the iteration its pending outer step lands before (-1: none);
// then per bucket the anchor, per fragment the outer optimizer's momentum,
// and per fragment with a pending step its merged pseudo-gradient. Each
// rank's own section holds per bucket its inner parameters and inner
// optimizer state, then its CompressedAllReduce state (residuals, sparsifier
// states), then (version 2 on) per bucket its base. Rounds in flight are
// waited for before saving (their results are shared: every rank merged the
// same bytes), so a checkpoint in the middle of a round resumes bit-exactly:
// each rank continues from its own inner parameters. Versions 1 (blocking)
// and 2 (one pending flag) are one fragment's state and still load.
// Both sections are sized first and written in place (Note [Sized
// snapshots] in checkpoint.cc): an elastic script snapshots them at every
// gate, and built by doubling, with the optimizers' and the exchange's
// state in temporaries, the mlp's 150 MB took 2 s per gate with four
// workers on two cores.
std::vector<uint8_t> LocalSync::Impl::SaveShared() const {
  size_t total = 8 * (7 + 2 * P());
  for (size_t b = 0; b < anchor.size(); ++b) {
    total += 8 + 4 * anchor[b].size();
    for (size_t f = 0; f < P(); ++f) total += 8 + outer[b * P() + f]->StateBytes();
    for (const auto& fr : frags) {
      if (fr->apply_at >= 0) total += 8 + 4 * fr->sending[b].size();
    }
  }
  ByteWriter w;
  w.Reserve(total);
  for (int64_t v : {static_cast<int64_t>(kStateVersion), synced_at, last_step, rounds,
                    static_cast<int64_t>(anchor.size()), static_cast<int64_t>(P()), next_fragment}) {
    w.I64(v);
  }
  for (const auto& fr : frags) {
    w.I64(fr->synced_at);
    w.I64(fr->apply_at);
  }
  for (size_t b = 0; b < anchor.size(); ++b) {
    w.Floats(anchor[b].data(), anchor[b].size());
    for (size_t f = 0; f < P(); ++f) {
      const optim::SparseOptimizer& o = *outer[b * P() + f];
      w.BytesAppended(o.StateBytes(), [&o](std::vector<uint8_t>* out) { o.AppendState(out); });
    }
    for (const auto& fr : frags) {
      if (fr->apply_at >= 0) w.Floats(fr->sending[b].data(), fr->sending[b].size());
    }
  }
  return w.Take();
}

std::vector<uint8_t> LocalSync::Impl::SaveOwn() const {
  const size_t reduce_bytes = reduce->StateBytes();
  size_t total = 8 + 8 + reduce_bytes;
  for (size_t b = 0; b < master.size(); ++b) total += 8 + 4 * master[b].size() + 8 + inner[b]->StateBytes();
  for (size_t b = 0; b < anchor.size(); ++b) total += 8 + 4 * anchor[b].size();
  ByteWriter w;
  w.Reserve(total);
  w.I64(static_cast<int64_t>(master.size()));
  for (size_t b = 0; b < master.size(); ++b) {
    w.Floats(master[b].data(), master[b].size());
    const optim::SparseOptimizer& o = *inner[b];
    w.BytesAppended(o.StateBytes(), [&o](std::vector<uint8_t>* out) { o.AppendState(out); });
  }
  // As w.Bytes(reduce->SaveState()), without the copy.
  w.BytesWritten(reduce_bytes, [this](ByteWriter& out) { reduce->WriteState(out); });
  for (size_t b = 0; b < anchor.size(); ++b) {  // the base: an open round's, else the anchor
    w.BytesAppended(4 * anchor[b].size(), [&](std::vector<uint8_t>* out) {
      for (const auto& fr : frags) {
        const float* from = fr->open() ? fr->base[b].data() : anchor[b].data() + fr->lo[b];
        const auto* bytes = reinterpret_cast<const uint8_t*>(from);
        out->insert(out->end(), bytes, bytes + 4 * (fr->hi[b] - fr->lo[b]));
      }
    });
  }
  return w.Take();
}

Status LocalSync::Impl::LoadShared(const std::vector<uint8_t>& bytes, int64_t* version) {
  ByteReader r(bytes, "local-update state");
  FRUGAL_ASSIGN_OR_RETURN(*version, r.I64());
  if (*version < 1 || *version > static_cast<int64_t>(kStateVersion)) {
    return Status::Corruption("local-update state: unknown version " + std::to_string(*version));
  }
  // synced_at, last_step, rounds, buckets, then v2: pending; v3: fragments, next fragment
  int64_t v[6] = {0, 0, 0, 0, 0, 1};
  const int header = *version == 1 ? 4 : *version == 2 ? 5 : 6;
  for (int i = 0; i < header; ++i) {
    FRUGAL_ASSIGN_OR_RETURN(v[i], r.I64());
  }
  if (v[3] != static_cast<int64_t>(anchor.size())) {
    return Status::Corruption("local-update state has " + std::to_string(v[3]) + " buckets, this model has " +
                              std::to_string(anchor.size()) + " (same model and --bucket-mb?)");
  }
  const int64_t fragments = *version == 3 ? v[4] : 1;
  if (fragments != static_cast<int64_t>(P())) {
    return Status::Corruption("local-update state has " + std::to_string(fragments) +
                              " fragments: resume with --local-fragments " + std::to_string(fragments));
  }
  const int64_t next = *version == 3 ? v[5] : 0;
  if (v[0] < 0 || v[1] < v[0] || v[2] < 0 || next < 0 || next >= fragments || (*version == 2 && (v[4] < 0 || v[4] > 1))) {
    return Status::Corruption("local-update state: bad round counters");
  }
  for (auto& fr : frags) CloseRound(*fr);
  std::vector<std::pair<int64_t, int64_t>> at(P(), {v[0], -1});  // per fragment: synced_at, apply_at
  if (*version == 2 && v[4] == 1) at[0].second = v[0] + delay;  // the old overlapped round: at the next sync
  for (size_t f = 0; *version == 3 && f < P(); ++f) {
    FRUGAL_ASSIGN_OR_RETURN(at[f].first, r.I64());
    FRUGAL_ASSIGN_OR_RETURN(at[f].second, r.I64());
    if (at[f].first < 0 || at[f].first > v[1] || at[f].second < -1) {
      return Status::Corruption("local-update state: bad sync points of fragment " + std::to_string(f));
    }
  }
  for (size_t b = 0; b < anchor.size(); ++b) {
    FRUGAL_RETURN_IF_ERROR(r.Floats(anchor[b].data(), anchor[b].size()));
    for (size_t f = 0; f < P(); ++f) {
      FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> st, r.Bytes());
      FRUGAL_RETURN_IF_ERROR(outer[b * P() + f]->DeserializeState(Span<const uint8_t>(st.data(), st.size())));
    }
    for (size_t f = 0; f < P(); ++f) {
      Fragment& fr = *frags[f];
      if (at[f].second < 0) continue;
      if (!fr.open()) OpenRound(fr);
      FRUGAL_RETURN_IF_ERROR(r.Floats(fr.sending[b].data(), fr.sending[b].size()));
    }
  }
  if (!r.done()) return Status::Corruption("local-update state: trailing bytes");
  synced_at = v[0];
  last_step = v[1];
  rounds = v[2];
  next_fragment = next;
  for (size_t f = 0; f < P(); ++f) {
    frags[f]->synced_at = at[f].first;
    frags[f]->apply_at = at[f].second;
  }
  return Status::Ok();
}

Status LocalSync::Impl::LoadOwn(const std::vector<uint8_t>& bytes, int64_t version, bool keep_residuals) {
  ByteReader r(bytes, "local-update state of this rank");
  FRUGAL_ASSIGN_OR_RETURN(int64_t n, r.I64());
  if (n != static_cast<int64_t>(master.size())) return Status::Corruption("local-update state: bucket count differs");
  for (size_t b = 0; b < master.size(); ++b) {
    FRUGAL_RETURN_IF_ERROR(r.Floats(master[b].data(), master[b].size()));
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> st, r.Bytes());
    FRUGAL_RETURN_IF_ERROR(inner[b]->DeserializeState(Span<const uint8_t>(st.data(), st.size())));
  }
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> reduce_state, r.Bytes());
  FRUGAL_RETURN_IF_ERROR(keep_residuals ? reduce->LoadState(reduce_state) : MakeReduce());
  if (version == 1) {
    BaseFromAnchor();  // rounds blocked: every round started at the anchor
  } else {
    // An open round's slices of the base; the others are the anchor's.
    std::vector<float> bucket;
    for (size_t b = 0; b < anchor.size(); ++b) {
      bucket.resize(anchor[b].size());
      FRUGAL_RETURN_IF_ERROR(r.Floats(bucket.data(), bucket.size()));
      for (const auto& fr : frags) {
        if (fr->open()) std::copy(bucket.begin() + fr->lo[b], bucket.begin() + fr->hi[b], fr->base[b].begin());
      }
    }
  }
  if (!r.done()) return Status::Corruption("local-update state of this rank: trailing bytes");
  return Status::Ok();
}

LocalSync::LocalSync(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalSync::~LocalSync() = default;

Result<std::unique_ptr<LocalSync>> LocalSync::Create(const RunConfig& config, std::function<double(int64_t)> lr_at,
                                                     const BucketLayout& layout, std::vector<torch::Tensor> params,
                                                     comm::Transport* transport, bool broadcast_initial,
                                                     InnerSteps inner_steps) {
  if (!IsLocalUpdates(config.distributed.sync)) return Status::InvalidArgument("LocalSync needs --sync local or site");
  if (transport == nullptr) return Status::InvalidArgument("LocalSync needs a transport");
  if (params.size() != layout.slots.size()) return Status::InvalidArgument("LocalSync: parameters and layout differ");
  if (config.distributed.outer_lr <= 0) {
    return Status::InvalidArgument("LocalSync needs a resolved outer step: set outer_lr from OuterOf");
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->lr_at = std::move(lr_at);
  impl->layout = layout;
  impl->params = std::move(params);
  impl->transport = transport;
  impl->timeout = TimeoutOf(config.distributed);
  impl->caller_steps = inner_steps == InnerSteps::kCaller;
  FRUGAL_RETURN_IF_ERROR(impl->Init(broadcast_initial));
  std::unique_ptr<LocalSync> sync(new LocalSync(std::move(impl)));
  sync->CopyIn(/*anchor=*/true);
  return sync;
}

// Puts the anchor or master into the model. The model's inner progress on
// the device goes into master first, so putting the anchor in for an
// evaluation loses nothing (a non-finite value shows at the next sync).
void LocalSync::CopyIn(bool anchor) {
  torch::NoGradGuard no_grad;
  (void)impl_->PullMaster();
  const auto& from = anchor ? impl_->anchor : impl_->master;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    const ParamSlot& slot = impl_->layout.slots[i];
    torch::Tensor& p = impl_->params[i];
    p.copy_(torch::from_blob(const_cast<float*>(from[slot.bucket].data() + slot.offset), p.sizes(), torch::kFloat32));
  }
}

Status LocalSync::Settle(int64_t t) {
  bool changed = false;
  FRUGAL_RETURN_IF_ERROR(impl_->ApplyDue(t, &changed));
  if (changed) CopyIn(/*anchor=*/false);
  return Status::Ok();
}

Status LocalSync::BeginIteration(int64_t t, bool check_replicas) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(Settle(t));
  bool changed = false;
  if (t - m.synced_at >= m.stride && m.last_step > m.synced_at) {
    FRUGAL_RETURN_IF_ERROR(m.SyncFragment(static_cast<size_t>(m.next_fragment), t, m.delay));
    m.next_fragment = (m.next_fragment + 1) % static_cast<int64_t>(m.P());
    m.synced_at = t;
    // Only a blocking round changes master; an overlapped one reads it (its
    // outer step lands later, through ApplyDue).
    changed = changed || m.delay == 0;
  }
  if (changed) CopyIn(/*anchor=*/false);
  if (check_replicas) FRUGAL_RETURN_IF_ERROR(CheckReplicas(t).status());
  return Status::Ok();
}

// Note [Inner steps by the caller]: a Python user's own torch.optim
// optimizer (parameter groups, per-group hyperparameters, any lr scheduler,
// GradScaler) steps the model's tensors in place, as in their script
// without Frugal, and this object does only the rounds: it reads the
// tensors at a sync (PullMaster, as for Note [Inner steps on the device]),
// and writes the new master back after an outer step. The optimizer's
// state is the user's (saved with their optimizer's state_dict), so a
// checkpoint's inner state here is a fresh one. A step the caller skipped
// leaves the tensors as they were: its round sends less progress, and the
// rounds still agree on every rank, since only merged bytes move the
// anchor.
Status LocalSync::EndBackward(int64_t t) {
  Impl& m = *impl_;
  if (m.caller_steps) {
    m.master_stale = true;
    m.last_step = t + 1;
    return Status::Ok();
  }
  if (m.device_inner != nullptr) {  // Note [Inner steps on the device]: no copy until the next sync
    const auto t0 = m.transport->clock().Now();
    m.device_inner->Step(m.params, m.lr_at(t));
    m.master_stale = true;
    m.optimizer_s += Seconds(m.transport->clock().Now() - t0);
    m.last_step = t + 1;
    return Status::Ok();
  }
  m.ReadGradients();
  const auto t0 = m.transport->clock().Now();
  for (size_t b = 0; b < m.master.size(); ++b) {
    m.inner[b]->set_lr(m.lr_at(t));
    FRUGAL_RETURN_IF_ERROR(m.inner[b]->StepDense(Span<float>(m.master[b].data(), m.master[b].size()),
                                                 Span<const float>(m.grad[b].data(), m.grad[b].size())));
  }
  m.optimizer_s += Seconds(m.transport->clock().Now() - t0);
  m.last_step = t + 1;
  CopyIn(/*anchor=*/false);
  return Status::Ok();
}

// The outer steps in flight, then one blocking round of every fragment
// with steps since its last sync point; the model then holds the anchor.
// Note [The last round]: that round is a plain average of the replicas
// (anchor - merged pseudo-gradient), not an outer step: an outer step's
// momentum would extrapolate the run's past rounds once more after the
// inner learning rate has decayed (on mlp the accuracy fell 0.3 points in
// it), and the run's result is the replicas' average, as in PyTorch's
// post-local SGD.
Status LocalSync::Finish(int64_t t) {
  Impl& m = *impl_;
  for (size_t f = 0; f < m.P(); ++f) {
    if (m.frags[f]->apply_at >= 0) FRUGAL_RETURN_IF_ERROR(m.Apply(f));
  }
  for (size_t f = 0; f < m.P(); ++f) {
    if (m.last_step > m.frags[f]->synced_at) FRUGAL_RETURN_IF_ERROR(m.SyncFragment(f, t, /*after=*/0, /*average=*/true));
  }
  m.synced_at = t;
  m.master = m.anchor;
  m.master_stale = false;
  CopyIn(/*anchor=*/true);
  return Status::Ok();
}

Result<uint64_t> LocalSync::CheckReplicas(int64_t t) {
  comm::Transport& tr = *impl_->transport;
  const uint64_t mine = Fingerprint(impl_->anchor);
  comm::Bytes bytes(8);
  std::memcpy(bytes.data(), &mine, 8);
  auto all = comm::AllGather(tr, ControlTag(t, kChecksum), std::move(bytes), impl_->timeout);
  if (!all.ok()) return all.status().WithContext("comparing replica checksums at step " + std::to_string(t));
  for (int r = 0; r < tr.world_size(); ++r) {
    uint64_t theirs = 0;
    if ((*all)[r].size() == 8) std::memcpy(&theirs, (*all)[r].data(), 8);
    if (theirs != mine) {
      return Status::Internal("replicas diverged at step " + std::to_string(t) + " (--sync local anchors): " +
                              tr.topology().DescribeRank(r) + " has checksum " + std::to_string(theirs) + ", " +
                              tr.topology().DescribeRank(tr.rank()) + " has " + std::to_string(mine));
    }
  }
  return mine;
}

PipelineStats LocalSync::stats() const {
  CompressedAllReduceStats r;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mu);
    r = impl_->reduce_stats;
  }
  PipelineStats s;
  s.sparsify_s = r.sparsify_s;
  s.exchange_s = r.exchange_s;
  s.optimizer_s = impl_->optimizer_s;
  s.wait_s = impl_->wait_s;
  s.tasks = r.calls;
  s.sent_values = r.sent_values;
  s.total_values = r.total_values;
  s.merged_values = r.merged_values;
  return s;
}

int64_t LocalSync::rounds() const { return impl_->rounds; }

HostMemory LocalSync::host_memory() const {
  const Impl& m = *impl_;
  auto floats = [](const std::vector<std::vector<float>>& v) {
    uint64_t n = 0;
    for (const auto& b : v) n += 4 * b.capacity();
    return n;
  };
  auto state = [](const std::vector<std::unique_ptr<optim::SparseOptimizer>>& v) {
    uint64_t n = 0;
    for (const auto& o : v) n += o->StateBytes();
    return n;
  };
  uint64_t base = floats(m.spare_base), sending = floats(m.spare_sending);
  for (const auto& fr : m.frags) {
    base += floats(fr->base);
    sending += floats(fr->sending);
  }
  return {{"anchor", floats(m.anchor)},     {"master", floats(m.master)},
          {"base", base},                   {"sending", sending},
          {"gradients", floats(m.grad)},    {"inner_optimizer", state(m.inner)},
          {"outer_optimizer", state(m.outer)}, {"residuals", m.reduce->ResidualBytes()}};
}

bool LocalSync::inner_on_device() const { return impl_->ModelIsInner(); }

Status LocalSync::SaveSections(bool shared, CheckpointSections* sections) {
  FRUGAL_RETURN_IF_ERROR(impl_->DrainAll().WithContext("waiting for the rounds in flight before saving"));
  FRUGAL_RETURN_IF_ERROR(impl_->PullMaster());
  FRUGAL_RETURN_IF_ERROR(impl_->EnsureInner());  // Note [Host memory]
  if (impl_->device_inner != nullptr) impl_->device_inner->Export(impl_->layout, impl_->inner);
  if (shared) (*sections)["local_sync"] = impl_->SaveShared();
  (*sections)["local_sync_own"] = impl_->SaveOwn();
  if (impl_->ModelIsInner()) impl_->ReleaseInner();
  return Status::Ok();
}

Status LocalSync::RestoreSections(const CheckpointSections& s, const std::vector<uint8_t>* own,
                                  const std::string& what, bool keep_residuals) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.DrainAll());  // none is in flight before the first step; kept for safety
  auto it = s.find("local_sync");
  if (it == s.end()) return Status::Corruption(what + " has no 'local_sync' section (not a --sync local run?)");
  int64_t version = 0;
  FRUGAL_RETURN_IF_ERROR(m.LoadShared(it->second, &version).WithContext(what));
  if (own != nullptr) {
    FRUGAL_RETURN_IF_ERROR(m.EnsureInner());  // Note [Host memory]
    FRUGAL_RETURN_IF_ERROR(m.LoadOwn(*own, version, keep_residuals).WithContext(what));
  } else {
    // A rank the checkpoint did not have: it joins at the anchor with fresh
    // inner state and no residual (a pending outer step still applies to
    // its anchor at the next sync point).
    m.master = m.anchor;
    m.BaseFromAnchor();
    FRUGAL_RETURN_IF_ERROR(m.MakeInner());
    FRUGAL_RETURN_IF_ERROR(m.MakeReduce());
  }
  m.master_stale = false;  // master is the restored state, not the model's
  if (m.device_inner != nullptr) {
    FRUGAL_RETURN_IF_ERROR(m.EnsureInner());
    m.device_inner->Import(m.layout, m.inner);
  }
  if (m.ModelIsInner()) m.ReleaseInner();
  CopyIn(/*anchor=*/false);
  return Status::Ok();
}

}  // namespace frugal::engine
