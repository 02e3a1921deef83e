#include "frugal/engine/gradient_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "frugal/compress/error_feedback.h"
#include "frugal/compress/merge.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/common/hash.h"
#include "frugal/common/clock.h"

namespace frugal::engine {

// Note [Pipeline and staleness]
// Each bucket b keeps a CPU master copy of its parameters and two version
// counters: applied(b), the last iteration whose merged update is in the
// master, and copied_for(b), the last iteration whose forward copied the
// master into the model. Two rules, with staleness s:
//   (gate)  forward t starts once applied(b) >= t-1-s for every b;
//   (apply) the update of iteration u is applied once copied_for(b) >= u+s
//           (or the run is finishing).
// Together they make the forward of t see exactly version t-1-s on every
// worker, whatever the thread timing: with s = 1 the update of t-1 is held
// back until forward t has copied version t-2, and is then applied while
// forward/backward of t run. Compute of t therefore overlaps the CPU and
// network work of t-1, and replicas stay bit-identical (every worker applies
// the same merged bytes in the same order).
//
// Bucket tasks are processed in iteration order per bucket (error feedback
// and optimizer state are sequential). Gradient buffers rotate over s+2
// slots: backward of t+s+2 can only start after iteration t is applied, so a
// slot is never overwritten while a task still reads it.

namespace {

constexpr comm::Tag kControlBit = comm::Tag{1} << 63;

struct Bucket {
  std::string name;
  std::vector<float> master;              // GUARDED_BY(mu)
  std::vector<std::vector<float>> grads;  // s+2 rotating slots
  std::unique_ptr<compress::Sparsifier> sparsifier;
  std::unique_ptr<compress::ErrorFeedback> feedback;
  std::unique_ptr<optim::SparseOptimizer> optimizer;  // GUARDED_BY(mu)
  bool whole = false;                                 // sent whole every step (WholeBuckets)
  std::mutex mu;
  // Guarded by Impl::mu_:
  int64_t applied = -1;
  int64_t copied_for = -1;
  int64_t processed = -1;  // last iteration whose task finished (ordering)
  int64_t submitted = -1;
};

struct Task {
  size_t bucket;
  int64_t iteration;
};

}  // namespace

class GradientPipeline::Impl {
 public:
  Impl(PipelineOptions options, comm::Transport* transport)
      : options_(std::move(options)), transport_(transport) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  Status Init(std::vector<BucketSpec> specs);
  Status BeginIteration(int64_t t, const CopyOutFn& copy_out, bool want_checksum);
  Span<float> GradBuffer(size_t b, int64_t t) {
    auto& slot = buckets_[b]->grads[static_cast<size_t>(t) % buckets_[b]->grads.size()];
    return Span<float>(slot.data(), slot.size());
  }
  Status Submit(size_t b, int64_t t);
  Status Finish(const CopyOutFn& copy_out);
  uint64_t Checksum() const { return last_checksum_; }
  PipelineStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  Status SetFrom(int64_t t, double density, double lr_scale) {
    // lr_scale 0 is a schedule's end (a cosine decays to 0): updates of zero.
    if (!(density > 0) || density > 1 || !(lr_scale >= 0) || !std::isfinite(lr_scale)) {
      return Status::InvalidArgument("bad density or lr scale");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!settings_.empty() && t < settings_.rbegin()->first) return Status::Internal("settings must move forward");
    settings_[t] = Settings{density, lr_scale};
    return Status::Ok();
  }
  size_t num_buckets() const { return buckets_.size(); }
  size_t bucket_size(size_t b) const { return buckets_[b]->master.size(); }
  void VisitMasters(const CopyOutFn& visit) const {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      std::lock_guard<std::mutex> lock(buckets_[b]->mu);
      visit(b, Span<const float>(buckets_[b]->master.data(), buckets_[b]->master.size()));
    }
  }
  Result<std::vector<uint8_t>> SaveState(StateParts parts);
  Status LoadState(const std::vector<uint8_t>& bytes, bool residuals);
  Status LoadLocalState(const std::vector<uint8_t>& bytes);
  HostMemory host_memory() const {
    uint64_t masters = 0, grads = 0, residuals = 0, optimizer = 0;
    for (const auto& b : buckets_) {
      std::lock_guard<std::mutex> lock(b->mu);
      masters += 4 * b->master.size();
      for (const auto& g : b->grads) grads += 4 * g.size();
      residuals += 4 * (b->feedback->residual().size() + b->feedback->velocity().size());
      optimizer += b->optimizer->StateBytes();
    }
    return {{"masters", masters}, {"gradient_slots", grads}, {"residuals", residuals}, {"optimizer", optimizer}};
  }

