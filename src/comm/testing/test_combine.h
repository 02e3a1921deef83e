// Combine functions and inputs shared by the exchange tests and the
// multi-process test peer.
#pragma once

#include <cstring>
#include <vector>

#include "frugal/comm/transport/transport.h"

namespace frugal::comm::testing {

// Element-wise sum of uint32 vectors: output size = input size, like a
// dense gradient, so byte counts are predictable.
inline Result<Bytes> SumU32(std::vector<Bytes> parts) {
  Bytes out(parts[0].size(), 0);
  for (const Bytes& p : parts) {
    if (p.size() != out.size()) return Status::InvalidArgument("SumU32: size mismatch");
    for (size_t i = 0; i + 4 <= p.size(); i += 4) {
      uint32_t a, b;
      std::memcpy(&a, &out[i], 4);
      std::memcpy(&b, &p[i], 4);
      a += b;
      std::memcpy(&out[i], &a, 4);
    }
  }
  return out;
}

inline Bytes U32s(const std::vector<uint32_t>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Rank r's contribution in iteration `it`, and the sum over n ranks.
inline Bytes ExchangeInput(int it, int rank) {
  return U32s({static_cast<uint32_t>(it), static_cast<uint32_t>(rank), 1u << rank});
}
inline Bytes ExchangeExpected(int it, int n) {
  return U32s({static_cast<uint32_t>(it * n), static_cast<uint32_t>(n * (n - 1) / 2), (1u << n) - 1});
}

}  // namespace frugal::comm::testing
