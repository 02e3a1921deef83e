// One field list per statistics struct, the sibling of field_list.h for
// what a run measures rather than what it is told. Each struct lists its
// fields once, next to its members:
//
//   struct PipelineStats {
//     double wait_s = 0;
//     ...
//     template <class V> static void VisitStats(V&& visit) {
//       visit(Stat("wait_s", "s", "compute thread blocked").Sum(), &PipelineStats::wait_s);
//       ...
//     }
//   };
//
// and every consumer walks that list: the metrics.jsonl records
// (StatsToJson, stat_json.h), the Python package's stats() dicts, the sum of counters over
// an elastic run's generations (AccumulateStats) and the metrics schema in
// the docs. A new statistic is one member and one line, and cannot be left
// out of any of them.
//
// Supported member types: double, int, int64_t, uint64_t.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace frugal {

// How a statistic combines over a window (or over the generations of a run):
// kSum adds (counters, seconds), kLast keeps the newest value (a setting, a
// count of workers), kMean is a mean over the window's steps (a per-step
// figure, a share), kMax keeps the largest.
enum class StatAggregate { kSum, kLast, kMean, kMax };

inline const char* AggregateName(StatAggregate a) {
  switch (a) {
    case StatAggregate::kSum: return "sum";
    case StatAggregate::kLast: return "last";
    case StatAggregate::kMean: return "mean";
    case StatAggregate::kMax: return "max";
  }
  return "?";
}

// Metadata of one statistic.
struct Stat {
  const char* key = "";   // snake_case; the JSON and Python key
  const char* unit = "";  // "s", "bytes", "values", "" for a plain number or share
  const char* help = "";
  StatAggregate aggregate = StatAggregate::kSum;

  Stat(const char* k, const char* u, const char* h) : key(k), unit(u), help(h) {}
  Stat& Sum() { aggregate = StatAggregate::kSum; return *this; }
  Stat& Last() { aggregate = StatAggregate::kLast; return *this; }
  Stat& Mean() { aggregate = StatAggregate::kMean; return *this; }
  Stat& Max() { aggregate = StatAggregate::kMax; return *this; }
};

// The keys of S's list, in list order.
template <class S>
std::vector<std::string> StatKeys() {
  std::vector<std::string> keys;
  S::VisitStats([&](const Stat& s, auto) { keys.emplace_back(s.key); });
  return keys;
}

// The metadata of S's list, in list order.
template <class S>
std::vector<Stat> StatList() {
  std::vector<Stat> list;
  S::VisitStats([&](const Stat& s, auto) { list.push_back(s); });
  return list;
}

// Combines `d` into `total` by each statistic's aggregate: kSum adds, kLast
// takes d's, kMax the larger. kMean has no meaning without weights and
// keeps d's (a struct of means is combined by whoever knows the weights).
template <class S>
void AccumulateStats(S* total, const S& d) {
  S::VisitStats([&](const Stat& st, auto member) {
    auto& to = total->*member;
    const auto& from = d.*member;
    switch (st.aggregate) {
      case StatAggregate::kSum: to += from; break;
      case StatAggregate::kMax: to = std::max(to, from); break;
      case StatAggregate::kLast:
      case StatAggregate::kMean: to = from; break;
    }
  });
}

}  // namespace frugal
