#include "pollux_traces.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>

#include "frugal/common/csv.h"

namespace frugal::sched {
namespace {

namespace fs = std::filesystem;

// The README's job model: the largest per-GPU batch before gradient
// accumulation is the largest measured one, except yolov3 whose runs above 8
// per GPU were measured but are not used by the Pollux job model.
int MaxLocalOverride(const std::string& app, int measured) {
  if (app == "yolov3") return std::min(measured, 8);
  return measured;
}

std::string ShapeKey(const Shape& shape) {
  std::string key;
  for (int g : shape) {
    if (g > 9) return std::string();  // Not expressible as a placements.csv id.
    key += static_cast<char>('0' + g);
  }
  return key;
}

StepSample Lerp(const StepSample& a, const StepSample& b, double t) {
  return {a.local_bsz + (b.local_bsz - a.local_bsz) * t, a.step_time + (b.step_time - a.step_time) * t,
          a.sync_time + (b.sync_time - a.sync_time) * t};
}

// Brackets `x` in the sorted keys of `m`: returns (lo, hi, t) with x clamped.
template <typename Map>
void Bracket(const Map& m, double x, typename Map::const_iterator* lo, typename Map::const_iterator* hi,
             double* t) {
  auto it = m.lower_bound(static_cast<int>(std::ceil(x)));
  if (it == m.end()) {
    *lo = *hi = std::prev(m.end());
    *t = 0;
    return;
  }
  if (it == m.begin() || it->first <= x) {
    *lo = *hi = it;
    *t = 0;
    return;
  }
  *hi = it;
  *lo = std::prev(it);
  *t = (x - (*lo)->first) / static_cast<double>((*hi)->first - (*lo)->first);
}

// Sorts by local batch and averages samples with the same local batch (the
// same shape measured in several node orders).
std::vector<StepSample> Normalise(std::vector<StepSample> v) {
  std::sort(v.begin(), v.end(), [](const StepSample& a, const StepSample& b) { return a.local_bsz < b.local_bsz; });
  std::vector<StepSample> out;
  size_t i = 0;
  while (i < v.size()) {
    size_t j = i;
    StepSample sum{v[i].local_bsz, 0, 0};
    while (j < v.size() && v[j].local_bsz == v[i].local_bsz) {
      sum.step_time += v[j].step_time;
      sum.sync_time += v[j].sync_time;
      ++j;
    }
    double n = static_cast<double>(j - i);
    out.push_back({sum.local_bsz, sum.step_time / n, sum.sync_time / n});
    i = j;
  }
  return out;
}

}  // namespace

StepSample InterpolateLocal(const std::vector<StepSample>& s, double local_bsz) {
  if (local_bsz <= s.front().local_bsz) return s.front();
  if (local_bsz >= s.back().local_bsz) return s.back();
  auto it = std::lower_bound(s.begin(), s.end(), local_bsz,
                             [](const StepSample& a, double x) { return a.local_bsz < x; });
  const StepSample& hi = *it;
  const StepSample& lo = *std::prev(it);
  return Lerp(lo, hi, (local_bsz - lo.local_bsz) / (hi.local_bsz - lo.local_bsz));
}

PolluxThroughputModel::PolluxThroughputModel(std::unordered_map<std::string, std::vector<StepSample>> exact,
                                             std::map<int, std::map<int, std::vector<StepSample>>> spread,
                                             int min_local_bsz, int max_local_bsz)
    : exact_(std::move(exact)),
      spread_(std::move(spread)),
      min_local_bsz_(min_local_bsz),
      max_local_bsz_(max_local_bsz) {}

StepSample PolluxThroughputModel::Lookup(const Shape& shape, double local_bsz) const {
  auto it = exact_.find(ShapeKey(shape));
  if (it != exact_.end()) return InterpolateLocal(it->second, local_bsz);
  int nodes = static_cast<int>(shape.size());
  int replicas = 0;
  for (int g : shape) replicas += g;
  // Interpolate over num_nodes, then num_replicas within each node level,
  // then local batch; clamp at the edges of the measured grid.
  std::map<int, std::map<int, std::vector<StepSample>>>::const_iterator n_lo, n_hi;
  double tn = 0;
  Bracket(spread_, nodes, &n_lo, &n_hi, &tn);
  auto at_level = [&](const std::map<int, std::vector<StepSample>>& level) {
    std::map<int, std::vector<StepSample>>::const_iterator r_lo, r_hi;
    double tr = 0;
    Bracket(level, replicas, &r_lo, &r_hi, &tr);
    return Lerp(InterpolateLocal(r_lo->second, local_bsz), InterpolateLocal(r_hi->second, local_bsz), tr);
  };
  StepSample a = at_level(n_lo->second);
  if (n_lo == n_hi) return a;
  return Lerp(a, at_level(n_hi->second), tn);
}

double PolluxThroughputModel::StepTime(const Shape& shape, int global_batch) const {
  int n = 0;
  for (int g : shape) n += g;
  if (n <= 0 || global_batch <= 0) return std::numeric_limits<double>::infinity();
  int local = (global_batch + n - 1) / n;
  int accum = 0;
  if (local > max_local_bsz_) accum = (local + max_local_bsz_ - 1) / max_local_bsz_ - 1;
  int atomic = (local + accum) / (accum + 1);
  StepSample s = Lookup(shape, atomic);
  return s.step_time + (s.step_time - s.sync_time) * accum;
}

int PolluxThroughputModel::MaxGpus(int global_batch) const {
  return std::max(1, global_batch / std::max(1, min_local_bsz_));
}

PolluxConvergenceModel::PolluxConvergenceModel(std::vector<double> epoch_end,
                                               std::map<int, std::vector<EpochStats>> stats, int base_batch)
    : epoch_end_(std::move(epoch_end)), stats_(std::move(stats)), base_batch_(base_batch) {}

double PolluxConvergenceModel::EpochEnd(int epoch) const {
  if (epoch <= 0) return 0;
  return epoch_end_[std::min<size_t>(epoch, epoch_end_.size()) - 1];
}

double PolluxConvergenceModel::StepGain(int global_batch, int epoch) const {
  auto stats_at = [&](const std::vector<EpochStats>& v) { return v[std::min<size_t>(epoch, v.size() - 1)]; };
  EpochStats st;
  auto hi = stats_.lower_bound(global_batch);
  if (hi == stats_.end()) {
    st = stats_at(std::prev(hi)->second);
  } else if (hi->first == global_batch || hi == stats_.begin()) {
    st = stats_at(hi->second);
  } else {
    auto lo = std::prev(hi);
    double t = (global_batch - lo->first) / static_cast<double>(hi->first - lo->first);
    EpochStats a = stats_at(lo->second), b = stats_at(hi->second);
    st = {a.grad_sqr + (b.grad_sqr - a.grad_sqr) * t, a.grad_var + (b.grad_var - a.grad_var) * t};
  }
  double scale = static_cast<double>(global_batch) / base_batch_;
  double denom = st.grad_var / scale + st.grad_sqr;
  if (!(denom > 0)) return scale;  // Degenerate statistics: assume perfect scaling.
  return (st.grad_var + st.grad_sqr) / denom;
}

namespace {

// The step-time samples of placements.csv and scalability.csv.
struct StepSamples {
  std::unordered_map<std::string, std::vector<StepSample>> exact;        // shape key -> samples
  std::map<int, std::map<int, std::vector<StepSample>>> spread;          // nodes -> replicas -> samples
  int min_local = std::numeric_limits<int>::max();
  int max_local = 0;
};

Status ReadPlacements(const std::string& path, StepSamples* out) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable placements, CsvTable::Read(path));
  int c_pl, c_lb, c_st, c_sy;
  FRUGAL_RETURN_IF_ERROR(placements.Columns({{"placement", &c_pl}, {"local_bsz", &c_lb}, {"step_time", &c_st},
                                             {"sync_time", &c_sy}}));
  if (placements.NumRows() == 0) return Status::Corruption(placements.source() + ": no rows");
  for (size_t r = 0; r < placements.NumRows(); ++r) {
    const std::string& pl = placements.Field(r, c_pl);
    if (pl.empty() || pl.find_first_not_of("123456789") != std::string::npos) {
      return placements.Error(r, "placement '" + pl + "' must be per-node GPU counts, e.g. 1124");
    }
    FRUGAL_ASSIGN_OR_RETURN(long long lb, placements.Integer(r, c_lb));
    FRUGAL_ASSIGN_OR_RETURN(double st, placements.Number(r, c_st));
    FRUGAL_ASSIGN_OR_RETURN(double sy, placements.Number(r, c_sy));
    if (lb <= 0 || st <= 0 || sy < 0) return placements.Error(r, "local_bsz and step_time must be positive");
    Shape shape;
    int replicas = 0;
    for (char ch : pl) {
      shape.push_back(ch - '0');
      replicas += ch - '0';
    }
    std::sort(shape.begin(), shape.end());
    StepSample s{static_cast<double>(lb), st, sy};
    out->exact[ShapeKey(shape)].push_back(s);
    out->spread[static_cast<int>(shape.size())][replicas].push_back(s);
    out->min_local = std::min<int>(out->min_local, lb);
    out->max_local = std::max<int>(out->max_local, lb);
  }
  return Status::Ok();
}

