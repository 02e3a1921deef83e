#include "frugal/engine/compressed_allreduce.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "compressor_state.h"
#include "frugal/collective/compressed_collective.h"
#include "frugal/engine/checkpoint.h"

namespace frugal::engine {

namespace {

using collective::Compressor;
using collective::kLeaderPart;
using collective::kMaxShards;

constexpr uint64_t kMaxBuckets = uint64_t{1} << 24;
// Call numbers wrap after 2^30 calls of one bucket; by then the tag is long
// out of use.
constexpr uint64_t kMaxCalls = (uint64_t{1} << 30) - 1;

// What one bucket index carries from call to call.
struct BucketState {
  collective::BufferState buffer;  // the residuals (Note [Sharded exchange], Note [Leader residual])
  uint64_t calls = 0;              // tags of this bucket: call << 24 | bucket
  std::mutex mu;                   // serialises calls for this bucket
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
  if (compress::IsBlockIndexed(o.wire.indices) && o.sparsifier != compress::SparsifierKind::kBlock) {
    return Status::InvalidArgument(std::string("block-id index encodings need the block sparsifier, not '") +
                                   NameOf(o.sparsifier) + "'");
  }
  return Status::Ok();
}

class CompressedAllReduce::Impl {
 public:
  CompressedAllReduceOptions options;
  comm::Transport* transport = nullptr;
  std::unique_ptr<collective::CompressedCollective> collective;

  mutable std::mutex mu;
  std::map<uint64_t, std::unique_ptr<BucketState>> buckets;  // GUARDED_BY(mu); entries never erased
  CompressedAllReduceStats stats;                            // GUARDED_BY(mu)
  std::atomic<bool> deflate_on{true};                        // SetDeflate

  BucketState& StateOf(uint64_t bucket);
  // Names and seeds bucket's compressors (before any is made).
  void Name(collective::BufferState& buffer, uint64_t bucket) const {
    buffer.name = "bucket " + std::to_string(bucket);
    buffer.seed = options.seed + bucket;
  }
  comm::Tag TagOf(BucketState& state, uint64_t bucket) const;
  Status RunLocked(BucketState& state, uint64_t bucket, Span<float> data);
  void Count(const collective::CallStats& call);
};

BucketState& CompressedAllReduce::Impl::StateOf(uint64_t bucket) {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = buckets[bucket];
  if (!slot) {
    slot = std::make_unique<BucketState>();
    Name(slot->buffer, bucket);
  }
  return *slot;
}

comm::Tag CompressedAllReduce::Impl::TagOf(BucketState& state, uint64_t bucket) const {
  const comm::Tag tag =
      kHookTagBit | (comm::Tag{options.instance} << 54) | ((state.calls & kMaxCalls) << 24) | bucket;
  ++state.calls;
  return tag;
}

void CompressedAllReduce::Impl::Count(const collective::CallStats& call) {
  std::lock_guard<std::mutex> lock(mu);
  stats.calls += 1;
  stats.sent_values += call.sent_values;
  stats.total_values += call.total_values;
  stats.merged_values += call.merged_values;
  stats.sent_bytes += call.sent_bytes;
  stats.raw_bytes += call.raw_bytes;
  stats.sparsify_s += call.compress_s;
  stats.exchange_s += call.exchange_s;
}

Status CompressedAllReduce::Impl::RunLocked(BucketState& state, uint64_t bucket, Span<float> data) {
  // DDP rebuilds its buckets once, after the first iteration: a new size
  // means a new bucket under an old index (see the header).
  collective::BufferState& buffer = state.buffer;
  FRUGAL_RETURN_IF_ERROR(collective->Prepare(buffer, buffer.name, buffer.seed, data.size()));
  collective::CallTags tags;
  tags.scatter = TagOf(state, bucket);
  if (collective->sharded()) tags.gather = TagOf(state, bucket);
  // ReduceDense writes `data` only once nothing can fail any more.
  collective::CallStats call;
  FRUGAL_RETURN_IF_ERROR(collective->ReduceDense(buffer, tags, Span<const float>(data.data(), data.size()),
                                                 options.density, deflate_on.load(std::memory_order_relaxed), data,
                                                 &call));
  Count(call);
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
  impl->collective = std::make_unique<collective::CompressedCollective>(
      collective::CollectiveOptions{options.sparsifier, options.wire, options.dgc_momentum, options.exchange,
                                    collective::LeaderMode::kResidual},
      transport);
  return std::unique_ptr<CompressedAllReduce>(new CompressedAllReduce(std::move(impl)));
}

Status CompressedAllReduce::Run(uint64_t bucket, Span<float> data) {
  if (bucket >= kMaxBuckets) return Status::InvalidArgument("bucket index " + std::to_string(bucket) + " >= 2^24");
  if (data.size() >= (uint64_t{1} << 32)) return Status::InvalidArgument("bucket of 2^32 or more values");
  BucketState& state = impl_->StateOf(bucket);
  std::lock_guard<std::mutex> lock(state.mu);
  return impl_->RunLocked(state, bucket, data).WithContext("compressed all-reduce of bucket " + std::to_string(bucket));
}

// The bytes: the buckets' whole-bucket compressors (u64 count; per bucket: u64
// index, u64 size, residual bytes, sparsifier bytes; empty bytes for none),
// then, when any bucket is sharded, the sharded buckets' compressors (u64
// count; per bucket: u64 index, u64 parts, then per part (the shards', then
// the owned one): u64 size, residual bytes, sparsifier bytes), then, when any
// bucket has a leader's residual (Note [Leader residual]), those (u64 count;
// per bucket: u64 index, u64 size, residual bytes, sparsifier bytes). States
// saved before the sharded exchange existed end after the first list, and
// those saved before the leaders' residuals after the second.
uint64_t CompressedAllReduce::ResidualBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  uint64_t total = 0;
  for (const auto& [index, state] : impl_->buckets) total += state->buffer.ResidualBytes();
  return total;
}

std::vector<uint8_t> CompressedAllReduce::SaveState() const {
  ByteWriter w;
  w.Reserve(StateBytes());
  WriteState(w);
  return w.Take();
}

// What WriteState writes, counted the same way.
size_t CompressedAllReduce::StateBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  size_t total = 8, sharded = 0, led = 0;
  for (const auto& [index, state] : impl_->buckets) {
    const collective::BufferState& b = state->buffer;
    total += 8 + CompressorBytes(b.whole);
    if (!b.shards.empty()) {
      ++sharded;
      total += 8 + 8 + CompressorBytes(b.owned);
      for (const Compressor& c : b.shards) total += CompressorBytes(c);
    }
    if (b.leader.feedback != nullptr) {
      ++led;
      total += 8 + CompressorBytes(b.leader);
    }
  }
  if (sharded == 0 && led == 0) return total;
  return total + 8 + (led == 0 ? 0 : 8);
}

