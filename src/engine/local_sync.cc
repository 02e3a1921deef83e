#include "local_sync.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "control_kinds.h"
#include "frugal/comm/collectives.h"
#include "frugal/engine/compressed_allreduce.h"
#include "frugal/optim/sparse_optimizer.h"

namespace frugal::engine {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// 1: blocking rounds only; 2: adds the overlapped round's state (a merged
// pseudo-gradient waiting for its outer step; each rank's base).
constexpr uint64_t kStateVersion = 2;

// FNV-1a over the anchors' 32-bit words, as the pipeline's checksum.
uint64_t Fingerprint(const std::vector<std::vector<float>>& buckets) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& b : buckets) {
    for (float f : b) {
      uint32_t w;
      std::memcpy(&w, &f, 4);
      h = (h ^ w) * 1099511628211ULL;
    }
  }
  return h;
}

}  // namespace

class LocalSync::Impl {
 public:
  RunConfig config;
  std::function<double(int64_t)> lr_at;
  BucketLayout layout;
  std::vector<torch::Tensor> params;  // per slot
  comm::Transport* transport = nullptr;
  std::chrono::milliseconds timeout{60000};

  std::vector<std::vector<float>> anchor, master, grad;  // per bucket
  // base: the inner parameters at the last sync point, from which the
  // current round's pseudo-gradient is measured (= anchor when rounds block).
  // sending: the pseudo-gradient of the round in flight, replaced by the
  // ranks' merged average when its exchange is done.
  std::vector<std::vector<float>> base, sending;
  std::vector<std::unique_ptr<optim::SparseOptimizer>> inner, outer;
  std::unique_ptr<CompressedAllReduce> reduce;
  int64_t synced_at = 0;  // the iteration whose forward first used the current anchor
  int64_t last_step = 0;  // iterations with an inner step are < last_step
  int64_t rounds = 0;
  double optimizer_s = 0;
  double wait_s = 0;  // the compute thread waiting for an overlapped round's exchange

  // The overlapped round: its exchange runs on `flight` (joinable while in
  // flight); `pending` once it is done (joined) and its outer step not yet
  // taken.
  std::thread flight;
  Status flight_status;
  bool pending = false;
  mutable std::mutex stats_mu;  // guards reduce_stats (the exchange thread writes it)
  CompressedAllReduceStats reduce_stats;

  ~Impl() { (void)Drain(); }
  Status Init();
  Status BroadcastInitial();
  Status MakeInner();
  Status MakeOuter();
  Status MakeReduce();
  Status Sync(int64_t t);
  Status SyncOverlapped(int64_t t);
  Status Exchange(std::vector<std::vector<float>>* deltas, int64_t t);
  Status Drain();
  Status ApplyPending();
  Status OuterStep(const std::vector<std::vector<float>>& merged);
  void TakePseudoGradient(std::vector<std::vector<float>>* into);
  void ReadGradients();
  std::vector<uint8_t> SaveShared() const;
  std::vector<uint8_t> SaveOwn() const;
  Status LoadShared(const std::vector<uint8_t>& bytes, int64_t* version);
  Status LoadOwn(const std::vector<uint8_t>& bytes, int64_t version);
};

Status LocalSync::Impl::Init() {
  const size_t nb = layout.bucket_sizes.size();
  anchor.resize(nb);
  grad.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    anchor[b].assign(layout.bucket_sizes[b], 0.0f);
    grad[b].assign(layout.bucket_sizes[b], 0.0f);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlot& slot = layout.slots[i];
    torch::Tensor cpu = params[i].detach().to(torch::kCPU).contiguous();
    std::memcpy(anchor[slot.bucket].data() + slot.offset, cpu.data_ptr<float>(), slot.numel * sizeof(float));
  }
  FRUGAL_RETURN_IF_ERROR(BroadcastInitial());
  master = anchor;
  base = anchor;
  sending = grad;
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

