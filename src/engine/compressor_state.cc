#include "compressor_state.h"

#include <algorithm>
#include <string>
#include <vector>

namespace frugal::engine {

void WriteCompressor(ByteWriter& w, const collective::Compressor& c, uint64_t size) {
  w.U64(size);
  const compress::ErrorFeedback* f = c.feedback.get();
  w.BytesAppended(f ? f->SerializedSize() : 0, [f](std::vector<uint8_t>* out) {
    if (f) f->AppendTo(out);
  });
  w.Bytes(c.sparsifier ? c.sparsifier->state().Serialize() : std::vector<uint8_t>());
}

size_t CompressorBytes(const collective::Compressor& c) {
  return 8 + 8 + (c.feedback ? c.feedback->SerializedSize() : 0) + 8 +
         (c.sparsifier ? c.sparsifier->state().Serialize().size() : 0);
}

Status ReadCompressor(ByteReader& r, collective::Compressor* c, const ResetCompressorFn& reset, uint64_t* size_out) {
  FRUGAL_ASSIGN_OR_RETURN(uint64_t size, r.U64());
  if (size_out != nullptr) *size_out = size;
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> residual, r.Bytes());
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> sparsifier, r.Bytes());
  if (size >= (uint64_t{1} << 32)) return Status::Corruption("compressor state: bad size");
  if (residual.empty() || c == nullptr) return Status::Ok();
  // The residual holds 4 bytes per value (8 with momentum correction) after a
  // 14-byte header: a size its bytes cannot hold is refused before `reset`
  // allocates it.
  if ((residual.size() - std::min<size_t>(residual.size(), 14)) / 4 < size) {
    return Status::Corruption("compressor state: a residual of " + std::to_string(residual.size()) +
                              " bytes for " + std::to_string(size) + " values");
  }
  FRUGAL_RETURN_IF_ERROR(reset(*c, static_cast<size_t>(size)));
  FRUGAL_RETURN_IF_ERROR(c->feedback->Deserialize(Span<const uint8_t>(residual.data(), residual.size())));
  FRUGAL_ASSIGN_OR_RETURN(compress::SparsifierState ss, compress::SparsifierState::Deserialize(
                                                            Span<const uint8_t>(sparsifier.data(), sparsifier.size())));
  return c->sparsifier->RestoreState(ss);
}

}  // namespace frugal::engine
