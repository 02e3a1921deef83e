#include "frugal/engine/compressed_allreduce.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "frugal/compress/error_feedback.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/compress/merge.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/common/clock.h"

namespace frugal::engine {

namespace {

constexpr uint64_t kMaxBuckets = uint64_t{1} << 24;
// Call numbers wrap after 2^30 calls of one bucket; by then the tag is long
// out of use.
constexpr uint64_t kMaxCalls = (uint64_t{1} << 30) - 1;
// Bound on the shards of a saved sharded bucket (a corrupt count must not
// make LoadState allocate without limit).
constexpr uint64_t kMaxShards = uint64_t{1} << 16;
// The compressor part (seeds, names) of a cluster leader's residual: beyond
// every shard's.
constexpr uint64_t kLeaderPart = kMaxShards + 2;


// One point of compression: an error-feedback residual and the sparsifier
// state that selects from it.
struct Compressor {
  size_t size = 0;
  std::unique_ptr<compress::Sparsifier> sparsifier;
  std::unique_ptr<compress::ErrorFeedback> feedback;
};

// What one bucket index carries from call to call.
struct BucketState {
  size_t size = 0;
  uint64_t calls = 0;  // tags of this bucket: call << 24 | bucket
  Compressor whole;    // flat and hierarchical: this rank's contribution
  // Sharded (Note [Sharded exchange]): shards[j] compresses this rank's
  // contribution to shard j; owned compresses the mean of the shard this
  // rank owns.
  std::vector<Compressor> shards;
  Compressor owned;
  // Hierarchical, on a cluster leader (made at its first cluster message):
  // compresses the sum of its cluster's contributions (Note [Leader residual]).
  Compressor leader;
  std::mutex mu;  // serialises calls for this bucket
};

// Note [Sharded exchange]
// ExchangeAlgorithm::kSharded is a reduce-scatter then an all-gather, each of
// compressed messages. The bucket is cut into world_size contiguous shards
// (whole blocks of 16 values, ShardRange); rank j owns shard j.
//  1. Every rank compresses its contribution shard by shard (a residual and a
//     sparsifier per shard) and sends shard j to rank j.
//  2. Owner j decodes the world's contributions to its shard in rank order,
//     averages them, compresses the mean with a residual of its own (what it
//     does not send, or the rounding of its values, goes out in a later
//     call) and sends the result to every rank.
//  3. Every rank decodes the owners' messages into the bucket.
// Every rank decodes the same bytes, so the results are bit-identical. A rank
// sends about 2 (N-1)/N of a contribution's bytes, where the flat all-gather
// sends N-1 copies: half as many at 4 ranks, the same at 2. With density 1
// and fp32 values the result equals the flat exchange's bit for bit (the
// same sums in the same order, then the same scaling). It ignores clusters:
// every shard crosses every link.

// Note [Leader residual]
// In the hierarchical exchange a cluster leader sends the other clusters one
// message for its whole cluster. The step pipeline's leaders merge their
// members' messages and re-encode the sum without error feedback, so integer
// codes travel as int8 there (compress::MergedWireFormat) and a sum holds
// the union of the members' selections. The compressed all-reduce's leaders
// instead decode their members' contributions, sum them exactly, add a
// residual of their own and compress that like a contribution: the same
// density and wire format (int4 codes stay int4), and what the leader does
// not send, or the rounding of what it sends, goes out in a later call. At
// density 1 this halves the bytes that cross the slow links (0.504 bytes
// per value instead of int8's 1.004). Every leader combines the same
// per-cluster messages in cluster order and its members receive the
// leader's bytes, so the results stay bit-identical on every rank. A
// cluster of one sends its member's message as it is.

// [begin, end) of shard j of a bucket of n values over `world` ranks: whole
// blocks of 16 values (the block-id encodings' unit), the last shard taking
// the tail. Shards may be empty when n is small.
std::pair<size_t, size_t> ShardRange(size_t n, int world, int j) {
  const size_t blocks = (n + 15) / 16;
  auto edge = [&](int k) { return std::min(n, 16 * (blocks * static_cast<size_t>(k) / static_cast<size_t>(world))); };
  return {edge(j), j + 1 == world ? n : edge(j + 1)};
}

// `size` as the entry's size (a bucket's, where its whole-bucket compressor
// is empty), then c's residual and sparsifier state (empty bytes for none).
void WriteCompressor(ByteWriter& w, const Compressor& c, uint64_t size) {
  w.U64(size);
  w.Bytes(c.feedback ? c.feedback->Serialize() : std::vector<uint8_t>());
  w.Bytes(c.sparsifier ? c.sparsifier->state().Serialize() : std::vector<uint8_t>());
}

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
  std::unique_ptr<comm::SparseExchange> exchange;  // flat and hierarchical

