// Validation of the Frugal-pipeline model (frugal_pipeline.h) against
// measured iteration times of Frugal's own runs (`frugal plan
// frugal-validate`), e.g. from the shaped-network testbed.
//
// CSV: one header line naming the columns (order free, case-insensitive, BOM
// and leading '#' comment lines tolerated):
//   model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms)
// `clusters` is the worker count per cluster joined by '+', e.g. "4" (flat)
// or "2+2"; bandwidths are per worker inside a cluster and per cluster uplink
// between clusters, in Mbit/s, or "unlimited". Optional columns: "staleness"
// (default 1), "compute ms per sample" (measured compute, see FrugalJob) and
// "merged density" (the measured density of the merged update: FrugalJob::measured_merged_density),
// "local steps" (FrugalJob::local_steps, 0 = the step mode; the fragments
// follow frugal train's rule) and "bytes per value" (the measured wire bytes
// per value sent, e.g. with deflate; sets bytes_per_selected).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "frugal/common/status.h"
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/hardware.h"

namespace frugal::sim {

struct FrugalMeasurement {
  int line = 0;
  FrugalJob job;  // Everything but the hardware.
  double iteration_ms = 0;
  bool measured_bytes = false;  // The row set job.bytes_per_selected ("bytes per value").
};

// "unlimited" bandwidth stands for this many Mbit/s (a veth pair without a
// rate limit moves several Gbit/s).
constexpr double kUnlimitedMbps = 10000;

// Corruption errors name the file and line.
Result<std::vector<FrugalMeasurement>> ParseFrugalMeasurementsCsv(const std::string& text,
                                                                 const std::string& source_name);
Result<std::vector<FrugalMeasurement>> LoadFrugalMeasurementsCsv(const std::string& path);

struct FrugalRowResult {
  FrugalMeasurement row;
  FrugalPrediction prediction;
  double predicted_ms = 0;
  double error_pct = 0;
};

struct FrugalValidationReport {
  std::vector<FrugalRowResult> rows;
  double mape_pct = 0;
};

// `shared_cpu` is applied to every row (see FrugalJob::shared_cpu).
Result<FrugalValidationReport> ValidateFrugal(const std::vector<FrugalMeasurement>& rows, const HardwareSpec& hw,
                                              bool shared_cpu);

}  // namespace frugal::sim