 private:
  Status Drain();
  Status LoadParts(const std::vector<uint8_t>& bytes, bool want_shared, bool want_local);
  void ThreadMain();
  Status RunTask(const Task& task);
  Result<comm::Bytes> Combine(std::vector<comm::Bytes> parts);
  void SetError(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s;
    cv_.notify_all();
  }
  void CopyAll(const CopyOutFn& copy_out, int64_t mark_copied_for, bool want_checksum);
  struct Settings {
    double density;
    double lr_scale;
  };
  Settings SettingsAt(int64_t t) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = settings_.upper_bound(t);
    if (it == settings_.begin()) return Settings{options_.density, 1.0};
    return std::prev(it)->second;
  }

  const PipelineOptions options_;
  comm::Transport* const transport_;
  std::unique_ptr<comm::SparseExchange> exchange_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;       // GUARDED_BY(mu_)
  bool finishing_ = false;  // GUARDED_BY(mu_)
  Status error_;            // GUARDED_BY(mu_), sticky
  PipelineStats stats_;     // GUARDED_BY(mu_)
  std::map<int64_t, Settings> settings_;  // GUARDED_BY(mu_): from iteration -> settings
  int64_t next_iteration_ = 0;  // compute thread only
  uint64_t last_checksum_ = 0;  // compute thread only
};

Status GradientPipeline::Impl::Init(std::vector<BucketSpec> specs) {
  if (specs.empty()) return Status::InvalidArgument("no parameters to train");
  if (options_.staleness < 0 || options_.staleness > 1) return Status::InvalidArgument("--staleness must be 0 or 1");
  if (!(options_.density > 0) || options_.density > 1) return Status::InvalidArgument("--density must be in (0, 1]");
  if (options_.cpu_threads < 1) return Status::InvalidArgument("--cpu-threads must be >= 1");
  if (!options_.lr_at) return Status::InvalidArgument("no learning-rate schedule");
  const size_t slots = static_cast<size_t>(options_.staleness) + 2;
  for (auto& spec : specs) {
    auto b = std::make_unique<Bucket>();
    b->name = spec.name;
    b->master = std::move(spec.initial);
    b->grads.assign(slots, std::vector<float>(b->master.size(), 0.0f));
    compress::SparsifierOptions so;
    so.tensor_name = b->name;
    so.seed = options_.seed + buckets_.size();
    FRUGAL_ASSIGN_OR_RETURN(b->sparsifier, compress::CreateSparsifier(options_.sparsifier, so));
    compress::ErrorFeedbackOptions eo;
    eo.tensor_name = b->name;
    eo.momentum = options_.dgc_momentum;
    eo.wire_values = options_.wire.values;
    b->feedback = std::make_unique<compress::ErrorFeedback>(b->master.size(), eo);
    if (spec.optimizer_segments.empty()) {
      FRUGAL_ASSIGN_OR_RETURN(b->optimizer, optim::CreateSparseOptimizer(options_.optimizer, b->master.size(), b->name));
    } else {
      FRUGAL_ASSIGN_OR_RETURN(b->optimizer, optim::CreateSegmentedOptimizer(spec.optimizer_segments, b->name));
      if (b->optimizer->size() != b->master.size()) {
        return Status::InvalidArgument("bucket '" + b->name + "': the optimizer segments cover " +
                                       std::to_string(b->optimizer->size()) + " of its " +
                                       std::to_string(b->master.size()) + " values");
      }
    }
    buckets_.push_back(std::move(b));
  }
  std::vector<uint64_t> sizes;
  for (const auto& b : buckets_) sizes.push_back(b->master.size());
  const std::vector<bool> whole = WholeBuckets(sizes, options_.whole_bucket_share, options_.dense_bucket_max);
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i]->whole = whole[i];
  exchange_ = std::make_unique<comm::SparseExchange>(
      transport_, [this](std::vector<comm::Bytes> parts) { return Combine(std::move(parts)); }, options_.exchange);
  for (int i = 0; i < options_.cpu_threads; ++i) threads_.emplace_back([this] { ThreadMain(); });
  return Status::Ok();
}

