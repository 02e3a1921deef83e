// CompressedCollective: the mean of one dense fp32 buffer over all ranks of a
// transport, computed from compressed contributions (torch-free). It is the
// one copy of the compressed round that the step pipeline
// (engine::GradientPipeline, per gradient bucket and step) and the
// compressed all-reduce (engine::CompressedAllReduce: the local mode's
// rounds and the Python DDP hook) both call. Per call:
//   acc  = residual + data                     (compress::ErrorFeedback)
//   sent = sparsify(acc, density)              (compress::Sparsifier)
//   encode (options.wire; deflate per call)    (compress::Encode)
//   exchange                                   (comm::SparseExchange)
//   decode and merge in rank order             (compress::DecodeAndMerge)
//   scale by 1 / world_size
// The exchange runs flat, hierarchical or sharded (options.exchange). The
// codec reaches comm as functions, as gloo passes its reduce function: the
// leaders' combine (compress::CombineEncoded), the leaders' residual
// (Note [Leader residual] in compressed_collective.cc) and the shard owners'
// average (Note [Sharded exchange]), so comm never sees a SparseVector.
//
// What a rank did not send stays in its residual (BufferState) and is sent in
// a later call. The caller owns one BufferState per buffer (a gradient
// bucket, a DDP bucket index) and passes the same one on every call for it.
//
// Determinism: every rank ends with the same bytes (the exchange's ordered
// combines, Note [Exchange determinism] in src/comm/sparse_exchange.cc), so
// the results are bit-identical across ranks.
//
// Thread safety: Reduce may run concurrently for different BufferStates and
// tags; calls with one BufferState must be serialised by the caller. The
// transport must outlive the object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/comm/algorithms/sparse_exchange.h"
#include "frugal/comm/transport/transport.h"
#include "frugal/common/span.h"
#include "frugal/common/status.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/error_feedback.h"
#include "frugal/compress/sparse_vector.h"
#include "frugal/compress/sparsifier.h"

namespace frugal::collective {

// How a cluster leader of the hierarchical exchange forms the one message it
// sends the other clusters.
enum class LeaderMode {
  // Merges its members' messages and re-encodes the sum without error
  // feedback (compress::MergedWireFormat: int4 travels as int8).
  kMerge,
  // Sums its members' contributions and compresses the sum with a residual
  // of its own, in the contributions' own format (Note [Leader residual]).
  kResidual,
};

// Every field is filled by the caller from its resolved configuration; the
// values below only make a value-initialised struct well defined.
struct CollectiveOptions {
  compress::SparsifierKind sparsifier = compress::SparsifierKind::kBlock;
  compress::WireFormat wire;  // wire.deflate: whether a call may deflate at all
  float dgc_momentum = 0.0f;  // error-feedback momentum correction; 0 = off
  // Algorithm (auto: flat in one cluster, hierarchical across clusters) and
  // the bound on every wait for a peer.
  comm::ExchangeOptions exchange;
  LeaderMode leader = LeaderMode::kMerge;
};

// One point of compression: an error-feedback residual and the sparsifier
// state that selects from it.
struct Compressor {
  size_t size = 0;
  std::unique_ptr<compress::Sparsifier> sparsifier;
  std::unique_ptr<compress::ErrorFeedback> feedback;
};

// What one buffer carries from call to call: the residuals and sparsifier
// states of this rank's compressors for it.
struct BufferState {
  size_t size = 0;
  std::string name;    // in errors and in the compressors' names
  uint64_t seed = 0;   // the sparsifiers' seeds start here
  Compressor whole;    // flat and hierarchical: this rank's contribution
  // Sharded: shards[j] compresses this rank's contribution to shard j;
  // owned compresses the mean of the shard this rank owns.
  std::vector<Compressor> shards;
  Compressor owned;
  // Hierarchical with LeaderMode::kResidual, on a cluster leader (made at its
  // first cluster message): compresses its cluster's sum.
  Compressor leader;

