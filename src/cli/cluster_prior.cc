#include "cluster_prior.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "frugal/common/hash.h"

#if defined(FRUGAL_WITH_TORCH)
#include "frugal/engine/run_config.h"
#endif
#if defined(FRUGAL_HAVE_SIM) && defined(FRUGAL_WITH_TORCH)
#include "frugal/sim/frugal_pipeline.h"
#include "frugal/sim/workload.h"
#endif

namespace frugal::cli {
namespace {

// Keys of a `frugal train` configuration that leave a step's speed alone:
// the fields marked SpeedNeutral. A build without LibTorch has no `frugal
// train` and so no such configurations: every key counts there.
const std::set<std::string>& SpeedNeutralKeys() {
#if defined(FRUGAL_WITH_TORCH)
  static const std::set<std::string> keys = [] {
    std::vector<std::string> list = engine::SpeedNeutralKeys();
    return std::set<std::string>(list.begin(), list.end());
  }();
#else
  static const std::set<std::string> keys;
#endif
  return keys;
}

void Flatten(const toml::table& table, const std::string& prefix, std::vector<std::string>* out) {
  for (const auto& [key, value] : table) {
    const std::string name = prefix + key;
    if (prefix.empty() && SpeedNeutralKeys().count(name)) continue;
    if (value.is_table()) {
      Flatten(value.as_table(), name + ".", out);
    } else {
      std::ostringstream text;
      text << value;
      out->push_back(name + "=" + text.str());
    }
  }
}

}  // namespace

std::string ProfileOfConfig(const toml::table& config) {
  std::vector<std::string> items;
  Flatten(config, "", &items);
  std::sort(items.begin(), items.end());
  // FNV-1a from the seed the profiles were first written with, so that
  // stored profiles keep their names.
  uint64_t h = 1469598103934665603ull;
  for (const std::string& item : items) h = Fnv1a64(item + "\n", h);
  std::string model = "train";
  if (auto it = config.find("model"); it != config.end() && it->second.is_string()) model = it->second.as_string();
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(h));
  return model.substr(0, 64) + "-" + digest;
}

#if defined(FRUGAL_HAVE_SIM) && defined(FRUGAL_WITH_TORCH)
namespace {

class PlannerPrior final : public cluster::SpeedPrior {
 public:
  PlannerPrior(engine::RunConfig config, sim::ModelSpec model, sim::HardwareSpec hardware)
      : config_(std::move(config)), model_(std::move(model)), hardware_(std::move(hardware)) {}

  double SamplesPerSecond(int workers) const override {
    if (workers <= 0) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = cache_.emplace(workers, 0.0);
    if (inserted) {
      Result<sim::FrugalPrediction> p = sim::PredictFrugalIteration(JobAt(workers), hardware_);
      it->second = p.ok() ? p->samples_per_s : 0;
    }
    return it->second;
  }

 private:
  sim::FrugalJob JobAt(int workers) const {
    engine::RunConfig c = config_;
    c.distributed.workers = workers;
    const engine::DistributedOptions& d = c.distributed;
    sim::FrugalJob job;
    job.model = model_;
    job.batch_per_worker =
        c.train.global_batch > 0 ? std::max<int64_t>(1, c.train.global_batch / workers) : c.train.batch_size;
    job.clusters = {sim::ClusterSpec{workers}};
    job.density = engine::DensityOf(d);
    job.bytes_per_selected = engine::WireBytesPerValue(d);
    job.merged_bytes_per_selected = engine::MergedWireBytesPerValue(d);
    job.staleness = d.staleness;
    job.pipeline_threads = engine::ResolveCpuThreads(c, workers);
    job.shared_cpu = hardware_.is_cpu;
    job.workers_per_host = workers;
    if (engine::IsLocalUpdates(engine::SyncOf(c))) {
      job.local_steps = static_cast<int>(d.local_steps);
      job.local_fragments = static_cast<int>(engine::LocalFragmentsOf(d));
      job.local_overlap = d.local_overlap;
      job.site_replicas = engine::SyncOf(c) == engine::SyncMode::kSite;
      job.site_bytes_per_value = compress::BytesPerValue(d.site_values);
    }
    return job;
  }

  const engine::RunConfig config_;
  const sim::ModelSpec model_;
  const sim::HardwareSpec hardware_;
  mutable std::mutex mu_;
  mutable std::map<int, double> cache_;  // GUARDED_BY(mu_): predictions by worker count.
};

}  // namespace

cluster::SpeedPriorFactory PlannerSpeedPrior(const sim::HardwareSpec& hardware, bool elastic) {
  return [hardware, elastic](const cluster::JobSubmission& job) -> std::shared_ptr<const cluster::SpeedPrior> {
    // A command job's program is not a configuration the planner can time:
    // its speed is learned from its metrics (Note [Live throughput prior]).
    if (job.IsCommand()) return nullptr;
    toml::value root;
    try {
      std::istringstream in(job.config_toml);
      root = toml::parse(in, "job");
    } catch (const std::exception&) {
      return nullptr;
    }
    if (!root.is_table()) return nullptr;
    engine::RunConfig config;
    config.elastic.elastic = elastic;
    for (const auto& [key, value] : root.as_table()) {
      if (value.is_table() || value.is_array()) return nullptr;
      std::ostringstream text;
      if (value.is_string()) {
        text << value.as_string().str;
      } else {
        text << value;
      }
      if (!engine::SetOption(&config, key, text.str()).ok()) return nullptr;
    }
    Result<sim::ModelSpec> model = sim::BuiltinModel(config.train.model);
    if (!model.ok()) return nullptr;
    return std::make_shared<PlannerPrior>(std::move(config), std::move(*model), hardware);
  };
}
#endif

}  // namespace frugal::cli
