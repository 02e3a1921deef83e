// ProgressReporter: the training progress line. On a terminal it redraws one
// line in place ("\r"); when stdout is not a TTY (CI, a log file) it prints a
// plain line every `log_every` steps instead.
//
// Thread safety: not thread-safe; one reporter per training loop.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace frugal::train {

struct ProgressState {
  int64_t step = 0;
  int64_t total_steps = 0;
  int64_t epoch = 0;
  double loss = 0;
  double test_accuracy = -1;  // < 0: not evaluated yet
  double samples_per_s = 0;
  double elapsed_s = 0;
  std::string extra;  // appended as is (e.g. "Mbit/s 92.1 density 1%")
};

class ProgressReporter {
 public:
  // `out` is not owned. `interactive` < 0 means: detect with isatty().
  ProgressReporter(std::FILE* out, int64_t log_every, int interactive = -1);

  void Update(const ProgressState& state);
  // Prints an evaluation line that stays on screen.
  void Evaluated(const ProgressState& state);
  // Prints a line that stays on screen (e.g. a controller decision).
  void Note(const std::string& text);
  // Ends the in-place line, if any.
  void Finish();

  static std::string FormatDuration(double seconds);

 private:
  std::string Line(const ProgressState& s) const;

  std::FILE* out_;
  int64_t log_every_;
  bool tty_;
  bool line_open_ = false;
};

}  // namespace frugal::train
