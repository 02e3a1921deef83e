// libFuzzer target: the cluster scheduler's input files (sched), all read
// by path: a workload (LoadWorkload), a throughput table
// (LoadThroughputTable), a Philly trace (LoadPhillyTrace) and planner-backed
// applications (LoadPlannerApplications). Input: a selector byte, then the
// file. Accepted rows must be finite and in range.
#include <cmath>

#include "frugal/sched/planner_throughput.h"
#include "frugal/sched/throughput_model.h"
#include "frugal/sched/workload.h"
#include "frugal/sched/workload_generator.h"
#include "fuzz_input.h"

namespace {

using namespace frugal::sched;

void Workload(const std::string& path) {
  auto jobs = LoadWorkload(path);
  if (!jobs.ok()) return;
  for (const JobSpec& j : *jobs) {
    FRUGAL_FUZZ_CHECK(std::isfinite(j.submit_time) && j.submit_time >= 0);
    FRUGAL_FUZZ_CHECK(j.num_replicas >= 1 && j.batch_size >= 1);
  }
}

void Philly(const std::string& path) {
  auto jobs = LoadPhillyTrace(path);
  if (!jobs.ok()) return;
  for (const PhillyJob& j : *jobs) {
    FRUGAL_FUZZ_CHECK(std::isfinite(j.submit_time) && std::isfinite(j.duration) && std::isfinite(j.gpu_time));
    FRUGAL_FUZZ_CHECK(j.duration > 0 && j.num_gpus >= 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const uint8_t which = in.Byte() % 4;
  const std::string path = frugal::fuzz::TempFile(in.RestAsString(), ".csv");
  ApplicationCatalog catalog;
  switch (which) {
    case 0: Workload(path); break;
    case 1: (void)LoadThroughputTable(path, &catalog); break;
    case 2: Philly(path); break;
    default: (void)LoadPlannerApplications(path, &catalog); break;
  }
  return 0;
}
