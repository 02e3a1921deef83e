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

#include "compressor_state.h"
#include "frugal/collective/compressed_collective.h"
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
// The second phase (the owners' messages) of a sharded exchange of gradient
// tag g: g | kGatherBit, below the hooks' kHookTagBit range.
constexpr comm::Tag kGatherBit = comm::Tag{1} << 61;

struct Bucket {
  std::string name;
  std::vector<float> master;              // GUARDED_BY(mu)
  std::vector<std::vector<float>> grads;  // s+2 rotating slots
  // Residuals and sparsifier states (collective::CompressedCollective).
  // Used by the bucket's task only (tasks of one bucket run in order).
  collective::BufferState compressors;
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
      residuals += b->compressors.ResidualBytes();
      optimizer += b->optimizer->StateBytes();
    }
    return {{"masters", masters}, {"gradient_slots", grads}, {"residuals", residuals}, {"optimizer", optimizer}};
  }

 private:
  Status Drain();
  Status LoadParts(const std::vector<uint8_t>& bytes, bool want_shared, bool want_local);
  void ThreadMain();
  Status RunTask(const Task& task);
  // The task's exchange: *update <- the mean of the world's compressed
  // gradients of bucket b at iteration t.
  Status ReduceBucket(Bucket& b, size_t index, int64_t t, compress::SparseVector* update, double* compress_s,
                      double* exchange_s);
  void CountTask(const Bucket& b, const collective::CallStats& call, const compress::SparseVector& update);
  // The local part of the state beyond each bucket's whole-bucket
  // compressor (shards, owners' and leaders' residuals): written after the
  // buckets, when any bucket has such compressors.
  void WriteExtraCompressors(ByteWriter& w) const;
  Status ReadExtraCompressors(ByteReader& r, bool want_local);
  // Restores b's whole-bucket compressor from its saved bytes (empty: none).
  static Status LoadWhole(Bucket& b, const std::vector<uint8_t>& feedback, const std::vector<uint8_t>& sparsifier,
                          bool want_local);
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
  std::unique_ptr<collective::CompressedCollective> collective_;
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
  if (transport_ == nullptr) return Status::InvalidArgument("GradientPipeline: no transport");
  if (options_.staleness < 0 || options_.staleness > 1) return Status::InvalidArgument("--staleness must be 0 or 1");
  if (!(options_.density > 0) || options_.density > 1) return Status::InvalidArgument("--density must be in (0, 1]");
  if (options_.cpu_threads < 1) return Status::InvalidArgument("--cpu-threads must be >= 1");
  if (!options_.lr_at) return Status::InvalidArgument("no learning-rate schedule");
  if (compress::IsBlockIndexed(options_.wire.indices) && options_.sparsifier != compress::SparsifierKind::kBlock) {
    return Status::InvalidArgument(std::string("block-id index encodings need the block sparsifier, not '") +
                                   NameOf(options_.sparsifier) + "'");
  }
  collective_ = std::make_unique<collective::CompressedCollective>(
      collective::CollectiveOptions{options_.sparsifier, options_.wire, options_.dgc_momentum, options_.exchange,
                                    options_.leader},
      transport_);
  const size_t slots = static_cast<size_t>(options_.staleness) + 2;
  for (auto& spec : specs) {
    auto b = std::make_unique<Bucket>();
    b->name = spec.name;
    b->master = std::move(spec.initial);
    b->grads.assign(slots, std::vector<float>(b->master.size(), 0.0f));
    FRUGAL_RETURN_IF_ERROR(collective_->Prepare(b->compressors, b->name, options_.seed + buckets_.size(),
                                                b->master.size()));
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
  for (int i = 0; i < options_.cpu_threads; ++i) threads_.emplace_back([this] { ThreadMain(); });
  return Status::Ok();
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

Status GradientPipeline::Impl::ReduceBucket(Bucket& b, size_t index, int64_t t, compress::SparseVector* update,
                                           double* compress_s, double* exchange_s) {
  auto& grad = b.grads[static_cast<size_t>(t) % b.grads.size()];
  const double density = b.whole ? 1.0 : WarmupDensity(SettingsAt(t).density, t, options_.density_warmup_steps);
  collective::CallTags tags;
  tags.scatter = GradientTag(t, index, buckets_.size());
  tags.gather = tags.scatter | kGatherBit;
  collective::CallStats call;
  Status s = collective_->Reduce(b.compressors, tags, Span<const float>(grad.data(), grad.size()), density,
                                 /*deflate=*/true, update, &call);
  if (!s.ok()) return s.WithContext("iteration " + std::to_string(t) + ", bucket " + b.name);
  *compress_s = call.compress_s;
  *exchange_s = call.exchange_s;
  CountTask(b, call, *update);
  return Status::Ok();
}

void GradientPipeline::Impl::CountTask(const Bucket& b, const collective::CallStats& call,
                                       const compress::SparseVector& update) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.sent_values += call.sent_values;
  stats_.total_values += b.master.size();
  stats_.merged_values += update.nnz();
  stats_.held_mass += call.mass.held;
  stats_.sent_mass += call.mass.sent;
  stats_.held_sq += call.mass.held_sq;
  stats_.sent_sq += call.mass.sent_sq;
}

