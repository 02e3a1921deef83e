// StatsToJson: a statistics struct's list (stat_list.h) as the fields of a
// JSON object, for the metrics.jsonl records. Apart from stat_list.h so
// that the structs' headers stay free of the JSON library.
#pragma once

#include <nlohmann/json.hpp>

#include "frugal/common/stat_list.h"

namespace frugal {

// Every statistic of `s` into the JSON object `out` (existing keys are
// replaced).
template <class S>
void StatsToJson(const S& s, nlohmann::json* out) {
  S::VisitStats([&](const Stat& st, auto member) { (*out)[st.key] = s.*member; });
}

template <class S>
nlohmann::json StatsToJson(const S& s) {
  nlohmann::json out = nlohmann::json::object();
  StatsToJson(s, &out);
  return out;
}

}  // namespace frugal
