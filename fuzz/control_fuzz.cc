// libFuzzer target: the engine's control messages that cross the network,
// WorkerTelemetry (all-gathered) and Decision (broadcast by rank 0), both
// JSON. Input: a selector byte, then the message. An accepted message must
// survive a serialise/deserialise round trip unchanged.
#include "frugal/engine/adaptation.h"
#include "fuzz_input.h"

namespace {

using frugal::engine::Decision;
using frugal::engine::WorkerTelemetry;

void Telemetry(const std::vector<uint8_t>& bytes) {
  auto t = WorkerTelemetry::Deserialize(bytes);
  if (!t.ok()) return;
  auto again = WorkerTelemetry::Deserialize(t->Serialize());
  FRUGAL_FUZZ_CHECK(again.ok());
  FRUGAL_FUZZ_CHECK(again->Serialize() == t->Serialize());
}

void DecisionMessage(const std::vector<uint8_t>& bytes) {
  auto d = Decision::Deserialize(bytes);
  if (!d.ok()) return;
  FRUGAL_FUZZ_CHECK(d->density > 0 && d->density <= 1 && d->lr_scale > 0);
  for (int64_t b : d->batch_sizes) FRUGAL_FUZZ_CHECK(b > 0);
  auto again = Decision::Deserialize(d->Serialize());
  FRUGAL_FUZZ_CHECK(again.ok());
  FRUGAL_FUZZ_CHECK(again->Serialize() == d->Serialize());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const uint8_t which = in.Byte();
  if (which % 2 == 0) {
    Telemetry(in.RestAsBytes());
  } else {
    DecisionMessage(in.RestAsBytes());
  }
  return 0;
}
