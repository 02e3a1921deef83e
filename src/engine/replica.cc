#include "frugal/engine/replica.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "control_kinds.h"
#include "device_copier.h"
#include "frugal/comm/algorithms/collectives.h"
#include "frugal/engine/checkpoint.h"

namespace frugal::engine {

namespace {

comm::Bytes U64Bytes(uint64_t v) {
  comm::Bytes b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

uint64_t BytesU64(const comm::Bytes& b) {
  uint64_t v = 0;
  if (b.size() == 8) std::memcpy(&v, b.data(), 8);
  return v;
}

std::string Describe(comm::Transport& transport, int rank) { return transport.topology().DescribeRank(rank); }

}  // namespace

optim::OptimizerOptions MakeOptimizerOptions(const train::TrainOptions& t) {
  optim::OptimizerOptions o;
  o.kind = NameOf(t.optimizer);
  o.lr = t.lr;
  o.weight_decay = t.weight_decay;
  o.momentum = t.momentum;
  o.dampening = t.dampening;
  o.nesterov = t.nesterov;
  o.beta1 = t.beta1;
  o.beta2 = t.beta2;
  o.eps = t.eps;
  return o;
}

ReplicaOptions MakeReplicaOptions(const RunConfig& config, std::function<double(int64_t)> lr_at) {
  const train::TrainOptions& t = config.train;
  const DistributedOptions& d = config.distributed;
  ReplicaOptions ro;
  ro.bucket_mb = d.bucket_mb;
  ro.timeout = TimeoutOf(d);
  ro.overlap_device_copies = d.overlap_device_copies;
  PipelineOptions& po = ro.pipeline;
  po.sparsifier = d.sparsifier;
  po.density = DensityOf(d);
  po.density_warmup_steps = d.density_warmup_steps;
  po.dense_bucket_max = static_cast<uint64_t>(d.dense_bucket_max);
  po.whole_bucket_share = d.whole_bucket_share;
  po.wire = WireFormatOf(d);
  po.staleness = d.staleness;
  po.cpu_threads = ResolveCpuThreads(config, 1);  // frugal train resolved it already, knowing its workers
  po.dgc_momentum = static_cast<float>(d.dgc_momentum);
  po.optimizer = MakeOptimizerOptions(t);
  po.exchange.timeout = ro.timeout;
  po.exchange.algorithm = d.exchange;
  po.leader = d.leader_residual ? collective::LeaderMode::kResidual : collective::LeaderMode::kMerge;
  po.seed = t.seed;
  po.lr_at = std::move(lr_at);
  ro.gradient_pipeline = !IsLocalUpdates(d.sync);
  return ro;
}

BucketLayout BucketLayout::Pack(const std::vector<std::pair<std::string, size_t>>& named_numels,
                                size_t bucket_floats) {
  BucketLayout layout;
  layout.slots.resize(named_numels.size());
  for (size_t k = named_numels.size(); k-- > 0;) {
    const auto& [name, n] = named_numels[k];
    if (layout.bucket_sizes.empty() || (layout.bucket_sizes.back() > 0 && layout.bucket_sizes.back() + n > bucket_floats)) {
      layout.bucket_sizes.push_back(0);
      layout.bucket_params.emplace_back();
      layout.bucket_names.emplace_back();
    }
    ParamSlot& slot = layout.slots[k];
    slot.name = name;
    slot.bucket = layout.bucket_sizes.size() - 1;
    slot.offset = layout.bucket_sizes.back();
    slot.numel = n;
    layout.bucket_sizes.back() += n;
    std::string& bname = layout.bucket_names.back();
    bname += (bname.empty() ? "" : "+") + name;
    layout.bucket_params.back().push_back(k);
  }
  return layout;
}

Status CheckSameConfiguration(comm::Transport& transport, uint64_t digest, std::chrono::milliseconds timeout) {
  auto digests = comm::AllGather(transport, ControlTag(0, kConfig), U64Bytes(digest), timeout);
  if (!digests.ok()) return digests.status().WithContext("exchanging run configuration");
  for (int r = 0; r < transport.world_size(); ++r) {
    if (BytesU64((*digests)[r]) != digest) {
      return Status::InvalidArgument("worker " + Describe(transport, r) + " runs a different configuration than " +
                                     Describe(transport, transport.rank()) +
                                     " (start every worker with the same config file and flags)");
    }
  }
  return Status::Ok();
}

class Replica::Impl {
 public:
  ReplicaOptions options;
  comm::Transport* transport = nullptr;
  std::vector<torch::Tensor> params;  // per slot
  BucketLayout layout;
  std::unique_ptr<GradientPipeline> pipeline;
  // After the pipeline: destroyed first, so its thread's last hand-over
  // still finds the pipeline.
  std::unique_ptr<DeviceCopier> copier;
  std::vector<unsigned> hooks;  // per param: its gradient hook, removed when the replica goes
  bool finished = false;