  mutable std::mutex mu;
  std::map<uint64_t, std::unique_ptr<BucketState>> buckets;  // GUARDED_BY(mu); entries never erased
  CompressedAllReduceStats stats;                            // GUARDED_BY(mu)
  std::atomic<bool> deflate_on{true};                        // SetDeflate

  // The wire format of the next messages: options.wire, deflated only while
  // deflate_on.
  compress::WireFormat Wire() const {
    compress::WireFormat w = options.wire;
    w.deflate = w.deflate && deflate_on.load(std::memory_order_relaxed);
    return w;
  }
  // v's bytes in wire without deflate, where wire deflates; else encoded.
  static size_t RawSize(const compress::SparseVector& v, compress::WireFormat wire, size_t encoded) {
    if (!wire.deflate) return encoded;
    wire.deflate = false;
    return compress::EncodedSize(v, wire);
  }

  bool sharded() const {
    return options.exchange.algorithm == comm::ExchangeAlgorithm::kSharded && transport->world_size() > 1;
  }
  Result<comm::Bytes> Combine(std::vector<comm::Bytes> parts) const;
  BucketState& StateOf(uint64_t bucket);
  // A fresh compressor of `size` values; `part` tells the sparsifier seeds of
  // one bucket's compressors apart.
  Status ResetCompressor(Compressor& c, uint64_t bucket, uint64_t part, size_t size) const;
  Status Reset(BucketState& state, uint64_t bucket, size_t size) const;
  // Whether state was set up for data of `size` values by this exchange.
  bool Fits(const BucketState& state, size_t size) const;
  comm::Tag TagOf(BucketState& state, uint64_t bucket) const;
  Status RunLocked(BucketState& state, uint64_t bucket, Span<float> data);
  Status RunSharded(BucketState& state, uint64_t bucket, Span<float> data);
  Status CompressMerged(const std::vector<comm::Bytes>& parts, size_t size, float scale, Compressor& c,
                        const std::string& what, comm::Bytes* out) const;
  Result<comm::Bytes> CompressCluster(BucketState& state, uint64_t bucket, const std::vector<comm::Bytes>& parts) const;
  Result<comm::Bytes> RecvFrom(int src, comm::Tag tag, const char* phase) const;
  void Count(const CompressedAllReduceStats& call);
};

// Leaders merge the contributions in rank order (Note [Merged updates] in
// src/compress/merge.cc), so all ranks decode byte-identical sums.
Result<comm::Bytes> CompressedAllReduce::Impl::Combine(std::vector<comm::Bytes> parts) const {
  return compress::CombineEncoded(parts, Wire());
}

BucketState& CompressedAllReduce::Impl::StateOf(uint64_t bucket) {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = buckets[bucket];
  if (!slot) slot = std::make_unique<BucketState>();
  return *slot;
}

Status CompressedAllReduce::Impl::ResetCompressor(Compressor& c, uint64_t bucket, uint64_t part, size_t size) const {
  const std::string name = "bucket " + std::to_string(bucket) +
                           (part == 0             ? ""
                            : part == kLeaderPart ? " cluster sum"
                                                  : " shard " + std::to_string(part - 1));
  compress::SparsifierOptions so;
  so.tensor_name = name;
  so.seed = options.seed + bucket + (part << 24);
  FRUGAL_ASSIGN_OR_RETURN(c.sparsifier, compress::CreateSparsifier(options.sparsifier, so));
  compress::ErrorFeedbackOptions eo;
  eo.tensor_name = name;
  eo.momentum = options.dgc_momentum;
  eo.wire_values = options.wire.values;
  c.feedback = std::make_unique<compress::ErrorFeedback>(size, eo);
  c.size = size;
  return Status::Ok();
}

Status CompressedAllReduce::Impl::Reset(BucketState& state, uint64_t bucket, size_t size) const {
  state.size = size;
  state.whole = Compressor();
  state.shards.clear();
  state.owned = Compressor();
  state.leader = Compressor();
  if (!sharded()) return ResetCompressor(state.whole, bucket, 0, size);
  const int world = transport->world_size();
  state.shards.resize(static_cast<size_t>(world));
  for (int j = 0; j < world; ++j) {
    auto [begin, end] = ShardRange(size, world, j);
    FRUGAL_RETURN_IF_ERROR(ResetCompressor(state.shards[static_cast<size_t>(j)], bucket, 1 + j, end - begin));
  }
  auto [begin, end] = ShardRange(size, world, transport->rank());
  // The owner's residual holds the mean, not a contribution: a seed of its own.
  return ResetCompressor(state.owned, bucket, 1 + static_cast<uint64_t>(world), end - begin);
}

bool CompressedAllReduce::Impl::Fits(const BucketState& state, size_t size) const {
  if (state.size != size) return false;
  if (!sharded()) return state.whole.feedback != nullptr;
  const int world = transport->world_size();
  if (state.shards.size() != static_cast<size_t>(world) || !state.owned.feedback) return false;
  for (int j = 0; j < world; ++j) {
    auto [begin, end] = ShardRange(size, world, j);
    const Compressor& c = state.shards[static_cast<size_t>(j)];
    if (!c.feedback || c.size != end - begin) return false;
  }
  auto [begin, end] = ShardRange(size, world, transport->rank());
  return state.owned.size == end - begin;
}

comm::Tag CompressedAllReduce::Impl::TagOf(BucketState& state, uint64_t bucket) const {
  const comm::Tag tag =
      kHookTagBit | (comm::Tag{options.instance} << 54) | ((state.calls & kMaxCalls) << 24) | bucket;
  ++state.calls;
  return tag;
}

Result<comm::Bytes> CompressedAllReduce::Impl::RecvFrom(int src, comm::Tag tag, const char* phase) const {
  Result<comm::Message> msg = transport->Recv(src, tag, options.exchange.timeout);
  if (!msg.ok()) {
    return msg.status().WithContext(std::string(phase) + ", tag " + std::to_string(tag) + " on " +
                                    transport->topology().DescribeRank(transport->rank()));
  }
  return std::move(msg->payload);
}

void CompressedAllReduce::Impl::Count(const CompressedAllReduceStats& call) {
  std::lock_guard<std::mutex> lock(mu);
  stats.calls += call.calls;
  stats.sent_values += call.sent_values;
  stats.total_values += call.total_values;
  stats.merged_values += call.merged_values;
  stats.sent_bytes += call.sent_bytes;
  stats.raw_bytes += call.raw_bytes;
  stats.sparsify_s += call.sparsify_s;
  stats.exchange_s += call.exchange_s;
}

Status CompressedAllReduce::Impl::RunLocked(BucketState& state, uint64_t bucket, Span<float> data) {
  using Clock = std::chrono::steady_clock;
  // DDP rebuilds its buckets once, after the first iteration: a new size
  // means a new bucket under an old index (see the header).
  if (!Fits(state, data.size())) FRUGAL_RETURN_IF_ERROR(Reset(state, bucket, data.size()));
  if (sharded()) return RunSharded(state, bucket, data);
  auto t0 = Clock::now();
  compress::SparseVector mine;
  FRUGAL_RETURN_IF_ERROR(state.whole.feedback->Compress(Span<const float>(data.data(), data.size()),
                                                        *state.whole.sparsifier, options.density, &mine));
  comm::Bytes encoded;
  const compress::WireFormat wire = Wire();
  FRUGAL_RETURN_IF_ERROR(compress::Encode(mine, wire, &encoded));
  const size_t sent_bytes = encoded.size();
  const size_t raw_bytes = RawSize(mine, wire, sent_bytes);
  auto t1 = Clock::now();
  const comm::ClusterFn cluster = [&](std::vector<comm::Bytes> members) {
    return CompressCluster(state, bucket, members);
  };
  FRUGAL_ASSIGN_OR_RETURN(std::vector<comm::Bytes> parts,
                          exchange->RunUncombined(TagOf(state, bucket), std::move(encoded), cluster));
  auto t2 = Clock::now();
  compress::SparseVector sum;
  FRUGAL_RETURN_IF_ERROR(compress::DecodeAndMerge(parts, &sum));
  if (sum.dense_size != data.size()) {
    return Status::Corruption("the merged update has " + std::to_string(sum.dense_size) + " values, this rank's " +
                              std::to_string(data.size()) + ": do all ranks train the same model?");
  }
  const float inv_world = 1.0f / static_cast<float>(transport->world_size());
  compress::Densify(sum, inv_world, data);
  CompressedAllReduceStats call;
  call.calls = 1;
  call.sent_values = mine.nnz();
  call.total_values = data.size();
  call.merged_values = sum.nnz();
  call.sent_bytes = sent_bytes;
  call.raw_bytes = raw_bytes;
  call.sparsify_s = Seconds(t1 - t0);
  call.exchange_s = Seconds(t2 - t1);
  Count(call);
  return Status::Ok();
}

// The sum of `parts` (messages in rank order), times `scale`, compressed
// with c's residual into *out: an owner's mean (step 2 of
// Note [Sharded exchange]) or a leader's cluster sum (Note [Leader residual]).
// `what` names the sum when a message has the wrong size.
Status CompressedAllReduce::Impl::CompressMerged(const std::vector<comm::Bytes>& parts, size_t size, float scale,
                                                 Compressor& c, const std::string& what, comm::Bytes* out) const {
  compress::SparseVector sum;
  FRUGAL_RETURN_IF_ERROR(compress::DecodeAndMerge(parts, &sum));
  if (sum.dense_size != size) {
    return Status::Corruption(what + " has " + std::to_string(sum.dense_size) + " values in a peer's message, " +
                              std::to_string(size) + " here: do all ranks train the same model?");
  }
  std::vector<float> dense(size);
  compress::Densify(sum, scale, Span<float>(dense));
  compress::SparseVector sent;
  FRUGAL_RETURN_IF_ERROR(
      c.feedback->Compress(Span<const float>(dense.data(), dense.size()), *c.sparsifier, options.density, &sent));
  return compress::Encode(sent, Wire(), out);
}

// Note [Leader residual]: the sum of a leader's cluster (`parts`, its
// members' messages in rank order), compressed with the leader's residual.
Result<comm::Bytes> CompressedAllReduce::Impl::CompressCluster(BucketState& state, uint64_t bucket,
                                                               const std::vector<comm::Bytes>& parts) const {
  if (!state.leader.feedback) FRUGAL_RETURN_IF_ERROR(ResetCompressor(state.leader, bucket, kLeaderPart, state.size));
  comm::Bytes out;
  FRUGAL_RETURN_IF_ERROR(CompressMerged(parts, state.size, 1.0f, state.leader, "the cluster's sum", &out));
  return out;
}

// Note [Sharded exchange].
Status CompressedAllReduce::Impl::RunSharded(BucketState& state, uint64_t bucket, Span<float> data) {
  using Clock = std::chrono::steady_clock;
  const int world = transport->world_size();
  const int me = transport->rank();
  const comm::Tag scatter_tag = TagOf(state, bucket);
  const comm::Tag gather_tag = TagOf(state, bucket);
  CompressedAllReduceStats call;
  call.calls = 1;
  call.total_values = data.size();
  auto t0 = Clock::now();
  // 1. This rank's contribution, shard by shard, to the shards' owners.
  std::vector<comm::Bytes> to_mine(static_cast<size_t>(world));
  for (int j = 0; j < world; ++j) {
    auto [begin, end] = ShardRange(data.size(), world, j);
    if (begin == end) continue;
    Compressor& c = state.shards[static_cast<size_t>(j)];
    compress::SparseVector piece;
    FRUGAL_RETURN_IF_ERROR(c.feedback->Compress(Span<const float>(data.data() + begin, end - begin), *c.sparsifier,
                                                options.density, &piece));
    comm::Bytes encoded;
    const compress::WireFormat wire = Wire();
    FRUGAL_RETURN_IF_ERROR(compress::Encode(piece, wire, &encoded));
    call.sent_values += piece.nnz();
    call.sent_bytes += encoded.size();
    call.raw_bytes += RawSize(piece, wire, encoded.size());
    if (j == me) {
      to_mine[static_cast<size_t>(me)] = std::move(encoded);
    } else {
      FRUGAL_RETURN_IF_ERROR(transport->Send(j, scatter_tag, std::move(encoded)));
    }
  }
  double exchange_s = 0;
  // 2. The mean of this rank's shard, compressed again, to every rank.
  auto [own_begin, own_end] = ShardRange(data.size(), world, me);
  auto mean_msg = std::make_shared<comm::Bytes>();
  if (own_begin != own_end) {
    auto wait = Clock::now();
    for (int k = 0; k < world; ++k) {
      if (k == me) continue;
      FRUGAL_ASSIGN_OR_RETURN(to_mine[static_cast<size_t>(k)], RecvFrom(k, scatter_tag, "gathering my shard"));
    }
    exchange_s += Seconds(Clock::now() - wait);
    FRUGAL_RETURN_IF_ERROR(CompressMerged(to_mine, own_end - own_begin, 1.0f / static_cast<float>(world),
                                          state.owned, "this rank's shard of the update", mean_msg.get()));
    for (int k = 0; k < world; ++k) {
      if (k != me) FRUGAL_RETURN_IF_ERROR(transport->Send(k, gather_tag, comm::SharedBytes(mean_msg)));
    }
  }
  // 3. Every owner's mean into the bucket (into `result` first: on error
  // `data` stays as it was).
  std::vector<float> result(data.size(), 0.0f);
  for (int k = 0; k < world; ++k) {
    auto [begin, end] = ShardRange(data.size(), world, k);
    if (begin == end) continue;
    comm::Bytes received;
    if (k != me) {
      auto wait = Clock::now();
      FRUGAL_ASSIGN_OR_RETURN(received, RecvFrom(k, gather_tag, "gathering the shards' means"));
      exchange_s += Seconds(Clock::now() - wait);
    }
    const comm::Bytes& bytes = k == me ? *mean_msg : received;
    compress::SparseVector shard;
    FRUGAL_RETURN_IF_ERROR(compress::Decode(Span<const uint8_t>(bytes.data(), bytes.size()), {}, &shard));
    if (shard.dense_size != end - begin) {
      return Status::Corruption("shard " + std::to_string(k) + " of the update has " +
                                std::to_string(shard.dense_size) + " values, this rank's " +
                                std::to_string(end - begin) + ": do all ranks train the same model?");
    }
    compress::Densify(shard, Span<float>(result.data() + begin, end - begin));
    call.merged_values += shard.nnz();
  }
  std::copy(result.begin(), result.end(), data.begin());
  call.exchange_s = exchange_s;
  call.sparsify_s = Seconds(Clock::now() - t0) - exchange_s;
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
  Impl* raw = impl.get();
  comm::ExchangeOptions exchange = options.exchange;
  // The sharded exchange is this class's own (RunSharded); SparseExchange
  // serves the others.
  if (exchange.algorithm == comm::ExchangeAlgorithm::kSharded) exchange.algorithm = comm::ExchangeAlgorithm::kFlat;
  impl->exchange = std::make_unique<comm::SparseExchange>(
      transport, [raw](std::vector<comm::Bytes> parts) { return raw->Combine(std::move(parts)); }, exchange);
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
  auto add = [&](const Compressor& c) {
    if (c.feedback) total += 4 * (c.feedback->residual().size() + c.feedback->velocity().size());
  };
  for (const auto& [index, state] : impl_->buckets) {
    add(state->whole);
    for (const Compressor& c : state->shards) add(c);
    add(state->owned);
    add(state->leader);
  }
  return total;
}

std::vector<uint8_t> CompressedAllReduce::SaveState() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ByteWriter w;
  w.U64(impl_->buckets.size());
  size_t sharded = 0, led = 0;
  for (const auto& [index, state] : impl_->buckets) {
    w.U64(index);
    WriteCompressor(w, state->whole, state->size);
    sharded += !state->shards.empty();
    led += state->leader.feedback != nullptr;
  }
  if (sharded == 0 && led == 0) return w.Take();
  w.U64(sharded);
  for (const auto& [index, state] : impl_->buckets) {
    if (state->shards.empty()) continue;
    w.U64(index);
    w.U64(state->shards.size() + 1);
    for (const Compressor& c : state->shards) WriteCompressor(w, c, c.size);
    WriteCompressor(w, state->owned, state->owned.size);
  }
  if (led == 0) return w.Take();
  w.U64(led);
  for (const auto& [index, state] : impl_->buckets) {
    if (!state->leader.feedback) continue;
    w.U64(index);
    WriteCompressor(w, state->leader, state->leader.size);
  }
  return w.Take();
}

