#include "frugal/collective/compressed_collective.h"

#include <algorithm>
#include <chrono>

#include "frugal/common/clock.h"
#include "frugal/compress/merge.h"

namespace frugal::collective {

// Note [Sharded exchange]
// ExchangeAlgorithm::kSharded is a reduce-scatter then an all-gather, each of
// compressed messages (comm::SparseExchange::RunSharded moves them). The
// buffer is cut into world_size contiguous shards (whole blocks of 16
// values, ShardRange); rank j owns shard j.
//  1. Every rank compresses its contribution shard by shard (a residual and a
//     sparsifier per shard) and sends shard j to rank j.
//  2. Owner j decodes the world's contributions to its shard in rank order,
//     averages them, compresses the mean with a residual of its own (what it
//     does not send, or the rounding of its values, goes out in a later
//     call) and sends the result to every rank.
//  3. Every rank decodes the owners' messages into the buffer.
// Every rank decodes the same bytes, so the results are bit-identical. A rank
// sends about 2 (N-1)/N of a contribution's bytes, where the flat all-gather
// sends N-1 copies: half as many at 4 ranks, the same at 2. With density 1
// and fp32 values the result equals the flat exchange's bit for bit (the
// same sums in the same order, then the same scaling). It ignores clusters:
// every shard crosses every link.

// Note [Leader residual]
// In the hierarchical exchange a cluster leader sends the other clusters one
// message for its whole cluster. With LeaderMode::kMerge (the step
// pipeline's default) a leader merges its members' messages and re-encodes
// the sum without error feedback, so integer codes travel as int8
// (compress::MergedWireFormat) and a sum holds the union of the members'
// selections. With LeaderMode::kResidual (the compressed all-reduce's, and
// the step pipeline's with --leader-residual) a leader instead decodes its
// members' contributions, sums them exactly, adds a residual of its own
// and compresses that like a contribution: the same
// density and wire format (int4 codes stay int4), and what the leader does
// not send, or the rounding of what it sends, goes out in a later call. At
// density 1 this halves the bytes that cross the slow links (0.504 bytes per
// value instead of int8's 1.004). Every leader combines the same per-cluster
// messages in cluster order and its members receive the leader's bytes, so
// the results stay bit-identical on every rank. A cluster of one sends its
// member's message as it is.

namespace {

// v's bytes in wire without deflate, where wire deflates; else encoded.
size_t RawSize(const compress::SparseVector& v, compress::WireFormat wire, size_t encoded) {
  if (!wire.deflate) return encoded;
  wire.deflate = false;
  return compress::EncodedSize(v, wire);
}

Status WrongSize(const std::string& what, uint64_t got, size_t want) {
  return Status::Corruption(what + " has " + std::to_string(got) + " values, this rank's " + std::to_string(want) +
                            ": do all ranks train the same model?");
}

void AddMass(const compress::FeedbackMass& m, compress::FeedbackMass* total) {
  total->held += m.held;
  total->sent += m.sent;
  total->held_sq += m.held_sq;
  total->sent_sq += m.sent_sq;
}

}  // namespace

std::pair<size_t, size_t> ShardRange(size_t n, int world, int j) {
  const size_t blocks = (n + 15) / 16;
  auto edge = [&](int k) { return std::min(n, 16 * (blocks * static_cast<size_t>(k) / static_cast<size_t>(world))); };
  return {edge(j), j + 1 == world ? n : edge(j + 1)};
}

uint64_t BufferState::ResidualBytes() const {
  uint64_t total = 0;
  auto add = [&](const Compressor& c) {
    if (c.feedback) total += 4 * (c.feedback->residual().size() + c.feedback->velocity().size());
  };
  add(whole);
  for (const Compressor& c : shards) add(c);
  add(owned);
  add(leader);
  return total;
}

CompressedCollective::CompressedCollective(CollectiveOptions options, comm::Transport* transport)
    : options_(options), transport_(transport) {
  // The sharded exchange runs RunSharded, and its world of one (no shards
  // to exchange) the flat exchange's pass-through.
  comm::MessageExchangeOptions exchange;
  exchange.algorithm = comm::MessageAlgorithmOf(options_.exchange.algorithm).value_or(comm::MessageAlgorithm::kFlat);
  exchange.timeout = options_.exchange.timeout;
  for (bool deflate : {false, true}) {
    compress::WireFormat wire = options_.wire;
    wire.deflate = wire.deflate && deflate;
    // Leaders merge the contributions in rank order (Note [Merged updates]
    // in src/compress/merge.cc), so all ranks decode byte-identical sums.
    exchange_[deflate] = std::make_unique<comm::SparseExchange>(
        transport_, [wire](std::vector<comm::Bytes> parts) { return compress::CombineEncoded(parts, wire); },
        exchange);
  }
}

CompressedCollective::~CompressedCollective() = default;

bool CompressedCollective::sharded() const {
  return options_.exchange.algorithm == comm::ExchangeAlgorithm::kSharded && transport_->world_size() > 1;
}

Status CompressedCollective::ResetCompressor(const BufferState& state, uint64_t part, size_t size,
                                             Compressor& c) const {
  const std::string name = state.name + (part == 0             ? ""
                                         : part == kLeaderPart ? " cluster sum"
                                                               : " shard " + std::to_string(part - 1));
  compress::SparsifierOptions so;
  so.tensor_name = name;
  so.seed = state.seed + (part << 24);
  FRUGAL_ASSIGN_OR_RETURN(c.sparsifier, compress::CreateSparsifier(NameOf(options_.sparsifier), so));
  compress::ErrorFeedbackOptions eo;
  eo.tensor_name = name;
  eo.momentum = options_.dgc_momentum;
  eo.wire_values = options_.wire.values;
  c.feedback = std::make_unique<compress::ErrorFeedback>(size, eo);
  c.size = size;
  return Status::Ok();
}

bool CompressedCollective::Fits(const BufferState& state, size_t size) const {
  if (state.size != size) return false;
  if (!sharded()) return state.whole.feedback != nullptr;
  const int world = transport_->world_size();
  if (state.shards.size() != static_cast<size_t>(world) || !state.owned.feedback) return false;
  for (int j = 0; j < world; ++j) {
    auto [begin, end] = ShardRange(size, world, j);
    const Compressor& c = state.shards[static_cast<size_t>(j)];
    if (!c.feedback || c.size != end - begin) return false;
  }
  auto [begin, end] = ShardRange(size, world, transport_->rank());
  return state.owned.size == end - begin;
}

Status CompressedCollective::Prepare(BufferState& state, const std::string& name, uint64_t seed, size_t size) const {
  state.name = name;
  state.seed = seed;
  if (Fits(state, size)) return Status::Ok();
  state.size = size;
  state.whole = Compressor();
  state.shards.clear();
  state.owned = Compressor();
  state.leader = Compressor();
  if (!sharded()) return ResetCompressor(state, 0, size, state.whole);
  const int world = transport_->world_size();
  state.shards.resize(static_cast<size_t>(world));
  for (int j = 0; j < world; ++j) {
    auto [begin, end] = ShardRange(size, world, j);
    FRUGAL_RETURN_IF_ERROR(ResetCompressor(state, 1 + j, end - begin, state.shards[static_cast<size_t>(j)]));
  }
  auto [begin, end] = ShardRange(size, world, transport_->rank());
  // The owner's residual holds the mean, not a contribution: a seed of its own.
  return ResetCompressor(state, 1 + static_cast<uint64_t>(world), end - begin, state.owned);
}

Status CompressedCollective::Reduce(BufferState& state, const CallTags& tags, Span<const float> data, double density,
                                    bool deflate, compress::SparseVector* mean, CallStats* stats) const {
  float scale = 1.0f;
  FRUGAL_RETURN_IF_ERROR(ReduceSum(state, tags, data, density, deflate, mean, &scale, stats));
  if (scale != 1.0f) {
    for (float& v : mean->values) v *= scale;
  }
  return Status::Ok();
}

Status CompressedCollective::ReduceDense(BufferState& state, const CallTags& tags, Span<const float> data,
                                         double density, bool deflate, Span<float> out, CallStats* stats) const {
  compress::SparseVector sum;
  float scale = 1.0f;
  FRUGAL_RETURN_IF_ERROR(ReduceSum(state, tags, data, density, deflate, &sum, &scale, stats));
  compress::Densify(sum, scale, out);
  return Status::Ok();
}

Status CompressedCollective::ReduceSum(BufferState& state, const CallTags& tags, Span<const float> data,
                                       double density, bool deflate, compress::SparseVector* sum, float* scale,
                                       CallStats* stats) const {
  compress::WireFormat wire = options_.wire;
  wire.deflate = wire.deflate && deflate;
  *stats = CallStats();
  stats->total_values = data.size();
  if (sharded()) {
    *scale = 1.0f;  // the owners sent their shards' means
    return ReduceSharded(state, tags, data, density, wire, sum, stats);
  }
  *scale = 1.0f / static_cast<float>(transport_->world_size());
  return ReduceWhole(state, tags.scatter, data, density, wire, sum, stats);
}

// The sum of `parts` (messages in rank order), times `scale`, compressed
// with c's residual into *out: an owner's mean (step 2 of
// Note [Sharded exchange]) or a leader's cluster sum (Note [Leader residual]).
// `what` names the sum when a message has the wrong size.
Status CompressedCollective::CompressMerged(const std::vector<comm::Bytes>& parts, size_t size, float scale,
                                            Compressor& c, double density, compress::WireFormat wire,
                                            const std::string& what, comm::Bytes* out) const {
  compress::SparseVector sum;
  FRUGAL_RETURN_IF_ERROR(compress::DecodeAndMerge(parts, &sum));
  if (sum.dense_size != size) return WrongSize(what + " in a peer's message", sum.dense_size, size);
  std::vector<float> dense(size);
  compress::Densify(sum, scale, Span<float>(dense));
  compress::SparseVector sent;
  FRUGAL_RETURN_IF_ERROR(
      c.feedback->Compress(Span<const float>(dense.data(), dense.size()), *c.sparsifier, density, &sent));
  return compress::Encode(sent, wire, out);
}

Status CompressedCollective::ReduceWhole(BufferState& state, comm::Tag tag, Span<const float> data, double density,
                                         compress::WireFormat wire, compress::SparseVector* sum,
                                         CallStats* stats) const {
  auto t0 = transport_->clock().Now();
  compress::SparseVector mine;
  FRUGAL_RETURN_IF_ERROR(state.whole.feedback->Compress(data, *state.whole.sparsifier, density, &mine));
  comm::Bytes encoded;
  FRUGAL_RETURN_IF_ERROR(compress::Encode(mine, wire, &encoded));
  stats->sent_values = mine.nnz();
  stats->sent_bytes = encoded.size();
  stats->raw_bytes = RawSize(mine, wire, encoded.size());
  stats->mass = state.whole.feedback->last_mass();
  auto t1 = transport_->clock().Now();
  comm::ClusterFn cluster;
  if (options_.leader == LeaderMode::kResidual) {
    cluster = [&](std::vector<comm::Bytes> members) -> Result<comm::Bytes> {
      if (!state.leader.feedback) FRUGAL_RETURN_IF_ERROR(ResetCompressor(state, kLeaderPart, state.size, state.leader));
      comm::Bytes out;
      FRUGAL_RETURN_IF_ERROR(
          CompressMerged(members, state.size, 1.0f, state.leader, density, wire, "the cluster's sum", &out));
      return out;
    };
  }
  FRUGAL_ASSIGN_OR_RETURN(std::vector<comm::Bytes> parts,
                          exchange_[wire.deflate]->RunUncombined(tag, std::move(encoded), cluster));
  auto t2 = transport_->clock().Now();
  FRUGAL_RETURN_IF_ERROR(compress::DecodeAndMerge(parts, sum));  // Note [Merged updates] in src/compress/merge.cc
  if (sum->dense_size != data.size()) return WrongSize("the merged update of " + state.name, sum->dense_size, data.size());
  stats->merged_values = sum->nnz();
  stats->compress_s = Seconds(t1 - t0);
  stats->exchange_s = Seconds(t2 - t1);
  return Status::Ok();
}

// Note [Sharded exchange].
Status CompressedCollective::ReduceSharded(BufferState& state, const CallTags& tags, Span<const float> data,
                                           double density, compress::WireFormat wire, compress::SparseVector* sum,
                                           CallStats* stats) const {
  const int world = transport_->world_size();
  const int me = transport_->rank();
  auto t0 = transport_->clock().Now();
  // 1. This rank's contribution, shard by shard.
  std::vector<comm::Bytes> shards(static_cast<size_t>(world));
  std::vector<bool> active(static_cast<size_t>(world));
  for (int j = 0; j < world; ++j) {
    auto [begin, end] = ShardRange(data.size(), world, j);
    active[static_cast<size_t>(j)] = begin != end;
    if (begin == end) continue;
    Compressor& c = state.shards[static_cast<size_t>(j)];
    compress::SparseVector piece;
    FRUGAL_RETURN_IF_ERROR(c.feedback->Compress(data.subspan(begin, end - begin), *c.sparsifier, density, &piece));
    comm::Bytes& encoded = shards[static_cast<size_t>(j)];
    FRUGAL_RETURN_IF_ERROR(compress::Encode(piece, wire, &encoded));
    stats->sent_values += piece.nnz();
    stats->sent_bytes += encoded.size();
    stats->raw_bytes += RawSize(piece, wire, encoded.size());
    AddMass(c.feedback->last_mass(), &stats->mass);
  }
  // 2. The owner's mean of its shard, compressed again.
  // A plain size, not the structured binding: a lambda cannot capture a
  // binding in C++17 (clang refuses it).
  const auto own_range = ShardRange(data.size(), world, me);
  const size_t own_size = own_range.second - own_range.first;
  double owner_s = 0;
  const comm::ShardFn owner = [&](std::vector<comm::Bytes> parts) -> Result<comm::Bytes> {
    auto start = transport_->clock().Now();
    comm::Bytes mean;
    FRUGAL_RETURN_IF_ERROR(CompressMerged(parts, own_size, 1.0f / static_cast<float>(world), state.owned,
                                          density, wire, "this rank's shard of " + state.name, &mean));
    owner_s = Seconds(transport_->clock().Now() - start);
    return mean;
  };
  auto t1 = transport_->clock().Now();
  FRUGAL_ASSIGN_OR_RETURN(std::vector<comm::Bytes> means,
                          exchange_[wire.deflate]->RunSharded(tags.scatter, tags.gather, std::move(shards), active,
                                                              owner));
  auto t2 = transport_->clock().Now();
  // 3. Every owner's mean, in shard order, into one vector over the buffer.
  sum->Clear(data.size());
  for (int k = 0; k < world; ++k) {
    auto [begin, end] = ShardRange(data.size(), world, k);
    if (begin == end) continue;
    const comm::Bytes& bytes = means[static_cast<size_t>(k)];
    compress::SparseVector shard;
    FRUGAL_RETURN_IF_ERROR(compress::Decode(Span<const uint8_t>(bytes.data(), bytes.size()), {}, &shard));
    if (shard.dense_size != end - begin) {
      return WrongSize("shard " + std::to_string(k) + " of " + state.name, shard.dense_size, end - begin);
    }
    for (uint32_t i : shard.indices) sum->indices.push_back(static_cast<uint32_t>(begin + i));
    sum->values.insert(sum->values.end(), shard.values.begin(), shard.values.end());
  }
  stats->merged_values = sum->nnz();
  stats->exchange_s = Seconds(t2 - t1) - owner_s;
  stats->compress_s = Seconds(transport_->clock().Now() - t0) - stats->exchange_s;
  return Status::Ok();
}

}  // namespace frugal::collective
