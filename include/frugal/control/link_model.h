// LinkModel: one link's time model, busy_s ~ messages * alpha + bytes / beta,
// fitted from the telemetry windows the controller sees (Note [Link model]
// in link_model.cc). alpha is the per-message cost (latency, ack delay,
// per-message CPU on the I/O threads), beta the rate at which bytes flow.
// Bytes over busy time alone counts every message's latency as a lack of
// bandwidth: a link that carries small messages reads slow, and a lower
// density (smaller messages) reads slower still.
//
// Thread safety: not thread-safe; owned by the controller.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

namespace frugal::control {

struct LinkWindowSample {
  double messages = 0;  // acknowledged in the window
  double bytes = 0;     // payload bytes acknowledged in the window
  double busy_s = 0;    // time with at least one message in flight
};

struct LinkFit {
  double alpha_s = 0;         // per-message seconds (>= 0)
  double beta_bytes_per_s = 0;  // bytes per second while bytes flow (> 0)
  bool separated = false;     // both fitted (false: alpha is a prior, only beta fitted)

  double Seconds(double messages, double bytes) const { return messages * alpha_s + bytes / beta_bytes_per_s; }
};

struct LinkModelOptions {
  size_t history = 12;               // most recent windows kept
  size_t min_windows = 3;            // fewer: no separated fit
  double min_size_spread = 1.5;      // bytes per message must vary by this factor across windows
  double change_factor = 2.0;        // a window this far off the fit means the link changed
  double outlier_factor = 3.0;       // residual above this times the median (and above 10%) is dropped
};

class LinkModel {
 public:
  explicit LinkModel(LinkModelOptions options = {}) : options_(options) {}

  // Adds a window. A window whose busy time is off the current fit by more
  // than change_factor means the link changed: slower restarts the history
  // at once from this window; faster does so only when the previous window
  // was faster too (one lucky window is ignored). The last separated
  // alpha is kept as the prior across restarts (latency changes less than
  // bandwidth on a reshaped link). Windows without messages or bytes or
  // busy time are ignored.
  void Add(const LinkWindowSample& w);

  // The current fit: separated when the windows vary enough in bytes per
  // message (two-parameter weighted least squares, outliers dropped, alpha
  // clamped to >= 0); else beta alone with alpha held at its prior (the
  // last separated fit's alpha), if there ever was one. nullopt when
  // neither is possible: the caller falls back to bytes over busy time.
  std::optional<LinkFit> Fit() const;

  size_t windows() const { return windows_.size(); }
  void Clear() { windows_.clear(); }

 private:
  std::optional<LinkFit> FitSeparated() const;
  std::optional<LinkFit> FitBetaOnly(double alpha_s) const;

  LinkModelOptions options_;
  std::deque<LinkWindowSample> windows_;
  std::optional<double> alpha_prior_;
  bool last_was_fast_ = false;
};

}  // namespace frugal::control
