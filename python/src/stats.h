// Statistics structs (common/stat_list.h) as Python dicts: one generic
// binding that walks a struct's field list, so that no stats() lists members
// by hand.
#pragma once

#include "bindings.h"
#include "frugal/common/stat_list.h"

namespace frugal::python {

// {key: value} of every statistic of `s`, in list order.
template <class S>
py::dict StatsDict(const S& s) {
  py::dict d;
  S::VisitStats([&](const Stat& st, auto member) { d[st.key] = s.*member; });
  return d;
}

// [{key, unit, help, aggregate}] of S's list, for frugal._C.stat_fields().
template <class S>
py::list StatSchema() {
  py::list out;
  for (const Stat& st : StatList<S>()) {
    py::dict d;
    d["key"] = st.key;
    d["unit"] = st.unit;
    d["help"] = st.help;
    d["aggregate"] = AggregateName(st.aggregate);
    out.append(d);
  }
  return out;
}

}  // namespace frugal::python
