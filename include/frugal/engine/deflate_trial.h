// DeflateTrial: whether the local mode's next fragment exchange deflates
// (--deflate auto with overlapped rounds), chosen by trying both and keeping
// the one under which training ran faster (Note [Deflate by trial] in
// deflate_trial.cc).
#ifndef FRUGAL_ENGINE_DEFLATE_TRIAL_H_
#define FRUGAL_ENGINE_DEFLATE_TRIAL_H_

#include <vector>

namespace frugal::engine {

class DeflateTrial {
 public:
  // Periods of each mode compared (the median of each).
  static constexpr int kTrialPeriods = 3;
  // Periods in the chosen mode before the first trial; after a trial the
  // chosen mode kept, twice as many (at most kMaxHold) before the next.
  static constexpr int kFirstHold = 8;
  static constexpr int kMaxHold = 128;
  // The trial mode replaces the chosen one when its median period is
  // shorter by this share.
  static constexpr double kMargin = 0.03;
  // A trial period longer than the chosen mode's median by this factor
  // ends the trial at once (the mode is clearly worse).
  static constexpr double kAbortAbove = 1.2;
  // The chosen mode's median period moving by this share since the last
  // trial (the link or the load changed) starts a trial at once.
  static constexpr double kShift = 0.25;

  // Called at each fragment sync point with the seconds since the
  // previous one (<= 0 at the first: no period yet), whose exchange ran in
  // the mode this returned then; returns whether the exchange that starts
  // now deflates.
  bool Next(double period_s);
  // The mode kept between trials.
  bool chosen() const { return chosen_; }
  bool trying() const { return trying_; }

 private:
  void Record(bool mode, double period_s);
  void EndTrial(bool won);

  bool chosen_ = true;  // rounds start deflated, as --deflate on
  bool trying_ = false;
  bool last_mode_ = true;  // the mode of the exchange whose period comes next
  bool have_last_ = false;
  int left_ = kFirstHold;  // chosen-mode periods before the next trial
  int hold_ = kFirstHold;
  double baseline_ = 0;            // the chosen mode's median at the last trial
  std::vector<double> held_, tried_;  // the last periods of each mode
};

}  // namespace frugal::engine

#endif  // FRUGAL_ENGINE_DEFLATE_TRIAL_H_