  // The tensors outlive the replica (they are the user's module's), so the
  // hooks, which point at this object, must go with it.
  ~Impl() {
    for (size_t i = 0; i < hooks.size(); ++i) params[i].remove_hook(hooks[i]);
  }

  // Gradient hand-over state of the iteration in backward.
  int64_t current_iteration = -1;
  int64_t keep_params_at = -1;  // after LoadState: BeginIteration of this t keeps the loaded parameters
  std::vector<size_t> pending;  // params still missing per bucket
  std::vector<bool> got_grad;   // per slot
  Status hook_error;

  Status Init(std::vector<std::pair<std::string, torch::Tensor>> named);
  Status NeedPipeline(const char* what) const;
  Result<std::vector<BucketSpec>> InitialBuckets();
  std::vector<optim::OptimizerSegment> BucketSegments(size_t b) const;
  Status BroadcastInitial(std::vector<BucketSpec>* specs);
  // After a LoadState: the next BeginIteration is the saved t and keeps
  // the loaded parameters.
  Status KeepLoadedAt(const std::vector<uint8_t>& pipeline_state) {
    FRUGAL_ASSIGN_OR_RETURN(int64_t t, ByteReader(pipeline_state, "pipeline state").I64());
    current_iteration = t - 1;
    keep_params_at = t;
    return Status::Ok();
  }
  void OnGradient(size_t slot_index, const torch::Tensor& grad);
  // The bucket's gradients are all in: to the pipeline, through the copier
  // on an accelerator.
  Status BucketDone(size_t bucket);
  void CopyOut(size_t bucket, Span<const float> master);
  engine::CopyOutFn MakeCopyOut() {
    return [this](size_t b, Span<const float> m) { CopyOut(b, m); };
  }
};

Status Replica::Impl::Init(std::vector<std::pair<std::string, torch::Tensor>> named) {
  if (named.empty()) return Status::InvalidArgument("the model has no parameters to train");
  std::set<const void*> seen;
  std::vector<std::pair<std::string, size_t>> numels;
  const torch::Device device = named.front().second.device();
  for (auto& [name, p] : named) {
    if (!p.defined()) return Status::InvalidArgument("parameter '" + name + "' is undefined");
    if (p.scalar_type() != torch::kFloat32) {
      return Status::InvalidArgument("parameter '" + name + "' is " + std::string(c10::toString(p.scalar_type())) +
                                     "; Frugal trains float32 parameters");
    }
    if (p.device() != device) {
      return Status::InvalidArgument("parameter '" + name + "' is on " + p.device().str() + " but '" +
                                     named.front().first + "' is on " + device.str() +
                                     "; move the whole model to one device first");
    }
    if (!p.requires_grad()) return Status::InvalidArgument("parameter '" + name + "' does not require grad");
    if (!seen.insert(p.unsafeGetTensorImpl()).second) {
      return Status::InvalidArgument("parameter '" + name + "' is listed twice (shared parameters are passed once)");
    }
    params.push_back(p);
    numels.emplace_back(name, static_cast<size_t>(p.numel()));
  }
  if (!(options.bucket_mb > 0)) return Status::InvalidArgument("bucket_mb must be > 0");
  if (!options.parameter_optimizers.empty() && options.parameter_optimizers.size() != params.size()) {
    return Status::InvalidArgument("the optimizer settings name " + std::to_string(options.parameter_optimizers.size()) +
                                   " parameters, the model passes " + std::to_string(params.size()));
  }
  layout = BucketLayout::Pack(numels, static_cast<size_t>(options.bucket_mb * 1024 * 1024 / sizeof(float)));
  if (!options.gradient_pipeline) return Status::Ok();  // Note [Replica without a pipeline]
  FRUGAL_ASSIGN_OR_RETURN(std::vector<BucketSpec> specs, InitialBuckets());
  if (options.broadcast_initial) FRUGAL_RETURN_IF_ERROR(BroadcastInitial(&specs));
  FRUGAL_ASSIGN_OR_RETURN(pipeline, GradientPipeline::Create(options.pipeline, std::move(specs), transport));
  copier = std::make_unique<DeviceCopier>(device, layout.bucket_sizes, options.overlap_device_copies);
  pending.assign(layout.bucket_params.size(), 0);
  got_grad.assign(layout.slots.size(), true);
  for (size_t i = 0; i < params.size(); ++i) {
    hooks.push_back(params[i].register_hook([this, i](torch::Tensor grad) { OnGradient(i, grad); }));
  }
  return Status::Ok();
}

// Note [Replica without a pipeline]
// The local modes train through LocalSync, which keeps its own anchor,
// inner parameters and exchange state and broadcasts rank 0's values
// itself. An idle pipeline would still hold a master copy, two or three
// gradient buffers, a residual and the optimizer's state: measured on the
// language-model examples, about 24 bytes per parameter that nothing read.
// So a replica of a local mode is only the parameters' validation and
// layout, their checkpoint form (SaveParameters) and the buffer average.

Result<std::vector<BucketSpec>> Replica::Impl::InitialBuckets() {
  std::vector<BucketSpec> specs(layout.bucket_sizes.size());
  for (size_t b = 0; b < specs.size(); ++b) {
    specs[b].name = layout.bucket_names[b];
    specs[b].initial.resize(layout.bucket_sizes[b]);
    for (size_t i : layout.bucket_params[b]) {
      const ParamSlot& slot = layout.slots[i];
      torch::Tensor cpu = params[i].detach().to(torch::kCPU).contiguous();
      std::memcpy(specs[b].initial.data() + slot.offset, cpu.data_ptr<float>(), slot.numel * sizeof(float));
    }
    if (!options.parameter_optimizers.empty()) specs[b].optimizer_segments = BucketSegments(b);
  }
  return specs;
}

// Bucket b's parameters in their order inside it, adjacent ones with equal
// settings merged into one segment.
std::vector<optim::OptimizerSegment> Replica::Impl::BucketSegments(size_t b) const {
  std::vector<size_t> order = layout.bucket_params[b];
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return layout.slots[x].offset < layout.slots[y].offset; });
  std::vector<optim::OptimizerSegment> segments;
  for (size_t i : order) {
    const optim::OptimizerSegment& mine = options.parameter_optimizers[i];
    if (!segments.empty() && segments.back().options == mine.options && segments.back().lr_factor == mine.lr_factor) {
      segments.back().size += layout.slots[i].numel;
    } else {
      segments.push_back(optim::OptimizerSegment{layout.slots[i].numel, mine.options, mine.lr_factor});
    }
  }
  return segments;
}

