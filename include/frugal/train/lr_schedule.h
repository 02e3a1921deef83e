// Learning-rate schedules: linear warm-up followed by constant, cosine or
// step decay. A pure function of the step, so every worker computes the same
// rate without talking, and a resumed run continues exactly.
#pragma once

#include <cstdint>
#include <string>

#include "frugal/common/enum_names.h"
#include "frugal/common/status.h"

namespace frugal::train {

enum class LrScheduleKind { kConstant, kCosine, kStep };

struct LrScheduleOptions {
  double base_lr = 0.05;
  LrScheduleKind kind = LrScheduleKind::kCosine;
  int64_t warmup_steps = 100;   // linear ramp from base_lr/warmup_steps to base_lr
  int64_t total_steps = 0;      // cosine: decays to min_lr at total_steps
  double min_lr = 0.0;          // cosine floor
  int64_t step_size = 1000;     // step: multiply by gamma every step_size steps
  double gamma = 0.1;
};

class LrSchedule {
 public:
  static Result<LrSchedule> Create(const LrScheduleOptions& options);
  // Learning rate for 0-based optimiser step `step`.
  double At(int64_t step) const;

 private:
  explicit LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {}
  LrScheduleOptions options_;
};

}  // namespace frugal::train

template <>
struct frugal::EnumNames<frugal::train::LrScheduleKind> {
  static constexpr std::pair<train::LrScheduleKind, const char*> kTable[] = {
      {train::LrScheduleKind::kConstant, "constant"},
      {train::LrScheduleKind::kCosine, "cosine"},
      {train::LrScheduleKind::kStep, "step"}};
};
