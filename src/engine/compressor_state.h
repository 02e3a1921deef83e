// The bytes of one collective::Compressor in the engine's saved states (the
// compressed all-reduce's and the step pipeline's local part).
#pragma once

#include <cstdint>
#include <functional>

#include "frugal/collective/compressed_collective.h"
#include "frugal/common/status.h"
#include "frugal/engine/checkpoint.h"

namespace frugal::engine {

// `size` as the entry's size (a bucket's, where its whole-bucket compressor
// is empty), then c's residual and sparsifier state (empty bytes for none).
void WriteCompressor(ByteWriter& w, const collective::Compressor& c, uint64_t size);
// The bytes WriteCompressor writes for c (Note [Sized snapshots] in
// checkpoint.cc).
size_t CompressorBytes(const collective::Compressor& c);

// A compressor as WriteCompressor wrote it, into `c` made by `reset` (or left
// empty when the bytes hold none; only parsed when c is null); *size_out: its
// size.
using ResetCompressorFn = std::function<Status(collective::Compressor&, size_t)>;
Status ReadCompressor(ByteReader& r, collective::Compressor* c, const ResetCompressorFn& reset,
                      uint64_t* size_out = nullptr);

}  // namespace frugal::engine