Result<comm::Bytes> GradientPipeline::Impl::Combine(std::vector<comm::Bytes> parts) {
  return compress::CombineEncoded(parts, options_.wire);
}

void GradientPipeline::Impl::ThreadMain() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      task = queue_.front();
      queue_.pop_front();
    }
    Status s = RunTask(task);
    if (!s.ok()) SetError(s);
  }
}

Status GradientPipeline::Impl::RunTask(const Task& task) {
  using Clock = std::chrono::steady_clock;
  Bucket& b = *buckets_[task.bucket];
  const int64_t t = task.iteration;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || !error_.ok() || b.processed == t - 1; });
    if (stop_ || !error_.ok()) return Status::Ok();
  }
  auto t0 = Clock::now();
  compress::SparseVector mine;
  auto& grad = b.grads[static_cast<size_t>(t) % b.grads.size()];
  const double density = b.whole ? 1.0 : WarmupDensity(SettingsAt(t).density, t, options_.density_warmup_steps);
  FRUGAL_RETURN_IF_ERROR(
      b.feedback->Compress(Span<const float>(grad.data(), grad.size()), *b.sparsifier, density, &mine));
  comm::Bytes encoded;
  FRUGAL_RETURN_IF_ERROR(compress::Encode(mine, options_.wire, &encoded));
  auto t1 = Clock::now();
  Result<std::vector<comm::Bytes>> parts =
      exchange_->RunUncombined(GradientTag(t, task.bucket, buckets_.size()), std::move(encoded));
  if (!parts.ok()) return parts.status().WithContext("iteration " + std::to_string(t) + ", bucket " + b.name);
  auto t2 = Clock::now();
  compress::SparseVector update;  // Note [Merged updates] in src/compress/merge.cc
  FRUGAL_RETURN_IF_ERROR(compress::DecodeAndMerge(*parts, &update));
  if (update.dense_size != b.master.size()) {
    return Status::Corruption("bucket " + b.name + ": merged update has " + std::to_string(update.dense_size) +
                              " elements, expected " + std::to_string(b.master.size()));
  }
  const float inv_world = 1.0f / static_cast<float>(transport_->world_size());
  for (float& v : update.values) v *= inv_world;
  auto decode_done = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || !error_.ok() || finishing_ || b.copied_for >= t + options_.staleness; });
    if (stop_ || !error_.ok()) return Status::Ok();
  }
  auto t3 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    b.optimizer->set_lr(options_.lr_at(t) * SettingsAt(t).lr_scale);
    FRUGAL_RETURN_IF_ERROR(b.optimizer->Step(Span<float>(b.master.data(), b.master.size()),
                                             Span<const uint32_t>(update.indices.data(), update.indices.size()),
                                             Span<const float>(update.values.data(), update.values.size())));
  }
  auto t4 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    b.applied = t;
    b.processed = t;
    stats_.sparsify_s += Seconds(t1 - t0);
    stats_.exchange_s += Seconds(t2 - t1);
    stats_.optimizer_s += Seconds(t4 - t3) + Seconds(decode_done - t2);
    stats_.tasks += 1;
    stats_.sent_values += mine.nnz();
    stats_.total_values += b.master.size();
    stats_.merged_values += update.nnz();
    const compress::FeedbackMass& mass = b.feedback->last_mass();
    stats_.held_mass += mass.held;
    stats_.sent_mass += mass.sent;
    stats_.held_sq += mass.held_sq;
    stats_.sent_sq += mass.sent_sq;
  }
  cv_.notify_all();
  return Status::Ok();
}