Status ReadScalability(const std::string& path, StepSamples* out) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_n, c_r, c_l, c_s, c_y;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"num_nodes", &c_n}, {"num_replicas", &c_r}, {"local_bsz", &c_l},
                                    {"step_time", &c_s}, {"sync_time", &c_y}}));
  for (size_t r = 0; r < t.NumRows(); ++r) {
    FRUGAL_ASSIGN_OR_RETURN(long long n, t.Integer(r, c_n));
    FRUGAL_ASSIGN_OR_RETURN(long long rep, t.Integer(r, c_r));
    FRUGAL_ASSIGN_OR_RETURN(long long lb, t.Integer(r, c_l));
    FRUGAL_ASSIGN_OR_RETURN(double st, t.Number(r, c_s));
    FRUGAL_ASSIGN_OR_RETURN(double sy, t.Number(r, c_y));
    if (n <= 0 || rep < n || lb <= 0 || st <= 0 || sy < 0) {
      return t.Error(r, "need 0 < num_nodes <= num_replicas, positive local_bsz and step_time");
    }
    out->spread[static_cast<int>(n)][static_cast<int>(rep)].push_back({static_cast<double>(lb), st, sy});
  }
  return Status::Ok();
}

// validation-<B>.csv: per-epoch progress and gradient statistics at batch B.
struct ValidationTable {
  int batch = 0;
  std::vector<double> progress;
  std::vector<PolluxConvergenceModel::EpochStats> stats;
};

