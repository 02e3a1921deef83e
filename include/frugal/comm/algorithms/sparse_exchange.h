// SparseExchange: every rank contributes one opaque message (an encoded
// sparse gradient bucket) and every rank gets back the identical combination
// of all contributions, using as few bytes on the slow inter-cluster links as
// the topology allows. How messages are combined is the caller's business
// (CombineFn), so comm does not depend on the codec.
//
// Algorithms (details and byte counts per link in docs/design/comm.md):
//   kFlat          allgather: each rank sends its message to every other
//                  rank and combines all N in rank order.
//   kHierarchical  members -> cluster leader (fast network); leader combines
//                  its cluster in rank order; leaders swap exactly one
//                  combined message per ordered cluster pair over the slow
//                  links; each leader combines the per-cluster messages in
//                  cluster-id order and broadcasts the result to its members.
//   kAuto          kFlat with one cluster, kHierarchical otherwise.
// These three are the MessageAlgorithm a SparseExchange is built with: Run
// and RunUncombined take one whole message per rank.
//   sharded        a reduce-scatter and an all-gather (RunSharded, whatever
//                  the MessageAlgorithm): every rank sends its contribution
//                  to shard j to rank j; owner j turns the world's
//                  contributions to its shard into one message (ShardFn,
//                  the codec's: decode, average, re-compress) and sends it
//                  to every rank. The caller cuts its contribution into
//                  shards (it compresses each with a residual of its own:
//                  collective::CompressedCollective, Note [Sharded
//                  exchange]), so it is not a MessageAlgorithm; a run
//                  chooses it as ExchangeAlgorithm::kSharded.
//
// Determinism: the combine inputs are always ordered (rank order inside a
// cluster, cluster-id order across clusters), so if CombineFn is a pure
// function every rank ends with byte-identical results.
//
// Thread safety: Run may be called concurrently from several threads with
// different tags (e.g. one call per gradient bucket). The transport must
// outlive the exchange.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "frugal/comm/transport/transport.h"

namespace frugal::comm {

// Combines contributions given in a deterministic order into one message.
// Called with at least two parts (a single part is passed through as is).
using CombineFn = std::function<Result<Bytes>(std::vector<Bytes> parts)>;
// kHierarchical only: how a leader turns its cluster's contributions (rank
// order, at least two) into the one message it sends to the other
// clusters' leaders, in place of CombineFn (a caller that re-compresses the
// cluster's sum with a residual of its own: collective::CompressedCollective
// with LeaderMode::kResidual).
// Every leader must produce what every other leader can combine.
using ClusterFn = std::function<Result<Bytes>(std::vector<Bytes> parts)>;

// kSharded only: how the owner of a shard turns the world's contributions to
// it (rank order, one per rank) into the one message it sends every rank.
using ShardFn = std::function<Result<Bytes>(std::vector<Bytes> parts)>;

// What Run and RunUncombined run: an exchange of one whole message per rank.
enum class MessageAlgorithm { kAuto, kFlat, kHierarchical };

// The exchange a run chooses (--exchange): a message algorithm, or kSharded,
// which a caller runs with RunSharded (collective::CompressedCollective).
enum class ExchangeAlgorithm { kAuto, kFlat, kHierarchical, kSharded };

// The message algorithm of `a`; nullopt for kSharded, which is none.
std::optional<MessageAlgorithm> MessageAlgorithmOf(ExchangeAlgorithm a);

// A SparseExchange's options.
struct MessageExchangeOptions {
  MessageAlgorithm algorithm = MessageAlgorithm::kAuto;
  // Bound on each wait for a peer's message. Default: 60 s.
  std::chrono::milliseconds timeout{60000};
};

// The exchange as a run chooses it, for the layers that run either kind
// (collective::CompressedCollective).
struct ExchangeOptions {
  ExchangeAlgorithm algorithm = ExchangeAlgorithm::kAuto;
  // Bound on each wait for a peer's message. Default: 60 s.
  std::chrono::milliseconds timeout{60000};
};

class SparseExchange {
 public:
  // REQUIRES: transport != nullptr and outlives this object; combine is set.
  SparseExchange(Transport* transport, CombineFn combine, MessageExchangeOptions options = {});

  // Contributes `contribution` to the exchange identified by `tag` and
  // returns the combination of all ranks' contributions. Every rank must
  // call Run with the same tag; a tag must not be reused between the same
  // ranks while an exchange with it is still running anywhere.
  // Errors: Timeout/Unavailable naming the peer that did not deliver, or
  // the error returned by CombineFn.
  Result<Bytes> Run(Tag tag, Bytes contribution);

  // As Run, but without this rank's final combine: returns the messages
  // whose combination is the result, in the order Run would combine them
  // (kFlat: every rank's contribution in rank order; kHierarchical: the one
  // result). For a caller that decodes the result anyway, so that it can
  // merge the parts itself instead of having CombineFn encode them first.
  // cluster: kHierarchical's cluster message (ClusterFn); null: CombineFn.
  Result<std::vector<Bytes>> RunUncombined(Tag tag, Bytes contribution, const ClusterFn& cluster = nullptr);

  // kSharded: shards[j], this rank's contribution to shard j (one entry per
  // rank), goes to rank j, which sends owner(the world's contributions to
  // its shard, in rank order) to every rank; returns the owners' messages in
  // rank order. A shard whose active[j] is false (one with no values, the
  // same on every rank) sends nothing and returns empty bytes. The two
  // phases use scatter_tag and gather_tag, which must differ; the tag rule
  // of Run applies to both.
  // REQUIRES: shards.size() == active.size() == world size; owner is set.
  Result<std::vector<Bytes>> RunSharded(Tag scatter_tag, Tag gather_tag, std::vector<Bytes> shards,
                                        const std::vector<bool>& active, const ShardFn& owner);

  // kFlat or kHierarchical (kAuto resolved by the topology).
  MessageAlgorithm algorithm() const { return algorithm_; }

 private:
  // `status` with the exchange's tag and this rank named.
  Status InContext(Tag tag, const Status& status) const;
  Result<Bytes> RunHierarchical(Tag tag, Bytes contribution, const ClusterFn& cluster);
  Result<Bytes> Combine(std::vector<Bytes> parts);
  Result<Bytes> RecvFrom(int src, Tag tag, const char* phase);

  Transport* transport_;
  CombineFn combine_;
  MessageExchangeOptions options_;
  MessageAlgorithm algorithm_;
};

}  // namespace frugal::comm
