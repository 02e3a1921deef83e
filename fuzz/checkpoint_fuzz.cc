// libFuzzer target: checkpoint files (engine/checkpoint.h), which --resume
// reads from disk. Input: a selector byte, then either a whole checkpoint
// file (ParseCheckpoint: magic, checksum, sections) or the payload of its
// "pipeline" section (GradientPipeline::LoadState: settings, fp32 masters,
// error-feedback residuals, sparsifier and Adam state), which the checksum
// alone would almost never let the fuzzer reach. Seeds: make_checkpoint_seeds.
#include "frugal/engine/checkpoint.h"
#include "fuzz_input.h"
#include "pipeline_fixture.h"

namespace {

void File(const std::vector<uint8_t>& bytes) {
  auto sections = frugal::engine::ParseCheckpoint(bytes, "fuzz.ckpt");
  if (!sections.ok()) {
    FRUGAL_FUZZ_CHECK(sections.status().code() == frugal::Status::Code::kCorruption);
    return;
  }
  size_t total = 0;
  for (const auto& [name, body] : *sections) total += name.size() + body.size();
  FRUGAL_FUZZ_CHECK(total <= bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static frugal::fuzz::PipelineFixture* fixture = new frugal::fuzz::PipelineFixture();
  frugal::fuzz::Input in(data, size);
  switch (in.Byte() % 3) {
    case 0:
      File(in.RestAsBytes());
      break;
    case 1:
      (void)fixture->pipeline->LoadState(in.RestAsBytes(), /*residuals=*/true);
      break;
    default:
      (void)fixture->pipeline->LoadLocalState(in.RestAsBytes());
      break;
  }
  return 0;
}
