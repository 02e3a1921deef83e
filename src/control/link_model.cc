#include "frugal/control/link_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace frugal::control {

// Note [Link model]
// A window's busy time is modelled as messages * alpha + bytes / beta. The
// fit minimises the relative residuals, sum_i ((alpha m_i + gamma b_i - t_i)
// / t_i)^2 with gamma = 1/beta, so that a long window does not outweigh ten
// short ones; with x_i = m_i / t_i and y_i = b_i / t_i that is ordinary
// least squares of 1 on (x, y), a 2x2 linear system. The two columns can be
// told apart only when the windows differ in bytes per message (a density
// change does that: the number of messages per iteration is fixed by the
// buckets and peers, their size by the density). When they do not (fewer
// than min_windows, or bytes per message within min_size_spread), alpha is
// held at the last separated fit's value and beta alone is fitted; before
// any separated fit there is no model and the controller keeps bytes over
// busy time (the old estimate, which is the model with alpha = 0).
//
// Robustness: one refit without the windows whose residual exceeds
// outlier_factor times the median residual (and 10%): a window with a
// stall (a GC pause, a core taken by another process) is dropped rather
// than bending the line. alpha < 0 (small transfers faster than large
// ones per byte: a token-bucket shaper's burst) is clamped to 0 and beta
// refitted; gamma <= 0 (bytes free) is no fit.
//
// A link that changes (a WAN reshaped from 500 to 50 Mbit/s) makes old
// windows wrong, not noisy: a window more than change_factor off the fit
// restarts the history (slower at once, faster only when confirmed by the
// next window), keeping alpha as the prior.

namespace {

struct Normal {
  double xx = 0, xy = 0, yy = 0, x = 0, y = 0;
};

Normal Accumulate(const std::vector<LinkWindowSample>& ws) {
  Normal n;
  for (const auto& w : ws) {
    const double x = w.messages / w.busy_s, y = w.bytes / w.busy_s;
    n.xx += x * x;
    n.xy += x * y;
    n.yy += y * y;
    n.x += x;
    n.y += y;
  }
  return n;
}

double RelativeResidual(const LinkFit& f, const LinkWindowSample& w) {
  return std::abs(f.Seconds(w.messages, w.bytes) - w.busy_s) / w.busy_s;
}

double SizeSpread(const std::vector<LinkWindowSample>& ws) {
  double lo = 0, hi = 0;
  for (const auto& w : ws) {
    const double size = w.bytes / w.messages;
    lo = lo == 0 ? size : std::min(lo, size);
    hi = std::max(hi, size);
  }
  return lo > 0 ? hi / lo : 0;
}

// The two-parameter fit; nullopt when the system is singular or bytes come
// out free.
std::optional<LinkFit> Solve(const std::vector<LinkWindowSample>& ws) {
  const Normal n = Accumulate(ws);
  const double det = n.xx * n.yy - n.xy * n.xy;
  if (!(det > 1e-9 * n.xx * n.yy)) return std::nullopt;
  double alpha = (n.x * n.yy - n.y * n.xy) / det;
  double gamma = (n.y * n.xx - n.x * n.xy) / det;
  if (alpha < 0) {  // clamp: refit gamma through the origin
    alpha = 0;
    gamma = n.y / n.yy;
  }
  if (!(gamma > 0)) return std::nullopt;
  return LinkFit{alpha, 1.0 / gamma, true};
}

}  // namespace

std::optional<LinkFit> LinkModel::FitSeparated() const {
  std::vector<LinkWindowSample> ws(windows_.begin(), windows_.end());
  if (ws.size() < options_.min_windows || SizeSpread(ws) < options_.min_size_spread) return std::nullopt;
  std::optional<LinkFit> fit = Solve(ws);
  if (!fit) return std::nullopt;
  std::vector<double> residuals;
  for (const auto& w : ws) residuals.push_back(RelativeResidual(*fit, w));
  std::vector<double> sorted = residuals;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const double cut = std::max(0.1, options_.outlier_factor * sorted[sorted.size() / 2]);
  std::vector<LinkWindowSample> kept;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (residuals[i] <= cut) kept.push_back(ws[i]);
  }
  if (kept.size() == ws.size()) return fit;
  // Too few windows left to fit without them: they cannot be told apart
  // from the rest, keep them all.
  if (kept.size() < options_.min_windows || SizeSpread(kept) < options_.min_size_spread) return fit;
  std::optional<LinkFit> refit = Solve(kept);
  return refit ? refit : fit;
}

std::optional<LinkFit> LinkModel::FitBetaOnly(double alpha_s) const {
  // Least squares of the relative residuals over gamma alone.
  double num = 0, den = 0;
  for (const auto& w : windows_) {
    const double x = w.messages / w.busy_s, y = w.bytes / w.busy_s;
    num += y * (1 - alpha_s * x);
    den += y * y;
  }
  if (!(den > 0) || !(num > 0)) return std::nullopt;
  return LinkFit{alpha_s, den / num, false};
}

std::optional<LinkFit> LinkModel::Fit() const {
  if (std::optional<LinkFit> fit = FitSeparated()) return fit;
  if (alpha_prior_ && !windows_.empty()) return FitBetaOnly(*alpha_prior_);
  return std::nullopt;
}

void LinkModel::Add(const LinkWindowSample& w) {
  if (!(w.messages > 0) || !(w.bytes > 0) || !(w.busy_s > 0)) return;
  if (std::optional<LinkFit> fit = Fit()) {
    const double ratio = w.busy_s / fit->Seconds(w.messages, w.bytes);
    if (ratio > options_.change_factor || (ratio < 1 / options_.change_factor && last_was_fast_)) {
      windows_.clear();  // the link changed
      last_was_fast_ = false;
    } else if (ratio < 1 / options_.change_factor) {
      last_was_fast_ = true;  // held back until the next window confirms it
      return;
    } else {
      last_was_fast_ = false;
    }
  }
  windows_.push_back(w);
  while (windows_.size() > options_.history) windows_.pop_front();
  if (std::optional<LinkFit> fit = FitSeparated()) alpha_prior_ = fit->alpha_s;
}

}  // namespace frugal::control