Status GradientPipeline::Impl::RunTask(const Task& task) {
  const Clock& clock = transport_->clock();  // the stats' durations
  Bucket& b = *buckets_[task.bucket];
  const int64_t t = task.iteration;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || !error_.ok() || b.processed == t - 1; });
    if (stop_ || !error_.ok()) return Status::Ok();
  }
  auto t0 = clock.Now();
  compress::SparseVector update;  // Note [Merged updates] in src/compress/merge.cc
  double compress_s = 0, exchange_s = 0;
  FRUGAL_RETURN_IF_ERROR(ReduceBucket(b, task.bucket, t, &update, &compress_s, &exchange_s));
  auto decode_done = clock.Now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || !error_.ok() || finishing_ || b.copied_for >= t + options_.staleness; });
    if (stop_ || !error_.ok()) return Status::Ok();
  }
  auto t3 = clock.Now();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    b.optimizer->set_lr(options_.lr_at(t) * SettingsAt(t).lr_scale);
    FRUGAL_RETURN_IF_ERROR(b.optimizer->Step(Span<float>(b.master.data(), b.master.size()),
                                             Span<const uint32_t>(update.indices.data(), update.indices.size()),
                                             Span<const float>(update.values.data(), update.values.size())));
  }
  auto t4 = clock.Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    b.applied = t;
    b.processed = t;
    stats_.sparsify_s += compress_s;
    stats_.exchange_s += exchange_s;
    // decode, merge and scale: the rest of the collective's time
    stats_.optimizer_s += Seconds(t4 - t3) + std::max(0.0, Seconds(decode_done - t0) - compress_s - exchange_s);
    stats_.tasks += 1;
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
  auto start = transport_->clock().Now();
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
    stats_.wait_s += Seconds(transport_->clock().Now() - start);
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
      const collective::Compressor& c = b.compressors.whole;  // none when sharded
      if (c.sparsifier) sparsifier_states[i] = c.sparsifier->state().Serialize();
      total += 8 + (c.feedback ? c.feedback->SerializedSize() : 0) + 8 + sparsifier_states[i].size();
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
      const compress::ErrorFeedback* f = b.compressors.whole.feedback.get();
      w.BytesAppended(f ? f->SerializedSize() : 0, [&](std::vector<uint8_t>* out) {
        if (f) f->AppendTo(out);
      });
      w.Bytes(sparsifier_states[i]);
    }
    if (shared) {
      w.BytesAppended(b.optimizer->StateBytes(), [&](std::vector<uint8_t>* out) { b.optimizer->AppendState(out); });
    }
  }
  if (local) WriteExtraCompressors(w);
  return w.Take();
}

