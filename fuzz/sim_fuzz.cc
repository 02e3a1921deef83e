// libFuzzer target: the planner's input files (sim). Input: a selector
// byte, then the file: a hardware TOML (ParseHardwareToml), a measurement
// table (ParseMeasurementsCsv), a Frugal measurement table
// (ParseFrugalMeasurementsCsv), a profile database (ProfileDatabase::ParseCsv)
// or a pipeline schedule name. Whatever is accepted must be finite and in
// range: a NaN read from a file would silently mislead a prediction.
#include <cmath>

#include "frugal/sim/cost_model.h"
#include "frugal/sim/frugal_validation.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/pipeline_schedule.h"
#include "frugal/sim/validation.h"
#include "fuzz_input.h"

namespace {

using namespace frugal::sim;

void Hardware(const std::string& text) {
  auto hw = ParseHardwareToml(text, "fuzz.toml");
  if (!hw.ok()) return;
  // Printing it again must give a file that parses to the same description.
  auto again = ParseHardwareToml(HardwareToToml(*hw), "again.toml");
  FRUGAL_FUZZ_CHECK(again.ok());
  FRUGAL_FUZZ_CHECK(HardwareToToml(*again) == HardwareToToml(*hw));
}

void Measurements(const std::string& text) {
  auto rows = ParseMeasurementsCsv(text, "fuzz.csv");
  if (!rows.ok()) return;
  for (const MeasuredRow& r : *rows) {
    FRUGAL_FUZZ_CHECK(std::isfinite(r.iteration_ms) && r.iteration_ms > 0);
    FRUGAL_FUZZ_CHECK(r.gpus > 0 && r.tensor_parallel > 0 && r.data_parallel > 0 && r.pipeline_parallel > 0);
  }
}

void FrugalMeasurements(const std::string& text) {
  auto rows = ParseFrugalMeasurementsCsv(text, "fuzz.csv");
  if (!rows.ok()) return;
  for (const FrugalMeasurement& r : *rows) FRUGAL_FUZZ_CHECK(std::isfinite(r.iteration_ms) && r.iteration_ms >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const uint8_t which = in.Byte() % 5;
  const std::string text = in.RestAsString();
  switch (which) {
    case 0: Hardware(text); break;
    case 1: Measurements(text); break;
    case 2: FrugalMeasurements(text); break;
    case 3: (void)ProfileDatabase::ParseCsv(text, "fuzz.csv"); break;
    default: (void)ParseSchedule(text); break;
  }
  return 0;
}
