// Writes the checkpoint target's seed corpus: real checkpoint files and
// pipeline-state sections from a pipeline that ran a few steps.
// Usage: make_checkpoint_seeds OUT_DIR   (each seed starts with the selector byte)
#include <cstdio>
#include <fstream>
#include <string>

#include "frugal/engine/checkpoint.h"
#include "pipeline_fixture.h"

namespace {

void Write(const std::string& path, uint8_t selector, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(selector));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  frugal::fuzz::PipelineFixture f;
  auto& p = *f.pipeline;
  auto noop = [](size_t, frugal::Span<const float>) {};
  // SaveState is taken right after BeginIteration(t), before t's gradients.
  using Parts = frugal::engine::GradientPipeline::StateParts;
  frugal::Result<std::vector<uint8_t>> all = frugal::Status::Internal("not saved");
  frugal::Result<std::vector<uint8_t>> local = frugal::Status::Internal("not saved");
  for (int64_t t = 0; t < 3; ++t) {
    if (!p.BeginIteration(t, noop).ok()) return 1;
    if (t == 2) {
      all = p.SaveState(Parts::kAll);
      local = p.SaveState(Parts::kLocal);
    }
    for (size_t b = 0; b < p.num_buckets(); ++b) {
      auto g = p.GradBuffer(b, t);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i * 7 + t) % 11) - 5.0f;
      if (!p.Submit(b, t).ok()) return 1;
    }
  }
  if (!all.ok() || !local.ok()) return 1;
  Write(dir + "/pipeline_state", 1, *all);
  Write(dir + "/local_state", 2, *local);
  frugal::engine::ByteWriter meta;
  meta.I64(3);
  meta.F64(0.25);
  const std::string file = dir + "/rank-0.ckpt";
  if (!frugal::engine::WriteCheckpointFile(file, {{"pipeline", *all}, {"meta", meta.Take()}}).ok()) return 1;
  Write(dir + "/checkpoint_file", 0, ReadAll(file));
  std::remove(file.c_str());
  if (!frugal::engine::WriteCheckpointFile(file, {}).ok()) return 1;
  Write(dir + "/empty_checkpoint", 0, ReadAll(file));
  std::remove(file.c_str());
  return p.Finish(noop).ok() ? 0 : 1;
}