void GradientPipeline::Impl::CopyAll(const CopyOutFn& copy_out, int64_t mark_copied_for, bool want_checksum) {
  // The apply rule holds every bucket at this version until copied_for is
  // raised below, so the checksum describes exactly what was copied.
  uint64_t h = kFnv1a64Offset;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    std::lock_guard<std::mutex> lock(b.mu);
    copy_out(i, Span<const float>(b.master.data(), b.master.size()));
    if (want_checksum) h = Fnv1a64Words(b.master.data(), b.master.size(), h);
  }
  if (want_checksum) last_checksum_ = h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : buckets_) b->copied_for = std::max(b->copied_for, mark_copied_for);
  }
  cv_.notify_all();
}

Status GradientPipeline::Impl::BeginIteration(int64_t t, const CopyOutFn& copy_out, bool want_checksum) {
  if (t != next_iteration_) {
    return Status::Internal("BeginIteration(" + std::to_string(t) + ") out of order, expected " +
                            std::to_string(next_iteration_));
  }
  auto start = std::chrono::steady_clock::now();
  const int64_t need = t - 1 - options_.staleness;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      if (!error_.ok()) return true;
      for (auto& b : buckets_) {
        if (b->applied < need) return false;
      }
      return true;
    });
    if (!error_.ok()) return error_;
    stats_.wait_s += Seconds(std::chrono::steady_clock::now() - start);
  }
  CopyAll(copy_out, t, want_checksum);
  next_iteration_ = t + 1;
  return Status::Ok();
}

Status GradientPipeline::Impl::Submit(size_t b, int64_t t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  if (b >= buckets_.size()) return Status::Internal("bucket index out of range");
  if (t != next_iteration_ - 1 || buckets_[b]->submitted >= t) {
    return Status::Internal("Submit(bucket " + std::to_string(b) + ", iteration " + std::to_string(t) +
                            ") does not follow BeginIteration or repeats");
  }
  buckets_[b]->submitted = t;
  queue_.push_back(Task{b, t});
  cv_.notify_all();
  return Status::Ok();
}

// Waits until every submitted task is applied.
Status GradientPipeline::Impl::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.notify_all();
  cv_.wait(lock, [&] {
    if (!error_.ok()) return true;
    for (auto& b : buckets_) {
      if (b->applied < b->submitted) return false;
    }
    return true;
  });
  return error_;
}

Status GradientPipeline::Impl::Finish(const CopyOutFn& copy_out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finishing_ = true;
  }
  FRUGAL_RETURN_IF_ERROR(Drain());
  CopyAll(copy_out, next_iteration_, true);
  return Status::Ok();
}

