// frugal._C.stat_fields(): the statistics' field lists, for the tests that
// compare stats() and the metrics records with them and for the metrics
// table of docs/guide/python.md.
#include "stats.h"

#include "frugal/engine/compressed_allreduce.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/engine/pipeline_record.h"
#include "frugal/train/run_reporter.h"

namespace frugal::python {

void BindStats(py::module_& m) {
  m.def("stat_fields", [] {
    py::dict d;
    // A window record of metrics.jsonl: the reporter's fields, then the
    // synchronisation's.
    py::list window = StatSchema<train::WindowRecord>();
    for (const auto& item : StatSchema<engine::PipelineWindow>()) window.append(item);
    d["window"] = window;
    d["pipeline"] = StatSchema<engine::PipelineStats>();
    d["allreduce"] = StatSchema<engine::CompressedAllReduceStats>();
    return d;
  }, "The statistics' field lists: {'window': metrics.jsonl window records, 'pipeline': a model's stats(), "
     "'allreduce': CompressedAllReduce.stats()}, each [{key, unit, help, aggregate}]");
}

}  // namespace frugal::python
