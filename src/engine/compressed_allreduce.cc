#include "frugal/engine/compressed_allreduce.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "frugal/compress/error_feedback.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/compress/merge.h"
#include "frugal/compress/sparsifier.h"

namespace frugal::engine {

namespace {

constexpr uint64_t kMaxBuckets = uint64_t{1} << 24;
// Call numbers wrap after 2^30 calls of one bucket; by then the tag is long
// out of use.
constexpr uint64_t kMaxCalls = (uint64_t{1} << 30) - 1;

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What one bucket index carries from call to call.
struct BucketState {
  size_t size = 0;
  uint64_t calls = 0;  // tags of this bucket: call << 24 | bucket
  std::unique_ptr<compress::Sparsifier> sparsifier;
  std::unique_ptr<compress::ErrorFeedback> feedback;
  std::mutex mu;  // serialises calls for this bucket
};

}  // namespace

Status ValidateCompressedAllReduceOptions(const CompressedAllReduceOptions& o) {
  if (!(o.density > 0) || o.density > 1) {
    return Status::InvalidArgument("density must be in (0, 1], got " + std::to_string(o.density));
  }
  if (!(o.dgc_momentum >= 0) || o.dgc_momentum >= 1) {
    return Status::InvalidArgument("dgc_momentum must be in [0, 1), got " + std::to_string(o.dgc_momentum));
  }
  if (o.exchange.timeout.count() <= 0) return Status::InvalidArgument("timeout must be > 0");
  if (o.instance >= 256) return Status::InvalidArgument("instance must be < 256");
  FRUGAL_RETURN_IF_ERROR(compress::CreateSparsifier(o.sparsifier).status());  // names the known kinds
  if (compress::IsBlockIndexed(o.wire.indices) && o.sparsifier != "block") {
    return Status::InvalidArgument("block-id index encodings need the block sparsifier, not '" + o.sparsifier +
                                   "'");
  }
  return Status::Ok();
}

class CompressedAllReduce::Impl {
 public:
  CompressedAllReduceOptions options;
  comm::Transport* transport = nullptr;
  std::unique_ptr<comm::SparseExchange> exchange;

  mutable std::mutex mu;
  std::map<uint64_t, std::unique_ptr<BucketState>> buckets;  // GUARDED_BY(mu); entries never erased
  CompressedAllReduceStats stats;                            // GUARDED_BY(mu)