// Note [Pipeline state]: t, which parts follow (shared: the controller's
// settings, master parameters and optimizer state, equal on every rank;
// local: error-feedback residuals and sparsifier states, this rank's own),
// then per bucket the parts present.
Result<std::vector<uint8_t>> GradientPipeline::Impl::SaveState(StateParts parts) {
  FRUGAL_RETURN_IF_ERROR(Drain());
  if (next_iteration_ == 0) return Status::Internal("SaveState before the first BeginIteration");
  const bool shared = parts != StateParts::kLocal, local = parts != StateParts::kShared;
  // Sized first, written in place (Note [Sized snapshots] in checkpoint.cc);
  // the pipeline is drained, so nothing changes between the two passes.
  std::vector<std::vector<uint8_t>> sparsifier_states(buckets_.size());
  size_t total = 8 + 8 + 8;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shared) total += 8 + 24 * settings_.size();
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    std::lock_guard<std::mutex> lock(b.mu);
    if (shared) total += 8 + 4 * b.master.size() + 8 + b.optimizer->StateBytes();
    if (local) {
      sparsifier_states[i] = b.sparsifier->state().Serialize();
      total += 8 + b.feedback->SerializedSize() + 8 + sparsifier_states[i].size();
    }
  }
  ByteWriter w;
  w.Reserve(total);
  w.I64(next_iteration_ - 1);  // t: the iteration just begun, whose gradients are not submitted yet
  w.U64((shared ? 1 : 0) | (local ? 2 : 0));
  if (shared) {
    std::lock_guard<std::mutex> lock(mu_);
    w.U64(settings_.size());
    for (const auto& [t, st] : settings_) {
      w.I64(t);
      w.F64(st.density);
      w.F64(st.lr_scale);
    }
  }
  w.U64(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    std::lock_guard<std::mutex> lock(b.mu);
    if (shared) w.Floats(b.master.data(), b.master.size());
    if (local) {
      w.BytesAppended(b.feedback->SerializedSize(), [&](std::vector<uint8_t>* out) { b.feedback->AppendTo(out); });
      w.Bytes(sparsifier_states[i]);
    }
    if (shared) {
      w.BytesAppended(b.optimizer->StateBytes(), [&](std::vector<uint8_t>* out) { b.optimizer->AppendState(out); });
    }
  }
  return w.Take();
}

Status GradientPipeline::Impl::LoadParts(const std::vector<uint8_t>& bytes, bool want_shared, bool want_local) {
  ByteReader r(bytes, "pipeline state");
  FRUGAL_ASSIGN_OR_RETURN(int64_t t, r.I64());
  FRUGAL_ASSIGN_OR_RETURN(uint64_t parts, r.U64());
  const bool shared = (parts & 1) != 0, local = (parts & 2) != 0;
  if (t < 0 || (want_shared && !shared)) return Status::Corruption("pipeline state: no shared part");
  if (!want_shared && t != next_iteration_) {
    return Status::Corruption("pipeline state of step " + std::to_string(t) + " mixed with step " +
                              std::to_string(next_iteration_));
  }
  std::map<int64_t, Settings> settings;
  if (shared) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t num_settings, r.U64());
    for (uint64_t i = 0; i < num_settings; ++i) {
      FRUGAL_ASSIGN_OR_RETURN(int64_t from, r.I64());
      FRUGAL_ASSIGN_OR_RETURN(double density, r.F64());
      FRUGAL_ASSIGN_OR_RETURN(double lr_scale, r.F64());
      settings[from] = Settings{density, lr_scale};
    }
  }
  FRUGAL_ASSIGN_OR_RETURN(uint64_t n, r.U64());
  if (n != buckets_.size()) {
    return Status::Corruption("pipeline state has " + std::to_string(n) + " buckets, this model has " +
                              std::to_string(buckets_.size()) + " (same model and --bucket-mb?)");
  }
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    if (shared) {
      std::vector<float> master(b.master.size());
      FRUGAL_RETURN_IF_ERROR(r.Floats(master.data(), master.size()));
      if (want_shared) b.master = std::move(master);
    }
    if (local) {
      FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> feedback, r.Bytes());
      FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> sparsifier, r.Bytes());
      if (want_local) {
        FRUGAL_RETURN_IF_ERROR(b.feedback->Deserialize(Span<const uint8_t>(feedback.data(), feedback.size())));
        FRUGAL_ASSIGN_OR_RETURN(compress::SparsifierState st, compress::SparsifierState::Deserialize(
                                                                  Span<const uint8_t>(sparsifier.data(), sparsifier.size())));
        FRUGAL_RETURN_IF_ERROR(b.sparsifier->RestoreState(st));
      }
    }
    if (shared) {
      FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> optimizer, r.Bytes());
      if (want_shared) {
        FRUGAL_RETURN_IF_ERROR(b.optimizer->DeserializeState(Span<const uint8_t>(optimizer.data(), optimizer.size())));
      }
    }
    if (want_shared) b.applied = b.processed = b.submitted = b.copied_for = t - 1;
  }
  if (!r.done()) return Status::Corruption("pipeline state: trailing bytes");
  if (want_shared) {
    std::lock_guard<std::mutex> lock(mu_);
    settings_ = std::move(settings);
    next_iteration_ = t;
  }
  return Status::Ok();
}