namespace {

// A compressor as WriteCompressor wrote it, into `c` made by `reset` (or left
// empty when the bytes hold none); *size_out: its size.
Status ReadCompressor(ByteReader& r, Compressor* c, const std::function<Status(Compressor&, size_t)>& reset,
                      uint64_t* size_out = nullptr) {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t size, r.U64());
  if (size_out != nullptr) *size_out = size;
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> residual, r.Bytes());
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> sparsifier, r.Bytes());
  if (size >= (uint64_t{1} << 32)) return Status::Corruption("compressed all-reduce state: bad size");
  if (residual.empty()) return Status::Ok();
  FRUGAL_RETURN_IF_ERROR(reset(*c, static_cast<size_t>(size)));
  FRUGAL_RETURN_IF_ERROR(c->feedback->Deserialize(Span<const uint8_t>(residual.data(), residual.size())));
  FRUGAL_ASSIGN_OR_RETURN(compress::SparsifierState ss, compress::SparsifierState::Deserialize(
                                                            Span<const uint8_t>(sparsifier.data(), sparsifier.size())));
  return c->sparsifier->RestoreState(ss);
}

}  // namespace

Status CompressedAllReduce::LoadState(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "compressed all-reduce state");
  std::map<uint64_t, std::unique_ptr<BucketState>> loaded;
  auto bad = [](uint64_t index) {
    return Status::Corruption("compressed all-reduce state: bad bucket entry " + std::to_string(index));
  };
  FRUGAL_ASSIGN_OR_RETURN(uint64_t n, r.U64());
  for (uint64_t i = 0; i < n; ++i) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
    if (index >= kMaxBuckets || loaded.count(index)) return bad(index);
    auto state = std::make_unique<BucketState>();
    uint64_t size = 0;
    FRUGAL_RETURN_IF_ERROR(ReadCompressor(
        r, &state->whole, [&](Compressor& c, size_t s) { return impl_->ResetCompressor(c, index, 0, s); }, &size));
    state->size = static_cast<size_t>(size);
    loaded[index] = std::move(state);
  }
  if (!r.done()) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t sharded, r.U64());
    for (uint64_t i = 0; i < sharded; ++i) {
      FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
      FRUGAL_ASSIGN_OR_RETURN(uint64_t parts, r.U64());
      auto it = loaded.find(index);
      if (it == loaded.end() || parts < 2 || parts > 1 + kMaxShards || !it->second->shards.empty()) return bad(index);
      BucketState& state = *it->second;
      state.shards.resize(static_cast<size_t>(parts - 1));
      for (uint64_t p = 0; p < parts; ++p) {
        Compressor& c = p + 1 == parts ? state.owned : state.shards[static_cast<size_t>(p)];
        const uint64_t part = p + 1 == parts ? parts : p + 1;  // Reset's seeds
        FRUGAL_RETURN_IF_ERROR(ReadCompressor(r, &c, [&](Compressor& fresh, size_t s) {
          return impl_->ResetCompressor(fresh, index, part, s);
        }));
      }
    }
  }
  if (!r.done()) {
    FRUGAL_ASSIGN_OR_RETURN(uint64_t led, r.U64());
    for (uint64_t i = 0; i < led; ++i) {
      FRUGAL_ASSIGN_OR_RETURN(uint64_t index, r.U64());
      auto it = loaded.find(index);
      if (it == loaded.end() || it->second->leader.feedback) return bad(index);
      BucketState& state = *it->second;
      uint64_t size = 0;
      FRUGAL_RETURN_IF_ERROR(ReadCompressor(
          r, &state.leader, [&](Compressor& c, size_t s) { return impl_->ResetCompressor(c, index, kLeaderPart, s); },
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
bool CompressedAllReduce::deflating() const { return impl_->Wire().deflate; }
const CompressedAllReduceOptions& CompressedAllReduce::options() const { return impl_->options; }
CompressedAllReduceStats CompressedAllReduce::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}
int CompressedAllReduce::rank() const { return impl_->transport->rank(); }
int CompressedAllReduce::world_size() const { return impl_->transport->world_size(); }

}  // namespace frugal::engine
