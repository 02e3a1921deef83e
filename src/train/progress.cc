#include "frugal/train/progress.h"

#include <unistd.h>

#include <cmath>

namespace frugal::train {

ProgressReporter::ProgressReporter(std::FILE* out, int64_t log_every, int interactive)
    : out_(out), log_every_(log_every > 0 ? log_every : 1) {
  tty_ = interactive < 0 ? isatty(fileno(out)) != 0 : interactive != 0;
}

std::string ProgressReporter::FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%02ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

std::string ProgressReporter::Line(const ProgressState& s) const {
  double eta = s.step > 0 ? s.elapsed_s * static_cast<double>(s.total_steps - s.step) / static_cast<double>(s.step) : -1;
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf), "step %lld/%lld  epoch %lld  loss %.4f", static_cast<long long>(s.step),
                        static_cast<long long>(s.total_steps), static_cast<long long>(s.epoch), s.loss);
  if (s.test_accuracy >= 0) n += std::snprintf(buf + n, sizeof(buf) - n, "  acc %.2f%%", 100.0 * s.test_accuracy);
  std::snprintf(buf + n, sizeof(buf) - n, "  %.0f samples/s  elapsed %s  ETA %s", s.samples_per_s,
                FormatDuration(s.elapsed_s).c_str(), FormatDuration(eta).c_str());
  std::string line = buf;
  if (!s.extra.empty()) line += "  " + s.extra;
  return line;
}

void ProgressReporter::Update(const ProgressState& s) {
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", Line(s).c_str());
    line_open_ = true;
    std::fflush(out_);
  } else if (s.step % log_every_ == 0 || s.step == s.total_steps) {
    std::fprintf(out_, "%s\n", Line(s).c_str());
    std::fflush(out_);
  }
}

void ProgressReporter::Evaluated(const ProgressState& s) {
  if (line_open_) std::fputs("\r\033[K", out_);
  line_open_ = false;
  std::fprintf(out_, "eval  step %lld  epoch %lld  test accuracy %.2f%%  elapsed %s\n",
               static_cast<long long>(s.step), static_cast<long long>(s.epoch), 100.0 * s.test_accuracy,
               FormatDuration(s.elapsed_s).c_str());
  std::fflush(out_);
}

void ProgressReporter::Note(const std::string& text) {
  if (line_open_) std::fputs("\r\033[K", out_);
  line_open_ = false;
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

void ProgressReporter::Finish() {
  if (line_open_) std::fputs("\n", out_);
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace frugal::train