  Result<comm::Bytes> Combine(std::vector<comm::Bytes> parts) const;
  BucketState& StateOf(uint64_t bucket);
  Status Reset(BucketState& state, uint64_t bucket, size_t size) const;
  Status RunLocked(BucketState& state, uint64_t bucket, Span<float> data);
};

// Leaders merge the contributions in rank order (Note [Merged updates] in
// src/compress/merge.cc), so all ranks decode byte-identical sums.
Result<comm::Bytes> CompressedAllReduce::Impl::Combine(std::vector<comm::Bytes> parts) const {
  return compress::CombineEncoded(parts, options.wire);
}

BucketState& CompressedAllReduce::Impl::StateOf(uint64_t bucket) {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = buckets[bucket];
  if (!slot) slot = std::make_unique<BucketState>();
  return *slot;
}

Status CompressedAllReduce::Impl::Reset(BucketState& state, uint64_t bucket, size_t size) const {
  const std::string name = "bucket " + std::to_string(bucket);
  compress::SparsifierOptions so;
  so.tensor_name = name;
  so.seed = options.seed + bucket;
  FRUGAL_ASSIGN_OR_RETURN(state.sparsifier, compress::CreateSparsifier(options.sparsifier, so));
  compress::ErrorFeedbackOptions eo;
  eo.tensor_name = name;
  eo.momentum = options.dgc_momentum;
  eo.wire_values = options.wire.values;
  state.feedback = std::make_unique<compress::ErrorFeedback>(size, eo);
  state.size = size;
  return Status::Ok();
}

Status CompressedAllReduce::Impl::RunLocked(BucketState& state, uint64_t bucket, Span<float> data) {
  using Clock = std::chrono::steady_clock;
  // DDP rebuilds its buckets once, after the first iteration: a new size
  // means a new bucket under an old index (see the header).
  if (!state.feedback || state.size != data.size()) FRUGAL_RETURN_IF_ERROR(Reset(state, bucket, data.size()));
  auto t0 = Clock::now();
  compress::SparseVector mine;
  FRUGAL_RETURN_IF_ERROR(state.feedback->Compress(Span<const float>(data.data(), data.size()), *state.sparsifier,
                                                  options.density, &mine));
  comm::Bytes encoded;
  FRUGAL_RETURN_IF_ERROR(compress::Encode(mine, options.wire, &encoded));
  const size_t sent_bytes = encoded.size();
  auto t1 = Clock::now();
  const comm::Tag tag = kHookTagBit | (comm::Tag{options.instance} << 54) | ((state.calls & kMaxCalls) << 24) | bucket;
  ++state.calls;
  FRUGAL_ASSIGN_OR_RETURN(std::vector<comm::Bytes> parts, exchange->RunUncombined(tag, std::move(encoded)));
  auto t2 = Clock::now();
  compress::SparseVector sum;
  FRUGAL_RETURN_IF_ERROR(compress::DecodeAndMerge(parts, &sum));
  if (sum.dense_size != data.size()) {
    return Status::Corruption("the merged update has " + std::to_string(sum.dense_size) + " values, this rank's " +
                              std::to_string(data.size()) + ": do all ranks train the same model?");
  }
  const float inv_world = 1.0f / static_cast<float>(transport->world_size());
  std::fill(data.begin(), data.end(), 0.0f);
  for (size_t i = 0; i < sum.nnz(); ++i) data[sum.indices[i]] = sum.values[i] * inv_world;
  std::lock_guard<std::mutex> lock(mu);
  stats.calls += 1;
  stats.sent_values += mine.nnz();
  stats.total_values += data.size();
  stats.merged_values += sum.nnz();
  stats.sent_bytes += sent_bytes;
  stats.sparsify_s += Seconds(t1 - t0);
  stats.exchange_s += Seconds(t2 - t1);
  return Status::Ok();
}

CompressedAllReduce::CompressedAllReduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompressedAllReduce::~CompressedAllReduce() = default;

Result<std::unique_ptr<CompressedAllReduce>> CompressedAllReduce::Create(const CompressedAllReduceOptions& options,
                                                                         comm::Transport* transport) {
  if (transport == nullptr) return Status::InvalidArgument("CompressedAllReduce needs a transport");
  FRUGAL_RETURN_IF_ERROR(ValidateCompressedAllReduceOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->transport = transport;
  Impl* raw = impl.get();
  impl->exchange = std::make_unique<comm::SparseExchange>(
      transport, [raw](std::vector<comm::Bytes> parts) { return raw->Combine(std::move(parts)); }, options.exchange);
  return std::unique_ptr<CompressedAllReduce>(new CompressedAllReduce(std::move(impl)));
}

Status CompressedAllReduce::Run(uint64_t bucket, Span<float> data) {
  if (bucket >= kMaxBuckets) return Status::InvalidArgument("bucket index " + std::to_string(bucket) + " >= 2^24");
  if (data.size() >= (uint64_t{1} << 32)) return Status::InvalidArgument("bucket of 2^32 or more values");
  BucketState& state = impl_->StateOf(bucket);
  std::lock_guard<std::mutex> lock(state.mu);
  return impl_->RunLocked(state, bucket, data).WithContext("compressed all-reduce of bucket " + std::to_string(bucket));
}

std::vector<uint8_t> CompressedAllReduce::SaveState() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ByteWriter w;
  w.U64(impl_->buckets.size());
  for (const auto& [index, state] : impl_->buckets) {
    w.U64(index);
    w.U64(state->size);
    w.Bytes(state->feedback ? state->feedback->Serialize() : std::vector<uint8_t>());
    w.Bytes(state->sparsifier ? state->sparsifier->state().Serialize() : std::vector<uint8_t>());
  }
  return w.Take();
}

Status CompressedAllReduce::LoadState(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "compressed all-reduce state");
  std::map<uint64_t, std::unique_ptr<BucketState>> loaded;
  FRUGAL_ASSIGN_OR_RETURN(uint64_t n, r.U64());
  for (uint64_t i = 0; i < n; ++i) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
    FRUGAL_ASSIGN_OR_RETURN(uint64_t size, r.U64());
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> residual, r.Bytes());
    FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> sparsifier, r.Bytes());
    if (index >= kMaxBuckets || size >= (uint64_t{1} << 32) || loaded.count(index)) {
      return Status::Corruption("compressed all-reduce state: bad bucket entry " + std::to_string(index));
    }
    auto state = std::make_unique<BucketState>();
    if (!residual.empty()) {
      FRUGAL_RETURN_IF_ERROR(impl_->Reset(*state, index, static_cast<size_t>(size)));
      FRUGAL_RETURN_IF_ERROR(state->feedback->Deserialize(Span<const uint8_t>(residual.data(), residual.size())));
      FRUGAL_ASSIGN_OR_RETURN(compress::SparsifierState ss, compress::SparsifierState::Deserialize(
                                                                Span<const uint8_t>(sparsifier.data(), sparsifier.size())));
      FRUGAL_RETURN_IF_ERROR(state->sparsifier->RestoreState(ss));
    }
    loaded[index] = std::move(state);
  }
  if (!r.done()) return Status::Corruption("compressed all-reduce state: trailing bytes");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->buckets = std::move(loaded);
  return Status::Ok();
}

const CompressedAllReduceOptions& CompressedAllReduce::options() const { return impl_->options; }
CompressedAllReduceStats CompressedAllReduce::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}
int CompressedAllReduce::rank() const { return impl_->transport->rank(); }
int CompressedAllReduce::world_size() const { return impl_->transport->world_size(); }

}  // namespace frugal::engine