// Like DDP, every replica starts from rank 0's parameters, so replicas agree
// even if their LibTorch builds (or the user's seeds) initialise differently.
Status Replica::Impl::BroadcastInitial(std::vector<BucketSpec>* specs) {
  for (size_t b = 0; b < specs->size(); ++b) {
    BucketSpec& spec = (*specs)[b];
    comm::Bytes mine;
    if (transport->rank() == 0) {
      mine.resize(spec.initial.size() * sizeof(float));
      std::memcpy(mine.data(), spec.initial.data(), mine.size());
    }
    auto got = comm::Broadcast(*transport, ControlTag(b, kInitialParams), 0, std::move(mine), options.timeout);
    if (!got.ok()) return got.status().WithContext("receiving the initial parameters");
    if (got->size() != spec.initial.size() * sizeof(float)) {
      return Status::Corruption("initial parameters of bucket " + spec.name + " have the wrong size (" +
                                std::to_string(got->size() / sizeof(float)) + " values, expected " +
                                std::to_string(spec.initial.size()) + "): do all workers build the same model?");
    }
    std::memcpy(spec.initial.data(), got->data(), got->size());
  }
  return Status::Ok();
}

void Replica::Impl::OnGradient(size_t i, const torch::Tensor& grad) {
  if (finished || current_iteration < 0 || !hook_error.ok()) return;
  const ParamSlot& slot = layout.slots[i];
  if (got_grad[i]) {
    // Its bucket may be on the wire already: a second backward cannot add
    // to it, and dropping it would train silently on half the batch.
    hook_error = Status::InvalidArgument(
        "parameter '" + slot.name + "' got a second gradient in iteration " + std::to_string(current_iteration) +
        ": the step mode takes one backward per step (gradient accumulation: sync='local', or --sync local)");
    return;
  }
  if (copier->active()) {
    copier->CopyGradient(slot.bucket, slot.offset, grad);
  } else {
    Span<float> buf = pipeline->GradBuffer(slot.bucket, current_iteration);
    torch::Tensor g = grad.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    std::memcpy(buf.data() + slot.offset, g.data_ptr<float>(), slot.numel * sizeof(float));
  }
  got_grad[i] = true;
  if (--pending[slot.bucket] == 0) {
    Status s = BucketDone(slot.bucket);
    if (!s.ok()) hook_error = s;
  }
}