Status GradientPipeline::Impl::LoadState(const std::vector<uint8_t>& bytes, bool residuals) {
  if (next_iteration_ != 0) return Status::Internal("LoadState after the run started");
  return LoadParts(bytes, /*want_shared=*/true, residuals);
}

Status GradientPipeline::Impl::LoadLocalState(const std::vector<uint8_t>& bytes) {
  return LoadParts(bytes, /*want_shared=*/false, /*want_local=*/true);
}


GradientPipeline::GradientPipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GradientPipeline::~GradientPipeline() = default;

Result<std::unique_ptr<GradientPipeline>> GradientPipeline::Create(PipelineOptions options,
                                                                  std::vector<BucketSpec> buckets,
                                                                  comm::Transport* transport) {
  auto impl = std::make_unique<Impl>(std::move(options), transport);
  FRUGAL_RETURN_IF_ERROR(impl->Init(std::move(buckets)));
  return std::unique_ptr<GradientPipeline>(new GradientPipeline(std::move(impl)));
}

size_t GradientPipeline::num_buckets() const { return impl_->num_buckets(); }
size_t GradientPipeline::bucket_size(size_t b) const { return impl_->bucket_size(b); }
Status GradientPipeline::BeginIteration(int64_t t, const CopyOutFn& f, bool want_checksum) {
  return impl_->BeginIteration(t, f, want_checksum);
}
Span<float> GradientPipeline::GradBuffer(size_t b, int64_t t) { return impl_->GradBuffer(b, t); }
Status GradientPipeline::Submit(size_t b, int64_t t) { return impl_->Submit(b, t); }
Status GradientPipeline::Finish(const CopyOutFn& f) { return impl_->Finish(f); }
uint64_t GradientPipeline::Checksum() const { return impl_->Checksum(); }
void GradientPipeline::VisitMasters(const CopyOutFn& visit) const { impl_->VisitMasters(visit); }
HostMemory GradientPipeline::host_memory() const { return impl_->host_memory(); }
PipelineStats GradientPipeline::stats() const { return impl_->stats(); }
Result<std::vector<uint8_t>> GradientPipeline::SaveState(StateParts parts) { return impl_->SaveState(parts); }
Status GradientPipeline::LoadState(const std::vector<uint8_t>& bytes, bool residuals) {
  return impl_->LoadState(bytes, residuals);
}
Status GradientPipeline::LoadLocalState(const std::vector<uint8_t>& bytes) { return impl_->LoadLocalState(bytes); }
Status GradientPipeline::SetFrom(int64_t t, double density, double lr_scale) {
  return impl_->SetFrom(t, density, lr_scale);
}

comm::Tag GradientTag(int64_t iteration, size_t bucket, size_t num_buckets) {
  return static_cast<comm::Tag>(iteration) * num_buckets + bucket;
}

comm::Tag ControlTag(int64_t iteration, uint32_t kind) {
  return kControlBit | (static_cast<comm::Tag>(iteration) << 8) | (kind & 0xff);
}

}  // namespace frugal::engine