// The run's own optimizer, one per bucket, this rank's state.
Status LocalSync::Impl::MakeInner() {
  const optim::OptimizerOptions o = MakeOptimizerOptions(config.train);
  inner.clear();
  for (size_t b = 0; b < anchor.size(); ++b) {
    FRUGAL_ASSIGN_OR_RETURN(auto opt, optim::CreateSparseOptimizer(o, anchor[b].size(), layout.bucket_names[b]));
    inner.push_back(std::move(opt));
  }
  return Status::Ok();
}

// DiLoCo's outer optimizer: SGD with Nesterov momentum on the anchor, the
// averaged pseudo-gradient as its gradient (plain SGD without momentum).
Status LocalSync::Impl::MakeOuter() {
  const DistributedOptions& d = config.distributed;
  optim::OptimizerOptions o;
  o.kind = "sgd";
  o.lr = d.outer_lr;
  o.momentum = d.outer_momentum;
  o.nesterov = d.outer_momentum > 0;
  outer.clear();
  for (size_t b = 0; b < anchor.size(); ++b) {
    FRUGAL_ASSIGN_OR_RETURN(auto opt, optim::CreateSparseOptimizer(o, anchor[b].size(), layout.bucket_names[b]));
    outer.push_back(std::move(opt));
  }
  return Status::Ok();
}

Status LocalSync::Impl::MakeReduce() {
  const DistributedOptions& d = config.distributed;
  CompressedAllReduceOptions o;
  o.sparsifier = NameOf(d.sparsifier);
  o.density = d.density;
  o.wire = WireFormatOf(d);
  o.dgc_momentum = static_cast<float>(d.dgc_momentum);
  o.exchange.algorithm = d.exchange;
  o.exchange.timeout = timeout;
  o.seed = config.train.seed;
  o.instance = 0;  // the worker's only CompressedAllReduce
  FRUGAL_ASSIGN_OR_RETURN(reduce, CompressedAllReduce::Create(o, transport));
  return Status::Ok();
}

// delta_b = base_b - master_b: this rank's inner progress since the last
// sync point.
void LocalSync::Impl::TakePseudoGradient(std::vector<std::vector<float>>* into) {
  for (size_t b = 0; b < master.size(); ++b) {
    std::vector<float>& d = (*into)[b];
    for (size_t i = 0; i < d.size(); ++i) d[i] = base[b][i] - master[b][i];
  }
}

