// Gradient dump files read by frugal_kernels_bench (format in docs/design/kernels.md):
//   "FRGD" | u32 version (1) | u32 tensor count |
//   per tensor: u32 name length | name bytes | u64 element count | float32 data
// All little-endian. Written by frugal_dump_grads (or any trainer).
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::bench {

struct NamedGradient {
  std::string name;
  std::vector<float> values;
};

Status WriteGradFile(const std::string& path, const std::vector<NamedGradient>& grads);
Result<std::vector<NamedGradient>> ReadGradFile(const std::string& path);

}  // namespace frugal::bench
