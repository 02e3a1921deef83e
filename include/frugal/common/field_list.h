// One field list per options struct: each module writes
//
//   template <class Options, class V> void VisitFields(Options& o, V&& visit) {
//     visit(Field("lr", "Optimizer", "Peak learning rate").Positive(), o.lr);
//     ...
//   }
//
// and every front end is generated from it: CLI flags (src/cli), TOML
// reading and writing, Python keyword arguments, range validation and the
// digest of the options that must agree across workers. A new option is
// added in one place and cannot be left out of any of them.
//
// Supported field types: bool, int, int64_t, uint64_t, double, std::string
// and enums with an EnumNames table (common/enum_names.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "frugal/common/enum_names.h"
#include "frugal/common/status.h"
#include "frugal/common/hash.h"

namespace frugal {

// Whether every worker of a distributed run must use the same value (the
// value goes into the configuration digest) or each worker has its own.
enum class FieldScope { kShared, kPerWorker };

// Metadata of one option. Numbers must be finite and inside [lo, hi] (or
// the open ends); strings may be required non-empty.
struct Field {
  const char* key = "";    // snake_case; the flag is --kebab-case
  const char* group = "";  // help section
  const char* help = "";
  FieldScope scope = FieldScope::kShared;
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  bool non_empty = false;
  const char* why_max = "";  // said when the upper bound is hit
  // The option leaves a training step's speed alone (learning rates, seeds,
  // logging, time-outs, keys): the cluster's speed profiles ignore it.
  bool speed_neutral = false;

  Field(const char* k, const char* g, const char* h) : key(k), group(g), help(h) {}
  Field& PerWorker() { scope = FieldScope::kPerWorker; return *this; }
  Field& Min(double v) { lo = v; lo_open = false; return *this; }
  Field& Above(double v) { lo = v; lo_open = true; return *this; }
  Field& Max(double v, const char* why = "") { hi = v; hi_open = false; why_max = why; return *this; }
  Field& Below(double v) { hi = v; hi_open = true; return *this; }
  Field& Positive() { return Above(0); }
  Field& NonNegative() { return Min(0); }
  Field& UnitInterval() { return Min(0).Below(1); }  // [0, 1)
  Field& NonEmpty() { non_empty = true; return *this; }
  Field& SpeedNeutral() { speed_neutral = true; return *this; }

  std::string Flag() const;  // "--kebab-case"
};

// "(0, 1]", ">= 0", "> 0", "in [1, 256]".
std::string DescribeRange(const Field& f);
// Ok, or InvalidArgument "--density must be in (0, 1], got nan".
Status CheckNumber(const Field& f, double value);
// Shortest decimal text that parses back to exactly `v` (up to 17 digits).
std::string FormatDouble(double v);

// Text <-> value, per type. Parse errors are InvalidArgument naming the flag.
template <class T>
std::string FieldToText(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_enum_v<T>) {
    return NameOf(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return FormatDouble(v);
  } else {
    return std::to_string(v);
  }
}

template <class T>
Status FieldFromText(const Field& f, const std::string& text, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (text == "true" || text == "1") { *out = true; return Status::Ok(); }
    if (text == "false" || text == "0") { *out = false; return Status::Ok(); }
    return Status::InvalidArgument(f.Flag() + ": '" + text + "' is not true or false");
  } else if constexpr (std::is_same_v<T, std::string>) {
    *out = text;
    return Status::Ok();
  } else if constexpr (std::is_enum_v<T>) {
    auto e = ParseEnum<T>(text);
    if (!e) return Status::InvalidArgument(f.Flag() + ": unknown value '" + text + "' (known: " + EnumChoices<T>() + ")");
    *out = *e;
    return Status::Ok();
  } else {
    char* end = nullptr;
    errno = 0;
    if constexpr (std::is_floating_point_v<T>) {
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0') return Status::InvalidArgument(f.Flag() + ": '" + text + "' is not a number");
      *out = v;
    } else if constexpr (std::is_unsigned_v<T>) {
      unsigned long long v = std::strtoull(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0 || text[0] == '-' || v > std::numeric_limits<T>::max()) {
        return Status::InvalidArgument(f.Flag() + ": '" + text + "' is not a non-negative integer");
      }
      *out = static_cast<T>(v);
    } else {
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0 || v < std::numeric_limits<T>::min() ||
          v > std::numeric_limits<T>::max()) {
        return Status::InvalidArgument(f.Flag() + ": '" + text + "' is not an integer");
      }
      *out = static_cast<T>(v);
    }
    return Status::Ok();
  }
}

// Range and finiteness of one field's value.
template <class T>
Status CheckField(const Field& f, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (f.non_empty && v.empty()) return Status::InvalidArgument(f.Flag() + " must not be empty");
    return Status::Ok();
  } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    return CheckNumber(f, static_cast<double>(v));
  } else {
    return Status::Ok();
  }
}

// Exact, type-tagged text of a value for digests: doubles as their bit
// pattern, so 1e-7 and 2e-7 (or two values 1 ulp apart) differ.
template <class T>
std::string FieldDigestText(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%a", static_cast<double>(v));
    return buf;
  } else {
    return FieldToText(v);
  }
}

}  // namespace frugal