// Replaces each bucket of `deltas` by the ranks' merged average (residual
// added, sparsified, encoded, exchanged, decoded).
Status LocalSync::Impl::Exchange(std::vector<std::vector<float>>* deltas, int64_t t) {
  for (size_t b = 0; b < deltas->size(); ++b) {
    std::vector<float>& d = (*deltas)[b];
    Status s = reduce->Run(b, Span<float>(d.data(), d.size()));
    if (!s.ok()) return s.WithContext("--sync local round ending before step " + std::to_string(t));
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  reduce_stats = reduce->stats();
  return Status::Ok();
}

// anchor_b <- NesterovSGD(anchor_b, merged_b), every bucket.
Status LocalSync::Impl::OuterStep(const std::vector<std::vector<float>>& merged) {
  const auto t0 = Clock::now();
  for (size_t b = 0; b < anchor.size(); ++b) {
    FRUGAL_RETURN_IF_ERROR(outer[b]->StepDense(Span<float>(anchor[b].data(), anchor[b].size()),
                                               Span<const float>(merged[b].data(), merged[b].size())));
  }
  optimizer_s += Seconds(Clock::now() - t0);
  return Status::Ok();
}

// One blocking round; see the header.
Status LocalSync::Impl::Sync(int64_t t) {
  TakePseudoGradient(&grad);
  FRUGAL_RETURN_IF_ERROR(Exchange(&grad, t));
  FRUGAL_RETURN_IF_ERROR(OuterStep(grad));
  master = anchor;
  base = anchor;
  synced_at = t;
  ++rounds;
  return Status::Ok();
}

// Waits for the round in flight; its merged pseudo-gradient is then pending.
Status LocalSync::Impl::Drain() {
  if (!flight.joinable()) return Status::Ok();
  const auto t0 = Clock::now();
  flight.join();
  wait_s += Seconds(Clock::now() - t0);
  pending = flight_status.ok();
  return flight_status;
}

// The outer step of the round that was in flight, on the anchor.
Status LocalSync::Impl::ApplyPending() {
  FRUGAL_RETURN_IF_ERROR(Drain());
  if (!pending) return Status::Ok();
  FRUGAL_RETURN_IF_ERROR(OuterStep(sending));
  pending = false;
  return Status::Ok();
}

// Note [Overlapped rounds]: at the sync point ending round k, a rank takes
// its pseudo-gradient delta_k = base - master (its progress during round k
// alone), takes the outer step of round k-1 (whose exchange ran during
// round k) on the anchor, and restarts from master = anchor - delta_k: the
// global model with the rounds up to k-1 merged, plus its own round k,
// which round k's merged average replaces one round later. Then delta_k's
// exchange starts on a thread, and base = master. So the inner steps never
// wait for the link unless an exchange outlasts a whole round (wait_s).
// Anchors change only by merged averages, in the same order on every rank,
// so they stay bit-identical; the models differ between ranks by their own
// last round, as in blocking mode between sync points. Finish takes the
// outer step in flight, then syncs the steps after the last sync point in
// a blocking round, so a run ends on identical replicas. This is a delay of
// one whole round (Streaming DiLoCo overlaps less), with the own round
// applied eagerly (as in Kale et al., "Eager updates", 2025). Opt-in
// (--local-overlap): with DiLoCo's outer momentum 0.9 the stale outer step
// converged lower on mlp (docs/benchmarks.md, "Overlapped rounds").
Status LocalSync::Impl::SyncOverlapped(int64_t t) {
  TakePseudoGradient(&grad);
  FRUGAL_RETURN_IF_ERROR(ApplyPending());
  for (size_t b = 0; b < master.size(); ++b) {
    for (size_t i = 0; i < master[b].size(); ++i) master[b][i] = anchor[b][i] - grad[b][i];
  }
  base = master;
  sending.swap(grad);
  flight_status = Status::Ok();
  flight = std::thread([this, t] { flight_status = Exchange(&sending, t); });
  synced_at = t;
  ++rounds;
  return Status::Ok();
}

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

// Note [Local-update state]: the shared section (rank 0 writes it; equal on
// every rank) holds a version, the round counters, whether an overlapped
// round's merged pseudo-gradient awaits its outer step, and per bucket the
// anchor, the outer optimizer's momentum and (if pending) that merged
// pseudo-gradient. Each rank's own section holds per bucket its inner
// parameters and inner optimizer state, then its CompressedAllReduce state
// (residuals, sparsifier states), then (version 2) per bucket its base. A
// round in flight is waited for before saving (its result is shared: every
// rank merged the same bytes), so a checkpoint in the middle of a round
// resumes bit-exactly: each rank continues from its own inner parameters.
std::vector<uint8_t> LocalSync::Impl::SaveShared() const {
  ByteWriter w;
  for (int64_t v : {static_cast<int64_t>(kStateVersion), synced_at, last_step, rounds,
                    static_cast<int64_t>(anchor.size()), static_cast<int64_t>(pending)}) {
    w.I64(v);
  }
  for (size_t b = 0; b < anchor.size(); ++b) {
    w.Floats(anchor[b].data(), anchor[b].size());
    w.Bytes(outer[b]->SerializeState());
    if (pending) w.Floats(sending[b].data(), sending[b].size());
  }
  return w.Take();
}

std::vector<uint8_t> LocalSync::Impl::SaveOwn() const {
  ByteWriter w;
  w.I64(static_cast<int64_t>(master.size()));
  for (size_t b = 0; b < master.size(); ++b) {
    w.Floats(master[b].data(), master[b].size());
    w.Bytes(inner[b]->SerializeState());
  }
  w.Bytes(reduce->SaveState());
  for (const auto& bucket : base) w.Floats(bucket.data(), bucket.size());
  return w.Take();
}

Status LocalSync::Impl::LoadShared(const std::vector<uint8_t>& bytes, int64_t* version) {
  ByteReader r(bytes, "local-update state");
  FRUGAL_ASSIGN_OR_RETURN(*version, r.I64());
  if (*version != 1 && *version != static_cast<int64_t>(kStateVersion)) {
    return Status::Corruption("local-update state: unknown version " + std::to_string(*version));
  }
  int64_t v[5] = {0, 0, 0, 0, 0};  // synced_at, last_step, rounds, buckets, pending
  for (int i = 0; i < (*version == 1 ? 4 : 5); ++i) {
    FRUGAL_ASSIGN_OR_RETURN(v[i], r.I64());
  }
  if (v[3] != static_cast<int64_t>(anchor.size())) {
    return Status::Corruption("local-update state has " + std::to_string(v[3]) + " buckets, this model has " +
                              std::to_string(anchor.size()) + " (same model and --bucket-mb?)");
  }
  if (v[0] < 0 || v[1] < v[0] || v[2] < 0 || v[4] < 0 || v[4] > 1) {
    return Status::Corruption("local-update state: bad round counters");
  }
  for (size_t b = 0; b < anchor.size(); ++b) {
    FRUGAL_RETURN_IF_ERROR(r.Floats(anchor[b].data(), anchor[b].size()));
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> st, r.Bytes());
    FRUGAL_RETURN_IF_ERROR(outer[b]->DeserializeState(Span<const uint8_t>(st.data(), st.size())));
    if (v[4] == 1) FRUGAL_RETURN_IF_ERROR(r.Floats(sending[b].data(), sending[b].size()));
  }
  if (!r.done()) return Status::Corruption("local-update state: trailing bytes");
  synced_at = v[0];
  last_step = v[1];
  rounds = v[2];
  pending = v[4] == 1;
  return Status::Ok();
}