Status Replica::Impl::BucketDone(size_t bucket) {
  const int64_t t = current_iteration;
  if (!copier->active()) return pipeline->Submit(bucket, t);
  copier->CompleteBucket(bucket, [this, bucket, t](Span<const float> staged) {
    Span<float> buf = pipeline->GradBuffer(bucket, t);
    std::memcpy(buf.data(), staged.data(), staged.size() * sizeof(float));
    return pipeline->Submit(bucket, t);
  });
  return Status::Ok();
}

void Replica::Impl::CopyOut(size_t bucket, Span<const float> master) {
  torch::NoGradGuard no_grad;
  if (copier->active()) {
    const torch::Tensor staged = copier->StageUpload(bucket, master);
    for (size_t i : layout.bucket_params[bucket]) {
      const ParamSlot& slot = layout.slots[i];
      params[i].copy_(staged.narrow(0, static_cast<int64_t>(slot.offset), static_cast<int64_t>(slot.numel))
                          .view(params[i].sizes()),
                      /*non_blocking=*/true);
    }
    copier->Uploaded(bucket);
    return;
  }
  for (size_t i : layout.bucket_params[bucket]) {
    const ParamSlot& slot = layout.slots[i];
    torch::Tensor src = torch::from_blob(const_cast<float*>(master.data() + slot.offset), params[i].sizes(),
                                         torch::kFloat32);
    params[i].copy_(src);
  }
}

Replica::Replica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Replica::~Replica() = default;

Result<std::unique_ptr<Replica>> Replica::Create(const ReplicaOptions& options,
                                                 std::vector<std::pair<std::string, torch::Tensor>> params,
                                                 comm::Transport* transport) {
  if (transport == nullptr) return Status::InvalidArgument("Replica needs a transport");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->transport = transport;
  try {
    FRUGAL_RETURN_IF_ERROR(impl->Init(std::move(params)));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<Replica>(new Replica(std::move(impl)));
}

Status Replica::Impl::NeedPipeline(const char* what) const {
  if (pipeline != nullptr) return Status::Ok();
  return Status::InvalidArgument(std::string(what) +
                                    ": this replica has no gradient pipeline (a local mode's; LocalSync runs it)");
}

Status Replica::BeginIteration(int64_t t, bool check_replicas) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.NeedPipeline("BeginIteration"));
  if (m.finished) return Status::InvalidArgument("the replica is finished");
  if (t != m.current_iteration + 1) {
    return Status::InvalidArgument("iterations must be begun in order: expected " +
                                   std::to_string(m.current_iteration + 1) + ", got " + std::to_string(t));
  }
  FRUGAL_RETURN_IF_ERROR(m.hook_error);
  const CopyOutFn keep = [](size_t, Span<const float>) {};
  FRUGAL_RETURN_IF_ERROR(m.pipeline->BeginIteration(t, t == m.keep_params_at ? keep : m.MakeCopyOut(), check_replicas));
  if (check_replicas) FRUGAL_RETURN_IF_ERROR(CheckReplicas(t).status());
  m.current_iteration = t;
  std::fill(m.got_grad.begin(), m.got_grad.end(), false);
  for (size_t b = 0; b < m.layout.bucket_params.size(); ++b) m.pending[b] = m.layout.bucket_params[b].size();
  return Status::Ok();
}