void GradientPipeline::Impl::WriteExtraCompressors(ByteWriter& w) const {
  auto extra = [](const collective::BufferState& c) { return !c.shards.empty() || c.leader.feedback != nullptr; };
  uint64_t count = 0;
  for (const auto& b : buckets_) count += extra(b->compressors);
  if (count == 0) return;
  w.U64(count);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const collective::BufferState& c = buckets_[i]->compressors;
    if (!extra(c)) continue;
    w.U64(i);
    w.U64(c.shards.size());
    for (const collective::Compressor& shard : c.shards) WriteCompressor(w, shard, shard.size);
    WriteCompressor(w, c.owned, c.owned.size);
    WriteCompressor(w, c.leader, c.leader.size);
  }
}

Status GradientPipeline::Impl::ReadExtraCompressors(ByteReader& r, bool want_local) {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t count, r.U64());
  if (count > buckets_.size()) return Status::Corruption("pipeline state: bad count of sharded or led buckets");
  for (uint64_t k = 0; k < count; ++k) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
    FRUGAL_ASSIGN_OR_RETURN(uint64_t shards, r.U64());
    if (index >= buckets_.size() || shards > collective::kMaxShards) {
      return Status::Corruption("pipeline state: bad sharded or led bucket entry");
    }
    collective::BufferState& c = buckets_[index]->compressors;
    if (want_local && shards != c.shards.size()) {
      return Status::Corruption("pipeline state: bucket " + c.name + " was saved with " + std::to_string(shards) +
                                " shards, this run has " + std::to_string(c.shards.size()) +
                                " (same --exchange and world size?)");
    }
    auto reset = [&](uint64_t part) {
      return [&, part](collective::Compressor& fresh, size_t size) {
        return collective_->ResetCompressor(c, part, size, fresh);
      };
    };
    for (uint64_t p = 0; p < shards; ++p) {
      FRUGAL_RETURN_IF_ERROR(ReadCompressor(r, want_local ? &c.shards[p] : nullptr, reset(1 + p)));
    }
    FRUGAL_RETURN_IF_ERROR(ReadCompressor(r, want_local ? &c.owned : nullptr, reset(1 + shards)));
    FRUGAL_RETURN_IF_ERROR(ReadCompressor(r, want_local ? &c.leader : nullptr, reset(collective::kLeaderPart)));
  }
  return Status::Ok();
}

Status GradientPipeline::Impl::LoadWhole(Bucket& b, const std::vector<uint8_t>& feedback,
                                        const std::vector<uint8_t>& sparsifier, bool want_local) {
  collective::Compressor& c = b.compressors.whole;
  if (!want_local || feedback.empty()) return Status::Ok();
  if (!c.feedback) return Status::Corruption("pipeline state: bucket " + b.name + " has a residual this exchange lacks");
  FRUGAL_RETURN_IF_ERROR(c.feedback->Deserialize(Span<const uint8_t>(feedback.data(), feedback.size())));
  FRUGAL_ASSIGN_OR_RETURN(compress::SparsifierState st, compress::SparsifierState::Deserialize(
                                                            Span<const uint8_t>(sparsifier.data(), sparsifier.size())));
  return c.sparsifier->RestoreState(st);
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
      FRUGAL_RETURN_IF_ERROR(LoadWhole(b, feedback, sparsifier, want_local));
    }
    if (shared) {
      FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> optimizer, r.Bytes());
      if (want_shared) {
        FRUGAL_RETURN_IF_ERROR(b.optimizer->DeserializeState(Span<const uint8_t>(optimizer.data(), optimizer.size())));
      }
    }
    if (want_shared) b.applied = b.processed = b.submitted = b.copied_for = t - 1;
  }
  if (local && !r.done()) FRUGAL_RETURN_IF_ERROR(ReadExtraCompressors(r, want_local));
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