Result<ValidationTable> ReadValidation(const std::string& path) {
  ValidationTable v;
  std::string stem = fs::path(path).stem().string().substr(11);
  char* end = nullptr;
  long b = std::strtol(stem.c_str(), &end, 10);
  if (stem.empty() || *end != '\0' || b <= 0) {
    return Status::Corruption(path + ": file name must be validation-<batch size>.csv");
  }
  v.batch = static_cast<int>(b);
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_p, c_q, c_v;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"progress", &c_p}, {"grad_sqr", &c_q}, {"grad_var", &c_v}}));
  if (t.NumRows() == 0) return Status::Corruption(path + ": no epochs");
  for (size_t r = 0; r < t.NumRows(); ++r) {
    FRUGAL_ASSIGN_OR_RETURN(double p, t.Number(r, c_p));
    FRUGAL_ASSIGN_OR_RETURN(double q, t.Number(r, c_q));
    FRUGAL_ASSIGN_OR_RETURN(double g, t.Number(r, c_v));
    if (p <= 0 || (!v.progress.empty() && p < v.progress.back()) || q < 0 || g < 0) {
      return t.Error(r, "progress must be positive and non-decreasing, gradient statistics >= 0");
    }
    v.progress.push_back(p);
    v.stats.push_back({q, g});
  }
  return v;
}

