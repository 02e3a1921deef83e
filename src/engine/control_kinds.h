// Kinds of the engine's control messages (ControlTag(iteration, kind)); one
// list, so the parts of a worker never reuse a tag. docs/architecture.md
// ("Message protocol") describes each payload.
#pragma once

#include <cstdint>

namespace frugal::engine {

enum ControlKind : uint32_t {
  kChecksum = 1,       // all-gather: 8-byte parameter checksum
  kBatchNorm = 2,      // all-gather: fp32 buffers to average
  kConfig = 3,         // all-gather: 8-byte digest of the shared configuration
  kInitialParams = 4,  // broadcast from rank 0: fp32 initial parameters of one bucket
  kTelemetry = 5,      // all-gather: WorkerTelemetry
  kDecision = 6,       // broadcast from rank 0: Decision
  kCheckpoint = 7,     // per-site checkpoints (Note [Per-site checkpoints]): each rank's file line to rank 0,
                       // the manifest to each cluster's leader, a resume's shared part to every rank
  kMembership = 8,     // all-gather: i64 pending generation, i64 stop (elastic check gate)
  kJoinState = 9,      // rank 0 -> each joiner: the run state sections of the restore point
  kLocalInitialParams = 10,  // broadcast from rank 0: fp32 initial parameters of one bucket (--sync local)
  kEvaluation = 11,    // all-gather: i64 correct, i64 predictions, f64 loss sum of this rank's test shard
  kStart = 12,         // all-gather: empty; every rank has its initial parameters (Note [Training clock])
  kUserCollective = 13,  // all-gather: f64 values of frugal.all_reduce or none (frugal.barrier); the
                         // iteration field counts the world's calls (python/src/world.cc)
  kClusterGradients = 14,  // each member -> every other member of its cluster: fp32 gradients of iteration t
                           // (--sync site, ClusterAverage)
};

}  // namespace frugal::engine