Status Replica::EndBackward() {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.NeedPipeline("EndBackward"));
  if (m.current_iteration < 0) return Status::InvalidArgument("EndBackward before BeginIteration");
  if (m.finished) return Status::InvalidArgument("the replica is finished");
  // The gradients are in the pipeline's buffers; the tensors' .grad would
  // only accumulate across iterations.
  for (auto& p : m.params) p.mutable_grad() = torch::Tensor();
  FRUGAL_RETURN_IF_ERROR(m.hook_error);
  for (size_t i = 0; i < m.layout.slots.size(); ++i) {
    if (m.got_grad[i]) continue;
    const ParamSlot& slot = m.layout.slots[i];
    if (m.copier->active()) {
      m.copier->ZeroStaged(slot.bucket, slot.offset, slot.numel);
    } else {
      Span<float> buf = m.pipeline->GradBuffer(slot.bucket, m.current_iteration);
      std::fill(buf.data() + slot.offset, buf.data() + slot.offset + slot.numel, 0.0f);
    }
    m.got_grad[i] = true;
    if (--m.pending[slot.bucket] == 0) FRUGAL_RETURN_IF_ERROR(m.BucketDone(slot.bucket));
  }
  // On an accelerator: every bucket handed over before the step goes on.
  return m.copier->Drain();
}

Status Replica::Finish() {
  FRUGAL_RETURN_IF_ERROR(impl_->NeedPipeline("Finish"));
  impl_->finished = true;  // a later backward no longer reaches the pipeline
  FRUGAL_RETURN_IF_ERROR(impl_->hook_error);
  return impl_->pipeline->Finish(impl_->MakeCopyOut());
}

Result<uint64_t> Replica::CheckReplicas(int64_t t) {
  FRUGAL_RETURN_IF_ERROR(impl_->NeedPipeline("CheckReplicas"));
  comm::Transport& tr = *impl_->transport;
  const uint64_t checksum = impl_->pipeline->Checksum();
  auto all = comm::AllGather(tr, ControlTag(t, kChecksum), U64Bytes(checksum), impl_->options.timeout);
  if (!all.ok()) return all.status().WithContext("comparing replica checksums at step " + std::to_string(t));
  for (int r = 0; r < tr.world_size(); ++r) {
    if (BytesU64((*all)[r]) != checksum) {
      return Status::Internal("replicas diverged at step " + std::to_string(t) + ": " + Describe(tr, r) +
                              " has parameter checksum " + std::to_string(BytesU64((*all)[r])) + ", " +
                              Describe(tr, tr.rank()) + " has " + std::to_string(checksum));
    }
  }
  return checksum;
}

// Note [Batch-norm statistics]: running means/variances are not gradients and
// are not exchanged every step; each replica tracks its own shard. Before
// every evaluation (and at the end) the float buffers are averaged across
// workers (an all-gather of the concatenated buffers, summed in rank order
// so every replica gets identical values); integer counters are left alone.
Status Replica::AverageBuffers(int64_t t, const std::vector<torch::Tensor>& buffers) {
  comm::Transport& tr = *impl_->transport;
  if (buffers.empty() || tr.world_size() == 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat_parts;
  for (const auto& b : buffers) {
    if (!b.is_floating_point()) return Status::InvalidArgument("AverageBuffers: only floating-point buffers");
    flat_parts.push_back(b.detach().to(torch::kCPU, torch::kFloat32).flatten());
  }
  torch::Tensor flat = torch::cat(flat_parts).contiguous();
  comm::Bytes mine(flat.numel() * sizeof(float));
  std::memcpy(mine.data(), flat.data_ptr<float>(), mine.size());
  auto all = comm::AllGather(tr, ControlTag(t, kBatchNorm), std::move(mine), impl_->options.timeout);
  if (!all.ok()) return all.status().WithContext("averaging batch-norm statistics");
  torch::Tensor sum = torch::zeros_like(flat);
  for (auto& part : *all) {
    if (part.size() != static_cast<size_t>(flat.numel()) * sizeof(float)) {
      return Status::Corruption("batch-norm statistics of a peer have the wrong size");
    }
    sum += torch::from_blob(part.data(), {flat.numel()}, torch::kFloat32);
  }
  sum /= static_cast<double>(tr.world_size());
  int64_t offset = 0;
  for (const auto& b : buffers) {
    torch::Tensor target = b;
    target.copy_(sum.slice(0, offset, offset + b.numel()).view(b.sizes()));
    offset += b.numel();
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> Replica::SavePipelineState(GradientPipeline::StateParts parts) {
  FRUGAL_RETURN_IF_ERROR(impl_->NeedPipeline("SavePipelineState"));
  return impl_->pipeline->SaveState(parts);
}

Status Replica::LoadLocalState(const std::vector<uint8_t>& local_state) {
  FRUGAL_RETURN_IF_ERROR(impl_->NeedPipeline("LoadLocalState"));
  return impl_->pipeline->LoadLocalState(local_state);
}

std::vector<uint8_t> Replica::SaveParameters() const {
  ByteWriter w;
  size_t total = 0;
  for (const auto& p : impl_->params) total += 8 + 4 * static_cast<size_t>(p.numel());
  w.Reserve(total);  // Note [Sized snapshots] in checkpoint.cc
  for (const auto& p : impl_->params) {
    torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
    w.Floats(c.data_ptr<float>(), static_cast<size_t>(c.numel()));
  }
  return w.Take();
}

Status Replica::LoadState(const std::vector<uint8_t>& pipeline_state, const std::vector<uint8_t>& parameters,
                          bool residuals) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.NeedPipeline("LoadState"));
  if (m.current_iteration >= 0) return Status::Internal("Replica::LoadState after the run started");
  FRUGAL_RETURN_IF_ERROR(m.pipeline->LoadState(pipeline_state, residuals));
  ByteReader r(parameters, "checkpoint parameters");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < m.params.size(); ++i) {
    torch::Tensor cpu = torch::empty(m.params[i].sizes(), torch::kFloat32);
    FRUGAL_RETURN_IF_ERROR(r.Floats(cpu.data_ptr<float>(), static_cast<size_t>(cpu.numel())));
    m.params[i].copy_(cpu);
  }
  if (!r.done()) return Status::Corruption("checkpoint parameters: more values than this model has");
  return m.KeepLoadedAt(pipeline_state);
}