  // Host bytes of every residual (and DGC velocity) held.
  uint64_t ResidualBytes() const;
};

// One call's counters.
struct CallStats {
  uint64_t sent_values = 0;    // coordinates this rank contributed
  uint64_t merged_values = 0;  // coordinates of the result (the union of all selections)
  uint64_t total_values = 0;   // coordinates it could have contributed
  uint64_t sent_bytes = 0;     // encoded bytes this rank contributed
  uint64_t raw_bytes = 0;      // the same without deflate (= sent_bytes when none was deflated)
  double compress_s = 0;       // error feedback, sparsify, encode, and the owners' and leaders' work
  double exchange_s = 0;       // the exchange, less the owners' work
  // The contribution's masses (Note [Deferred mass] in
  // src/compress/error_feedback.cc), summed over its shards when sharded.
  compress::FeedbackMass mass;
};

// The tags of one call: the sharded exchange's two phases use both, the
// flat and hierarchical ones `scatter` only.
struct CallTags {
  comm::Tag scatter = 0;
  comm::Tag gather = 0;
};

// [begin, end) of shard j of a buffer of n values over `world` ranks: whole
// blocks of 16 values (the block-id encodings' unit), the last shard taking
// the tail. Shards may be empty when n is small.
std::pair<size_t, size_t> ShardRange(size_t n, int world, int j);

// The compressors' seed offsets (`part`): 0 for `whole`, 1 + j for shard j,
// 1 + world for `owned`, kLeaderPart for `leader`.
inline constexpr uint64_t kMaxShards = uint64_t{1} << 16;
inline constexpr uint64_t kLeaderPart = kMaxShards + 2;

class CompressedCollective {
 public:
  // REQUIRES: transport != nullptr and outlives the object.
  CompressedCollective(CollectiveOptions options, comm::Transport* transport);
  ~CompressedCollective();
  CompressedCollective(const CompressedCollective&) = delete;
  CompressedCollective& operator=(const CompressedCollective&) = delete;

  // Makes `state` a fresh state for `size` values (name and seed as given)
  // unless it already is one for this exchange and size.
  Status Prepare(BufferState& state, const std::string& name, uint64_t seed, size_t size) const;
  // A fresh compressor of `size` values, named after state and `part`.
  Status ResetCompressor(const BufferState& state, uint64_t part, size_t size, Compressor& c) const;

  // *mean <- the mean over the ranks of the compressed, error-fed
  // contributions of `data` at `density` (values scaled by 1 / world).
  // `deflate` switches deflate off for this call's messages where
  // options.wire deflates (lossless: Note [Deflate by trial]).
  // REQUIRES: Prepare(state, ..., data.size()); on error the residuals may
  // have advanced, the caller's data is untouched.
  Status Reduce(BufferState& state, const CallTags& tags, Span<const float> data, double density, bool deflate,
                compress::SparseVector* mean, CallStats* stats) const;
  // The same, written densely into `out` (zeros where no rank sent a value).
  // REQUIRES: out.size() == data.size(); out may be data.
  Status ReduceDense(BufferState& state, const CallTags& tags, Span<const float> data, double density, bool deflate,
                     Span<float> out, CallStats* stats) const;

  bool sharded() const;
  const CollectiveOptions& options() const { return options_; }

 private:
  // The merged sum of the exchange and the factor that makes it the mean.
  Status ReduceSum(BufferState& state, const CallTags& tags, Span<const float> data, double density, bool deflate,
                   compress::SparseVector* sum, float* scale, CallStats* stats) const;
  Status ReduceWhole(BufferState& state, comm::Tag tag, Span<const float> data, double density,
                     compress::WireFormat wire, compress::SparseVector* sum, CallStats* stats) const;
  Status ReduceSharded(BufferState& state, const CallTags& tags, Span<const float> data, double density,
                       compress::WireFormat wire, compress::SparseVector* sum, CallStats* stats) const;
  Status CompressMerged(const std::vector<comm::Bytes>& parts, size_t size, float scale, Compressor& c,
                        double density, compress::WireFormat wire, const std::string& what,
                        comm::Bytes* out) const;
  bool Fits(const BufferState& state, size_t size) const;

  CollectiveOptions options_;
  comm::Transport* transport_;
  // [d]: the exchange whose leaders' combines deflate when d (the same
  // algorithm; the combine is its only difference).
  std::unique_ptr<comm::SparseExchange> exchange_[2];
};

}  // namespace frugal::collective
