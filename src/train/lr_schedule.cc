#include "frugal/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace frugal::train {

Result<LrSchedule> LrSchedule::Create(const LrScheduleOptions& o) {
  if (!(o.base_lr > 0) || !std::isfinite(o.base_lr)) return Status::InvalidArgument("lr must be a positive number");
  if (o.warmup_steps < 0) return Status::InvalidArgument("warmup steps must be >= 0");
  if (o.kind == LrScheduleKind::kStep && o.step_size <= 0) return Status::InvalidArgument("lr step size must be > 0");
  if (o.min_lr < 0 || o.min_lr > o.base_lr) return Status::InvalidArgument("min lr must be in [0, lr]");
  return LrSchedule(o);
}

double LrSchedule::At(int64_t step) const {
  const LrScheduleOptions& o = options_;
  if (step < o.warmup_steps) return o.base_lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (o.kind == LrScheduleKind::kConstant) return o.base_lr;
  if (o.kind == LrScheduleKind::kStep) return o.base_lr * std::pow(o.gamma, static_cast<double>((step - o.warmup_steps) / o.step_size));
  // cosine
  int64_t span = std::max<int64_t>(1, o.total_steps - o.warmup_steps);
  double t = std::min(1.0, static_cast<double>(step - o.warmup_steps) / static_cast<double>(span));
  return o.min_lr + 0.5 * (o.base_lr - o.min_lr) * (1.0 + std::cos(M_PI * t));
}

}  // namespace frugal::train
