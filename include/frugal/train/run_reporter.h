// RunReporter: what a training loop reports, in one place for the
// single-process Trainer and the distributed Worker: the metrics window
// (mean loss, samples/s since the last record), runs/<run>/metrics.jsonl,
// and the progress line. Torch-free.
//
// Per step: AddStep(loss, samples, compute_s); when WindowDue(step),
// CloseWindow(...) writes one record and redraws the progress line.
// Evaluations, decisions and the final record go through Evaluated, Note and
// Write. A reporter that is not the lead (ranks > 0) prints and writes
// nothing but still keeps the window, so every rank can read it.
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/common/clock.h"
#include "frugal/common/jsonl_writer.h"
#include "frugal/common/stat_list.h"
#include "frugal/common/status.h"
#include "frugal/train/progress.h"

namespace frugal::train {

struct RunReporterOptions {
  std::string metrics_path;  // lead only; truncated at Create unless append
  bool append = false;       // a resumed run continues its metrics file
  int64_t log_every = 50;
  int64_t total_steps = 0;
  bool quiet = false;        // no progress output (metrics are still written)
  // Where the progress line goes (not owned): the CLI's stdout; a Python
  // script's stderr, so that its own prints stay apart.
  std::FILE* progress_out = stdout;
  bool lead = true;          // writes metrics and progress
  double elapsed_offset_s = 0;  // Elapsed() starts here (a run that continues in a new reporter)
  // Where the reporter takes its time from (not owned; outlives the
  // reporter). nullptr: Env::Default().
  Clock* clock = nullptr;
};

// The reporter's own fields of a window record, written first; a training
// loop's synchronisation adds its own (engine::PipelineWindow). The progress
// line shows the same values.
struct WindowRecord {
  double wall_time_s = 0;
  double train_time_s = 0;
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  double lr = 0;
  double samples_per_s = 0;

  // The one list of these fields (common/stat_list.h).
  template <class V>
  static void VisitStats(V&& visit) {
    using W = WindowRecord;
    visit(Stat("wall_time_s", "s", "seconds since training started").Last(), &W::wall_time_s);
    visit(Stat("train_time_s", "s", "the same less the evaluations' time").Last(), &W::train_time_s);
    visit(Stat("step", "steps", "steps done").Last(), &W::step);
    visit(Stat("epoch", "", "the epoch of the window's last step").Last(), &W::epoch);
    visit(Stat("loss", "", "mean training loss over the window's steps").Mean(), &W::loss);
    visit(Stat("lr", "", "learning rate of the window's last step").Last(), &W::lr);
    visit(Stat("samples_per_s", "samples/s", "samples of every worker per second over the window").Mean(),
          &W::samples_per_s);
  }
};

class RunReporter {
 public:
  static Result<std::unique_ptr<RunReporter>> Create(const RunReporterOptions& options);

  double Elapsed() const;  // seconds since Create, plus elapsed_offset_s
  // Elapsed() less the seconds passed to ExcludeFromTrainTime (evaluations):
  // every record carries it as train_time_s, so time-to-accuracy can be read
  // without the evaluation cadence's cost.
  double TrainTime() const { return Elapsed() - excluded_s_; }
  void ExcludeFromTrainTime(double seconds) { excluded_s_ += seconds; }
  const std::string& metrics_path() const { return options_.metrics_path; }
  bool lead() const { return options_.lead; }
  bool printing() const { return options_.lead && !options_.quiet; }

  void AddStep(double loss, double samples, double compute_s);
  // Whether a record is due after `steps_done` steps.
  bool WindowDue(int64_t steps_done) const;

  struct Window {
    int64_t steps = 0;
    double loss = 0;       // mean over the window's steps
    double samples = 0;
    double compute_s = 0;  // mean per step
    double span_s = 0;     // wall time of the window
  };
  Window window() const;

  // Writes the WindowRecord's fields + `extra`, updates the progress line
  // (with `progress_extra` appended) and starts a new window.
  Status CloseWindow(int64_t step, int64_t epoch, double lr, const nlohmann::json& extra = nlohmann::json::object(),
                     const std::string& progress_extra = "");
  // A progress-line redraw without a record (terminals redraw every step).
  void Redraw(int64_t step, int64_t epoch);
  // Prints the evaluation line; with `record`, also writes
  // {wall_time_s, train_time_s, step, epoch, test_accuracy} + `extra`.
  Status Evaluated(int64_t step, int64_t epoch, double accuracy, bool record,
                   const nlohmann::json& extra = nlohmann::json::object());
  void Note(const std::string& text);
  Status Write(const nlohmann::json& record);
  void Finish();  // ends the in-place progress line

  double last_loss() const { return last_loss_; }
  double last_accuracy() const { return last_accuracy_; }

 private:
  explicit RunReporter(const RunReporterOptions& options);
  ProgressState State(int64_t step, int64_t epoch) const;

  RunReporterOptions options_;
  Clock* clock_;  // not owned
  Clock::time_point start_;
  std::unique_ptr<JsonlWriter> metrics_;  // lead only
  ProgressReporter progress_;
  double window_start_s_ = 0;
  int64_t window_steps_ = 0;
  double window_loss_ = 0;
  double window_samples_ = 0;
  double window_compute_ = 0;
  double last_loss_ = 0;
  double last_samples_per_s_ = 0;
  double last_accuracy_ = -1;
  double excluded_s_ = 0;
};

}  // namespace frugal::train