// The convergence model from all validation-<B>.csv files of `dir`.
Result<std::shared_ptr<PolluxConvergenceModel>> ReadConvergence(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string f = entry.path().filename().string();
    if (f.rfind("validation-", 0) == 0 && entry.path().extension() == ".csv") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return Status::Corruption(dir + ": no validation-<B>.csv files");
  std::map<int, std::vector<PolluxConvergenceModel::EpochStats>> stats;
  std::vector<std::vector<double>> progress_per_file;
  int num_epochs = std::numeric_limits<int>::max();
  for (const std::string& f : files) {
    FRUGAL_ASSIGN_OR_RETURN(ValidationTable v, ReadValidation(f));
    num_epochs = std::min<int>(num_epochs, static_cast<int>(v.progress.size()));
    progress_per_file.push_back(std::move(v.progress));
    stats[v.batch] = std::move(v.stats);
  }
  std::vector<double> epoch_end;
  for (int e = 0; e < num_epochs; ++e) {
    double m = std::numeric_limits<double>::infinity();
    for (const auto& p : progress_per_file) m = std::min(m, p[e]);
    // The min over files need not be monotone; progress needed never decreases.
    if (!epoch_end.empty()) m = std::max(m, epoch_end.back());
    epoch_end.push_back(m);
  }
  int base_batch = stats.begin()->first;
  return std::make_shared<PolluxConvergenceModel>(std::move(epoch_end), std::move(stats), base_batch);
}

}  // namespace

Result<std::shared_ptr<const Application>> LoadPolluxApplication(const std::string& dir) {
  std::string name = fs::path(dir).filename().string();
  if (name.empty()) name = fs::path(dir).parent_path().filename().string();
  StepSamples samples;
  FRUGAL_RETURN_IF_ERROR(ReadPlacements((fs::path(dir) / "placements.csv").string(), &samples));
  // scalability.csv is optional: without it, wide spreads clamp to the widest placement.
  fs::path scal = fs::path(dir) / "scalability.csv";
  if (fs::exists(scal)) FRUGAL_RETURN_IF_ERROR(ReadScalability(scal.string(), &samples));
  for (auto& kv : samples.exact) kv.second = Normalise(std::move(kv.second));
  for (auto& level : samples.spread) {
    for (auto& kv : level.second) kv.second = Normalise(std::move(kv.second));
  }
  FRUGAL_ASSIGN_OR_RETURN(std::shared_ptr<PolluxConvergenceModel> convergence, ReadConvergence(dir));
  auto throughput = std::make_shared<PolluxThroughputModel>(std::move(samples.exact), std::move(samples.spread),
                                                            samples.min_local,
                                                            MaxLocalOverride(name, samples.max_local));
  return std::shared_ptr<const Application>(std::make_shared<Application>(name, throughput, convergence));
}

Result<ApplicationCatalog> LoadPolluxTraces(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": not a directory of application traces");
  std::vector<std::string> subdirs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && fs::exists(entry.path() / "placements.csv")) subdirs.push_back(entry.path().string());
  }
  std::sort(subdirs.begin(), subdirs.end());
  if (subdirs.empty()) return Status::NotFound(dir + ": no <application>/placements.csv found");
  ApplicationCatalog catalog;
  for (const std::string& d : subdirs) {
    FRUGAL_ASSIGN_OR_RETURN(auto app, LoadPolluxApplication(d));
    FRUGAL_RETURN_IF_ERROR(catalog.Add(std::move(app)));
  }
  return catalog;
}

}  // namespace frugal::sched
