#include <algorithm>
#include <cmath>

#include "frugal/sched/throughput_model.h"

namespace frugal::sched {

Application::Application(std::string name, std::shared_ptr<const ThroughputModel> throughput,
                         std::shared_ptr<const ConvergenceModel> convergence)
    : name_(std::move(name)), throughput_(std::move(throughput)), convergence_(std::move(convergence)) {}

double Application::ProgressRate(const Shape& shape, int global_batch, int epoch) const {
  if (shape.empty()) return 0;
  double step = throughput_->StepTime(shape, global_batch);
  if (!(step > 0) || !std::isfinite(step)) return 0;
  int e = std::min(std::max(epoch, 0), convergence_->NumEpochs() - 1);
  return convergence_->StepGain(global_batch, e) / step;
}

Status ApplicationCatalog::Add(std::shared_ptr<const Application> app) {
  if (Find(app->name()) != nullptr) {
    return Status::InvalidArgument("application '" + app->name() + "' defined twice");
  }
  apps_.push_back(std::move(app));
  return Status::Ok();
}

const Application* ApplicationCatalog::Find(const std::string& name) const {
  for (const auto& a : apps_) {
    if (a->name() == name) return a.get();
  }
  return nullptr;
}

std::vector<std::string> ApplicationCatalog::Names() const {
  std::vector<std::string> names;
  for (const auto& a : apps_) names.push_back(a->name());
  return names;
}

}  // namespace frugal::sched