Status LocalSync::Impl::LoadOwn(const std::vector<uint8_t>& bytes, int64_t version) {
  ByteReader r(bytes, "local-update state of this rank");
  FRUGAL_ASSIGN_OR_RETURN(int64_t n, r.I64());
  if (n != static_cast<int64_t>(master.size())) return Status::Corruption("local-update state: bucket count differs");
  for (size_t b = 0; b < master.size(); ++b) {
    FRUGAL_RETURN_IF_ERROR(r.Floats(master[b].data(), master[b].size()));
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> st, r.Bytes());
    FRUGAL_RETURN_IF_ERROR(inner[b]->DeserializeState(Span<const uint8_t>(st.data(), st.size())));
  }
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> reduce_state, r.Bytes());
  FRUGAL_RETURN_IF_ERROR(reduce->LoadState(reduce_state));
  if (version == 1) {
    base = anchor;  // rounds blocked: every round started at the anchor
  } else {
    for (auto& bucket : base) FRUGAL_RETURN_IF_ERROR(r.Floats(bucket.data(), bucket.size()));
  }
  if (!r.done()) return Status::Corruption("local-update state of this rank: trailing bytes");
  return Status::Ok();
}

LocalSync::LocalSync(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalSync::~LocalSync() = default;

Result<std::unique_ptr<LocalSync>> LocalSync::Create(const RunConfig& config, std::function<double(int64_t)> lr_at,
                                                     const BucketLayout& layout, std::vector<torch::Tensor> params,
                                                     comm::Transport* transport) {
  if (config.distributed.sync != SyncMode::kLocal) return Status::InvalidArgument("LocalSync needs --sync local");
  if (transport == nullptr) return Status::InvalidArgument("LocalSync needs a transport");
  if (params.size() != layout.slots.size()) return Status::InvalidArgument("LocalSync: parameters and layout differ");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->lr_at = std::move(lr_at);
  impl->layout = layout;
  impl->params = std::move(params);
  impl->transport = transport;
  impl->timeout = TimeoutOf(config.distributed);
  FRUGAL_RETURN_IF_ERROR(impl->Init());
  std::unique_ptr<LocalSync> sync(new LocalSync(std::move(impl)));
  sync->CopyIn(/*anchor=*/true);
  return sync;
}

void LocalSync::CopyIn(bool anchor) {
  torch::NoGradGuard no_grad;
  const auto& from = anchor ? impl_->anchor : impl_->master;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    const ParamSlot& slot = impl_->layout.slots[i];
    torch::Tensor& p = impl_->params[i];
    p.copy_(torch::from_blob(const_cast<float*>(from[slot.bucket].data() + slot.offset), p.sizes(), torch::kFloat32));
  }
}

