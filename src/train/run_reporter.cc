#include "frugal/train/run_reporter.h"

#include <algorithm>

#include "frugal/common/env.h"
#include "frugal/common/stat_json.h"

namespace frugal::train {

RunReporter::RunReporter(const RunReporterOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : &Env::Default()),
      start_(clock_->Now()),
      progress_(options.progress_out, options.log_every, (options.quiet || !options.lead) ? 0 : -1) {}

Result<std::unique_ptr<RunReporter>> RunReporter::Create(const RunReporterOptions& options) {
  std::unique_ptr<RunReporter> r(new RunReporter(options));
  if (options.lead) {
    FRUGAL_ASSIGN_OR_RETURN(r->metrics_, JsonlWriter::Open(options.metrics_path, /*truncate=*/!options.append));
  }
  return r;
}

double RunReporter::Elapsed() const {
  return options_.elapsed_offset_s + Seconds(clock_->Now() - start_);
}

void RunReporter::AddStep(double loss, double samples, double compute_s) {
  window_loss_ += loss;
  window_samples_ += samples;
  window_compute_ += compute_s;
  ++window_steps_;
}

bool RunReporter::WindowDue(int64_t steps_done) const {
  return steps_done % options_.log_every == 0 || steps_done == options_.total_steps;
}

RunReporter::Window RunReporter::window() const {
  Window w;
  w.steps = window_steps_;
  const double steps = static_cast<double>(std::max<int64_t>(1, window_steps_));
  w.loss = window_loss_ / steps;
  w.samples = window_samples_;
  w.compute_s = window_compute_ / steps;
  w.span_s = std::max(1e-9, Elapsed() - window_start_s_);
  return w;
}

ProgressState RunReporter::State(int64_t step, int64_t epoch) const {
  ProgressState ps;
  ps.step = step;
  ps.total_steps = options_.total_steps;
  ps.epoch = epoch;
  ps.loss = last_loss_;
  ps.test_accuracy = last_accuracy_;
  ps.elapsed_s = Elapsed();
  ps.samples_per_s = last_samples_per_s_;
  return ps;
}

Status RunReporter::CloseWindow(int64_t step, int64_t epoch, double lr, const nlohmann::json& extra,
                                const std::string& progress_extra) {
  const Window w = window();
  last_loss_ = w.loss;
  last_samples_per_s_ = w.samples / w.span_s;
  WindowRecord r;
  r.wall_time_s = Elapsed();
  r.train_time_s = r.wall_time_s - excluded_s_;
  r.step = step;
  r.epoch = epoch;
  r.loss = w.loss;
  r.lr = lr;
  r.samples_per_s = last_samples_per_s_;
  if (metrics_) {
    nlohmann::json rec = StatsToJson(r);
    for (const auto& [k, v] : extra.items()) rec[k] = v;
    FRUGAL_RETURN_IF_ERROR(metrics_->Write(rec));
  }
  if (printing()) {
    ProgressState ps = State(step, epoch);
    ps.loss = r.loss;
    ps.samples_per_s = r.samples_per_s;
    ps.elapsed_s = r.wall_time_s;
    ps.extra = progress_extra;
    progress_.Update(ps);
  }
  window_start_s_ = Elapsed();
  window_steps_ = 0;
  window_loss_ = 0;
  window_samples_ = 0;
  window_compute_ = 0;
  return Status::Ok();
}

void RunReporter::Redraw(int64_t step, int64_t epoch) {
  if (!printing()) return;
  ProgressState ps = State(step, epoch);
  const Window w = window();
  if (w.steps > 0) {
    ps.loss = w.loss;
    ps.samples_per_s = w.samples / w.span_s;
  }
  progress_.Update(ps);
}

Status RunReporter::Evaluated(int64_t step, int64_t epoch, double accuracy, bool record, const nlohmann::json& extra) {
  last_accuracy_ = accuracy;
  if (printing()) progress_.Evaluated(State(step, epoch));
  if (record && metrics_) {
    const double now = Elapsed();
    nlohmann::json rec = {{"wall_time_s", now},
                          {"train_time_s", now - excluded_s_},
                          {"step", step},
                          {"epoch", epoch},
                          {"test_accuracy", accuracy}};
    for (const auto& [k, v] : extra.items()) rec[k] = v;
    FRUGAL_RETURN_IF_ERROR(metrics_->Write(rec));
  }
  return Status::Ok();
}

void RunReporter::Note(const std::string& text) {
  if (printing()) progress_.Note(text);
}

Status RunReporter::Write(const nlohmann::json& record) {
  if (!metrics_) return Status::Ok();
  return metrics_->Write(record);
}

void RunReporter::Finish() {
  if (printing()) progress_.Finish();
}

}  // namespace frugal::train
