#include "frugal/engine/deflate_trial.h"

#include <algorithm>
#include <cmath>

namespace frugal::engine {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

// Note [Deflate by trial]: deflate (zlib on each message's values, lossless
// and flagged per message) cuts a local-mode round's bytes by about a third
// on mlp, at a CPU cost on the exchange threads. Whether that pays depends
// on more than the link: where workers share cores, the deflate CPU is
// taken from compute, and the exchange's time is spent waiting for the
// CPU and for peers as much as on the link. A rule that predicts a raw
// round's time as its deflated time x raw bytes / bytes sent assumes all of
// it is the link; with 4 workers on 2 cores that kept deflate on where it
// cost time: on two uneven clusters (3+1) over a 100 Mbit/s WAN 129.5 ms per
// step against 98.5 ms with --deflate off, over 20 Mbit/s 134 against 92, on
// a flat 100 Mbit/s 113.9 against 99.3, while on a flat 10 Mbit/s deflate was
// worth 185 against 318 ms (bench/deflate/modes.py measures these).
//
// So the choice is measured on what it is for, the time per step: the
// period between two fragment sync points, which holds the compute the
// exchange ran beside (slowed by its CPU on shared cores) and the wait for
// it at the next sync. A period belongs to the mode of the exchange started
// at its beginning; it is joined at its end (--local-delay of local_steps
// / P, the default). Rounds start deflated. After kFirstHold periods the
// other mode is tried for kTrialPeriods periods and kept if its median
// period is shorter by kMargin; a trial period longer than the chosen
// mode's median by kAbortAbove ends the trial at once, so a mode that is
// clearly worse (raw rounds on a slow link) costs one period. Kept or not,
// trials come again after twice as many periods (up to kMaxHold), and at
// once when the chosen mode's median moves by kShift (the link or the load
// changed). Each rank decides alone on its own periods; the values, hence
// the replicas, do not depend on the decisions. An evaluation or a slow
// step falls into one period, which the medians ignore. The state is not
// in checkpoints: a resumed run starts deflated and tries again.
bool DeflateTrial::Next(double period_s) {
  if (have_last_ && period_s > 0) Record(last_mode_, period_s);
  if (!trying_ && left_ <= 0 && static_cast<int>(held_.size()) == kTrialPeriods) {
    trying_ = true;
    tried_.clear();
  }
  last_mode_ = trying_ ? !chosen_ : chosen_;
  have_last_ = true;
  return last_mode_;
}

void DeflateTrial::Record(bool mode, double period_s) {
  if (trying_ && mode != chosen_) {
    tried_.push_back(period_s);
    if (period_s > kAbortAbove * Median(held_)) {
      EndTrial(false);
    } else if (static_cast<int>(tried_.size()) == kTrialPeriods) {
      EndTrial(Median(tried_) < (1.0 - kMargin) * Median(held_));
    }
    return;
  }
  if (mode != chosen_) return;  // the last period of a trial ended early
  held_.push_back(period_s);
  if (static_cast<int>(held_.size()) > kTrialPeriods) held_.erase(held_.begin());
  if (trying_) return;
  --left_;
  if (baseline_ > 0 && static_cast<int>(held_.size()) == kTrialPeriods &&
      std::abs(Median(held_) / baseline_ - 1.0) > kShift) {
    left_ = 0;
  }
}

void DeflateTrial::EndTrial(bool won) {
  trying_ = false;
  if (won) {
    chosen_ = !chosen_;
    held_ = tried_;
    hold_ = kFirstHold;
  } else {
    hold_ = std::min(2 * hold_, kMaxHold);
  }
  left_ = hold_;
  baseline_ = Median(held_);
  tried_.clear();
}

}  // namespace frugal::engine
