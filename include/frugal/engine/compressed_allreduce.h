// CompressedAllReduce: the mean of one dense fp32 buffer over all ranks,
// computed from block-sparsified, error-fed contributions (torch-free).
// It is the engine behind the Python DDP comm hook (frugal.sparse_hook): DDP
// hands over one flat gradient bucket at a time and gets back the averaged
// bucket. Per call, for bucket index b, it runs the compressed collective
// (collective::CompressedCollective: error feedback, sparsify, encode,
// exchange, decode and merge, scale) on b's residuals, and writes the mean
// densely into the bucket. Its cluster leaders compress their cluster's sum
// with a residual of their own (collective::LeaderMode::kResidual,
// Note [Leader residual] in src/collective/compressed_collective.cc); with
// exchange.algorithm kSharded each rank owns a shard of every bucket
// (Note [Sharded exchange] there). What a rank did not send stays in its
// residual and is sent later, as in the GradientPipeline, but the update is
// handed back instead of applied by Frugal's optimizer.
//
// Buckets are identified by an index chosen by the caller (DDP's
// GradBucket.index()). Every rank must call Run for the same buckets in the
// same order, with buffers of the same size (DDP guarantees both). If the size
// of bucket b changes (DDP rebuilds its buckets after the first iteration),
// b's residual and sparsifier state start afresh; that loses at most the
// residual of one step.
//
// Messages: tag kHookTagBit | instance << 54 | call << 24 | b, in a range
// disjoint from the engine's gradient tags (iteration * num_buckets + b, far
// below 2^54) and control tags (bit 63), so a hook and a GradientPipeline may
// share one transport; objects sharing a transport need distinct
// `instance` numbers (the same on every rank).
//
// Thread safety: Run may be called from several threads for different bucket
// indices; calls for the same index are serialised. The transport must
// outlive this object.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/comm/algorithms/sparse_exchange.h"
#include "frugal/comm/transport/transport.h"
#include "frugal/common/span.h"
#include "frugal/common/stat_list.h"
#include "frugal/common/status.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/sparsifier.h"

namespace frugal::engine {

class ByteWriter;  // frugal/engine/checkpoint.h

// Filled by the caller from its resolved configuration (LocalSync from the
// RunConfig, the Python hook from its keywords); it has no defaults of its
// own: a value-initialised struct has density 0, which Create refuses.
struct CompressedAllReduceOptions {
  compress::SparsifierKind sparsifier{};  // block-id encodings need kBlock
  double density = 0;                     // fraction of each bucket sent per call, in (0, 1]
  compress::WireFormat wire;              // wire.deflate: per call, SetDeflate
  float dgc_momentum = 0;                 // error-feedback momentum correction; 0 = off
  // Algorithm (auto: flat in one cluster, hierarchical across clusters;
  // sharded: see the top) and the bound on every wait for a peer.
  comm::ExchangeOptions exchange;
  uint64_t seed = 0;  // the sparsifiers' seeds (randomk) start here
  // Distinguishes the messages of objects sharing one transport, < 256.
  uint32_t instance = 0;
};

// Validates the options (the messages users see from Python).
Status ValidateCompressedAllReduceOptions(const CompressedAllReduceOptions& options);

// Cumulative counters, for reporting (Python's CompressedAllReduce.stats()).
struct CompressedAllReduceStats {
  uint64_t calls = 0;
  uint64_t sent_values = 0;
  uint64_t merged_values = 0;
  uint64_t total_values = 0;
  uint64_t sent_bytes = 0;
  uint64_t raw_bytes = 0;  // = sent_bytes when none was deflated
  double sparsify_s = 0;
  double exchange_s = 0;

  // The one list of these counters (common/stat_list.h).
  template <class V>
  static void VisitStats(V&& visit) {
    using S = CompressedAllReduceStats;
    visit(Stat("calls", "", "buckets reduced").Sum(), &S::calls);
    visit(Stat("sent_values", "values", "coordinates this rank contributed").Sum(), &S::sent_values);
    visit(Stat("merged_values", "values", "coordinates of the merged results (the union of all selections)").Sum(),
          &S::merged_values);
    visit(Stat("total_values", "values", "coordinates it could have contributed").Sum(), &S::total_values);
    visit(Stat("sent_bytes", "bytes", "encoded bytes this rank contributed").Sum(), &S::sent_bytes);
    visit(Stat("raw_bytes", "bytes", "the same messages' bytes without deflate").Sum(), &S::raw_bytes);
    visit(Stat("sparsify_s", "s", "error feedback, selection and encode").Sum(), &S::sparsify_s);
    visit(Stat("exchange_s", "s", "the exchange").Sum(), &S::exchange_s);
  }
};

constexpr comm::Tag kHookTagBit = comm::Tag{1} << 62;

class CompressedAllReduce {
 public:
  // REQUIRES: transport != nullptr and outlives the object.
  static Result<std::unique_ptr<CompressedAllReduce>> Create(const CompressedAllReduceOptions& options,
                                                             comm::Transport* transport);
  ~CompressedAllReduce();
  CompressedAllReduce(const CompressedAllReduce&) = delete;
  CompressedAllReduce& operator=(const CompressedAllReduce&) = delete;

  // Replaces `data` by the mean over the ranks of the sparsified, error-fed
  // contributions of bucket `bucket`. On error (non-finite gradient, peer
  // lost, timeout) `data` is left unchanged and the error names the bucket.
  // REQUIRES: bucket < 2^24, data.size() < 2^32.
  Status Run(uint64_t bucket, Span<float> data);

  // This rank's state as bytes, for checkpoints: per bucket index, its size,
  // error-feedback residuals (its own; a shard owner's and a cluster
  // leader's) and sparsifier states. LoadState replaces the
  // state by such bytes (Corruption on malformed ones); the message counters
  // start again from 0, so every rank of a resumed run must load (or start
  // empty) at the same point. REQUIRES: no Run in flight.
  std::vector<uint8_t> SaveState() const;
  // SaveState's bytes written to w in place, and their count (a section
  // built in place: Note [Sized snapshots] in checkpoint.cc).
  void WriteState(ByteWriter& w) const;
  size_t StateBytes() const;
  Status LoadState(const std::vector<uint8_t>& bytes);
  // Host bytes of the error-feedback state (residuals, and DGC's velocity
  // where on) over every compressor this rank holds.
  uint64_t ResidualBytes() const;

  // With options.wire.deflate: whether the messages of the next Run are
  // deflated (true at first). Deflate is lossless and flagged per message,
  // so a rank may switch it alone between calls without changing any value
  // (Note [Deflate by trial] in deflate_trial.cc).
  void SetDeflate(bool on);
  bool deflating() const;

  const CompressedAllReduceOptions& options() const;
  CompressedAllReduceStats stats() const;
  int rank() const;
  int world_size() const;

  class Impl;

 private:
  explicit CompressedAllReduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::engine