Status Replica::LoadStateWithMastersAsParameters(const std::vector<uint8_t>& pipeline_state, bool residuals) {
  Impl& m = *impl_;
  FRUGAL_RETURN_IF_ERROR(m.NeedPipeline("LoadStateWithMastersAsParameters"));
  if (m.current_iteration >= 0) return Status::Internal("Replica::LoadState after the run started");
  FRUGAL_RETURN_IF_ERROR(m.pipeline->LoadState(pipeline_state, residuals));
  m.pipeline->VisitMasters(m.MakeCopyOut());  // as BeginIteration copies them out
  return m.KeepLoadedAt(pipeline_state);
}

bool Replica::ParametersAreMasters() const {
  const Impl& m = *impl_;
  if (m.pipeline == nullptr) return false;
  bool equal = true;
  m.pipeline->VisitMasters([&](size_t b, Span<const float> master) {
    for (size_t i : m.layout.bucket_params[b]) {
      if (!equal) return;
      const ParamSlot& slot = m.layout.slots[i];
      torch::Tensor c = m.params[i].detach().to(torch::kCPU).contiguous();
      equal = std::memcmp(c.data_ptr<float>(), master.data() + slot.offset, slot.numel * sizeof(float)) == 0;
    }
  });
  return equal;
}

int64_t Replica::iteration() const { return impl_->current_iteration; }
size_t Replica::num_buckets() const { return impl_->layout.bucket_sizes.size(); }
const BucketLayout& Replica::layout() const { return impl_->layout; }
GradientPipeline* Replica::pipeline() { return impl_->pipeline.get(); }
comm::Transport& Replica::transport() { return *impl_->transport; }

std::vector<uint8_t> SaveBuffers(const std::vector<torch::Tensor>& buffers) {
  ByteWriter w;
  for (const torch::Tensor& b : buffers) {
    torch::Tensor c = b.detach().to(torch::kCPU).contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    w.Bytes(std::vector<uint8_t>(p, p + c.numel() * c.element_size()));
  }
  return w.Take();
}

Status RestoreBuffers(const std::vector<uint8_t>& section, const std::vector<torch::Tensor>& buffers,
                      const std::string& what) {
  ByteReader r(section, what + " buffers");
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& b : buffers) {
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, r.Bytes());
    if (bytes.size() != static_cast<size_t>(b.numel() * b.element_size())) {
      return Status::Corruption(what + ": a model buffer has the wrong size (same model?)");
    }
    torch::Tensor cpu = torch::empty(b.sizes(), b.options().device(torch::kCPU));
    std::memcpy(cpu.data_ptr(), bytes.data(), bytes.size());
    torch::Tensor(b).copy_(cpu);
  }
  return Status::Ok();
}

}  // namespace frugal::engine
