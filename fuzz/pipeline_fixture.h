// A one-rank GradientPipeline (two small buckets, Adam, staleness 1) for the
// checkpoint target and its seed writer: the pipeline-state section of a
// checkpoint only parses against a pipeline of the same shape.
#pragma once

#include <memory>
#include <vector>

#include "frugal/comm/transport/inproc_transport.h"
#include "frugal/comm/transport/topology.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::fuzz {

struct PipelineFixture {
  comm::InProcHub hub{comm::Topology::SingleCluster(1)};
  std::unique_ptr<comm::Transport> transport;
  std::unique_ptr<engine::GradientPipeline> pipeline;

  // Traps if the pipeline cannot be built: the target could not run at all.
  PipelineFixture() {
    auto t = hub.CreateTransport(0);
    if (!t.ok()) __builtin_trap();
    transport = std::move(*t);
    engine::PipelineOptions o;
    o.sparsifier = compress::SparsifierKind::kTopk;
    o.density = 0.25;
    o.wire = {compress::ValueEncoding::kFp16, compress::IndexEncoding::kDeltaVarint};
    o.staleness = 1;
    o.cpu_threads = 1;
    o.seed = 1;
    o.optimizer.kind = "adam";
    o.lr_at = [](int64_t) { return 0.01; };
    std::vector<engine::BucketSpec> specs(2);
    specs[0].name = "a";
    specs[0].initial.assign(40, 0.5f);
    specs[1].name = "b";
    specs[1].initial.assign(23, -1.0f);
    auto p = engine::GradientPipeline::Create(o, specs, transport.get());
    if (!p.ok()) __builtin_trap();
    pipeline = std::move(*p);
  }
};

}  // namespace frugal::fuzz