void CompressedAllReduce::WriteState(ByteWriter& w) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  w.U64(impl_->buckets.size());
  size_t sharded = 0, led = 0;
  for (const auto& [index, state] : impl_->buckets) {
    w.U64(index);
    WriteCompressor(w, state->buffer.whole, state->buffer.size);
    sharded += !state->buffer.shards.empty();
    led += state->buffer.leader.feedback != nullptr;
  }
  if (sharded == 0 && led == 0) return;
  w.U64(sharded);
  for (const auto& [index, state] : impl_->buckets) {
    if (state->buffer.shards.empty()) continue;
    w.U64(index);
    w.U64(state->buffer.shards.size() + 1);
    for (const Compressor& c : state->buffer.shards) WriteCompressor(w, c, c.size);
    WriteCompressor(w, state->buffer.owned, state->buffer.owned.size);
  }
  if (led == 0) return;
  w.U64(led);
  for (const auto& [index, state] : impl_->buckets) {
    if (!state->buffer.leader.feedback) continue;
    w.U64(index);
    WriteCompressor(w, state->buffer.leader, state->buffer.leader.size);
  }
}


Status CompressedAllReduce::LoadState(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "compressed all-reduce state");
  std::map<uint64_t, std::unique_ptr<BucketState>> loaded;
  auto bad = [](uint64_t index) {
    return Status::Corruption("compressed all-reduce state: bad bucket entry " + std::to_string(index));
  };
  auto reset = [&](const collective::BufferState& buffer, uint64_t part, size_t size, Compressor& c) {
    return impl_->collective->ResetCompressor(buffer, part, size, c);
  };
  FRUGAL_ASSIGN_OR_RETURN(uint64_t n, r.U64());
  for (uint64_t i = 0; i < n; ++i) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
    if (index >= kMaxBuckets || loaded.count(index)) return bad(index);
    auto state = std::make_unique<BucketState>();
    collective::BufferState& buffer = state->buffer;
    impl_->Name(buffer, index);
    uint64_t size = 0;
    FRUGAL_RETURN_IF_ERROR(ReadCompressor(
        r, &buffer.whole, [&](Compressor& c, size_t s) { return reset(buffer, 0, s, c); }, &size));
    buffer.size = static_cast<size_t>(size);
    loaded[index] = std::move(state);
  }
  if (!r.done()) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t sharded, r.U64());
    for (uint64_t i = 0; i < sharded; ++i) {
      FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
      FRUGAL_ASSIGN_OR_RETURN(uint64_t parts, r.U64());
      auto it = loaded.find(index);
      if (it == loaded.end() || parts < 2 || parts > 1 + kMaxShards || !it->second->buffer.shards.empty()) return bad(index);
      collective::BufferState& state = it->second->buffer;
      state.shards.resize(static_cast<size_t>(parts - 1));
      for (uint64_t p = 0; p < parts; ++p) {
        Compressor& c = p + 1 == parts ? state.owned : state.shards[static_cast<size_t>(p)];
        const uint64_t part = p + 1 == parts ? parts : p + 1;  // Reset's seeds
        FRUGAL_RETURN_IF_ERROR(ReadCompressor(r, &c, [&](Compressor& fresh, size_t s) {
          return reset(state, part, s, fresh);
        }));
      }
    }
  }
  if (!r.done()) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t led, r.U64());
    for (uint64_t i = 0; i < led; ++i) {
      FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
      auto it = loaded.find(index);
      if (it == loaded.end() || it->second->buffer.leader.feedback) return bad(index);
      collective::BufferState& state = it->second->buffer;
      uint64_t size = 0;
      FRUGAL_RETURN_IF_ERROR(ReadCompressor(
          r, &state.leader, [&](Compressor& c, size_t s) { return reset(state, kLeaderPart, s, c); },
          &size));
      if (!state.leader.feedback || size != state.size) return bad(index);
    }
  }
  if (!r.done()) return Status::Corruption("compressed all-reduce state: trailing bytes");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->buckets = std::move(loaded);
  return Status::Ok();
}

void CompressedAllReduce::SetDeflate(bool on) { impl_->deflate_on.store(on, std::memory_order_relaxed); }
bool CompressedAllReduce::deflating() const {
  return impl_->options.wire.deflate && impl_->deflate_on.load(std::memory_order_relaxed);
}
const CompressedAllReduceOptions& CompressedAllReduce::options() const { return impl_->options; }
CompressedAllReduceStats CompressedAllReduce::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}
int CompressedAllReduce::rank() const { return impl_->transport->rank(); }
int CompressedAllReduce::world_size() const { return impl_->transport->world_size(); }

}  // namespace frugal::engine
