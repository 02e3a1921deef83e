#include "frugal/common/field_list.h"

#include <cmath>

namespace frugal {

std::string Field::Flag() const {
  std::string s = "--";
  for (const char* c = key; *c != '\0'; ++c) s += *c == '_' ? '-' : *c;
  return s;
}

std::string FormatDouble(double v) {
  char buf[40];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  return buf;
}

std::string DescribeRange(const Field& f) {
  const bool has_lo = std::isfinite(f.lo);
  const bool has_hi = std::isfinite(f.hi);
  if (has_lo && has_hi) {
    return std::string("in ") + (f.lo_open ? "(" : "[") + FormatDouble(f.lo) + ", " + FormatDouble(f.hi) +
           (f.hi_open ? ")" : "]");
  }
  if (has_lo) return std::string(f.lo_open ? "> " : ">= ") + FormatDouble(f.lo);
  if (has_hi) return std::string(f.hi_open ? "< " : "<= ") + FormatDouble(f.hi);
  return "finite";
}

Status CheckNumber(const Field& f, double v) {
  const bool ok = std::isfinite(v) && (f.lo_open ? v > f.lo : v >= f.lo) && (f.hi_open ? v < f.hi : v <= f.hi);
  if (ok) return Status::Ok();
  std::string msg = f.Flag() + " must be " + DescribeRange(f) + ", got " + FormatDouble(v);
  if (std::isfinite(v) && v > f.hi && f.why_max[0] != '\0') msg += std::string(" (") + f.why_max + ")";
  return Status::InvalidArgument(msg);
}

}  // namespace frugal