Status LocalSync::BeginIteration(int64_t t, bool check_replicas) {
  Impl& m = *impl_;
  if (t - m.synced_at >= m.config.distributed.local_steps && m.last_step > m.synced_at) {
    FRUGAL_RETURN_IF_ERROR(m.config.distributed.local_overlap ? m.SyncOverlapped(t) : m.Sync(t));
    CopyIn(/*anchor=*/false);
  }
  if (check_replicas) FRUGAL_RETURN_IF_ERROR(CheckReplicas(t).status());
  return Status::Ok();
}

Status LocalSync::EndBackward(int64_t t) {
  Impl& m = *impl_;
  m.ReadGradients();
  const auto t0 = Clock::now();
  for (size_t b = 0; b < m.master.size(); ++b) {
    m.inner[b]->set_lr(m.lr_at(t));
    FRUGAL_RETURN_IF_ERROR(m.inner[b]->StepDense(Span<float>(m.master[b].data(), m.master[b].size()),
                                                 Span<const float>(m.grad[b].data(), m.grad[b].size())));
  }
  m.optimizer_s += Seconds(Clock::now() - t0);
  m.last_step = t + 1;
  CopyIn(/*anchor=*/false);
  return Status::Ok();
}

Status LocalSync::Finish(int64_t t) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.ApplyPending());
  if (m.last_step > m.synced_at) {
    FRUGAL_RETURN_IF_ERROR(m.Sync(t));
  } else {
    m.master = m.anchor;
    m.base = m.anchor;
  }
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

Status LocalSync::SaveSections(bool shared, CheckpointSections* sections) {
  FRUGAL_RETURN_IF_ERROR(impl_->Drain().WithContext("waiting for the round in flight before saving"));
  if (shared) (*sections)["local_sync"] = impl_->SaveShared();
  (*sections)["local_sync_own"] = impl_->SaveOwn();
  return Status::Ok();
}

Status LocalSync::RestoreSections(const CheckpointSections& s, const std::vector<uint8_t>* own,
                                  const std::string& what) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.Drain());  // none is in flight before the first step; kept for safety
  auto it = s.find("local_sync");
  if (it == s.end()) return Status::Corruption(what + " has no 'local_sync' section (not a --sync local run?)");
  int64_t version = 0;
  FRUGAL_RETURN_IF_ERROR(m.LoadShared(it->second, &version).WithContext(what));
  if (own != nullptr) {
    FRUGAL_RETURN_IF_ERROR(m.LoadOwn(*own, version).WithContext(what));
  } else {
    // A rank the checkpoint did not have: it joins at the anchor with fresh
    // inner state and no residual (a pending outer step still applies to
    // its anchor at the next sync point).
    m.master = m.anchor;
    m.base = m.anchor;
    FRUGAL_RETURN_IF_ERROR(m.MakeInner());
    FRUGAL_RETURN_IF_ERROR(m.MakeReduce());
  }
  CopyIn(/*anchor=*/false);
  return Status::Ok();
}

}  // namespace frugal::engine
