#include "frugal/sched/workload_generator.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

#include "frugal/common/csv.h"
#include "frugal/common/random.h"

namespace frugal::sched {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (no time zone games).
long DaysFromCivil(long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long>(doe) - 719468;
}

bool ParseTimestamp(const std::string& s, double* out) {
  int y, mo, d, h, mi, sec;
  char tail;
  if (std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%d%c", &y, &mo, &d, &h, &mi, &sec, &tail) != 6) return false;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60) return false;
  *out = DaysFromCivil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + sec;
  return true;
}

// Seconds for `app` to finish alone on the compact shape of `gpus` GPUs.
double RunTime(const Application& app, int batch, int gpus, int gpus_per_node) {
  Shape shape = CompactShape(gpus, gpus_per_node);
  const ConvergenceModel& c = app.convergence();
  double t = 0;
  for (int e = 0; e < c.NumEpochs(); ++e) {
    double r = app.ProgressRate(shape, batch, e);
    if (r <= 0) return std::numeric_limits<double>::infinity();
    t += (c.EpochEnd(e + 1) - c.EpochEnd(e)) / r;
  }
  return t;
}

}  // namespace

Result<std::vector<PhillyJob>> LoadPhillyTrace(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_ts, c_du, c_ng, c_gt;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"timestamp", &c_ts}, {"duration", &c_du}, {"num_gpus", &c_ng},
                                    {"gpu_time", &c_gt}}));
  std::vector<PhillyJob> jobs;
  jobs.reserve(t.NumRows());
  for (size_t r = 0; r < t.NumRows(); ++r) {
    PhillyJob j;
    if (!ParseTimestamp(t.Field(r, c_ts), &j.submit_time)) {
      return Status::Corruption(t.Where(r) + ": timestamp '" + t.Field(r, c_ts) +
                                "' is not YYYY-MM-DD HH:MM:SS");
    }
    FRUGAL_ASSIGN_OR_RETURN(j.duration, t.Number(r, c_du));
    FRUGAL_ASSIGN_OR_RETURN(long long g, t.Integer(r, c_ng));
    FRUGAL_ASSIGN_OR_RETURN(j.gpu_time, t.Number(r, c_gt));
    // Bounds: three years of run time, 65536 GPUs, far beyond the trace's jobs.
    if (j.duration < 0 || g <= 0 || j.gpu_time < 0 || j.duration > 1e8 || g > 65536 || j.gpu_time > 1e8 * g) {
      return Status::Corruption(t.Where(r) + ": duration must be in [0, 1e8] s, num_gpus in [1, 65536] and "
                                "gpu_time in [0, 1e8 x num_gpus] s");
    }
    j.num_gpus = static_cast<int>(g);
    if (j.duration > 0 && j.gpu_time > 0) jobs.push_back(j);
  }
  if (jobs.empty()) return Status::Corruption(path + ": no jobs with positive duration and gpu_time");
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const PhillyJob& a, const PhillyJob& b) { return a.submit_time < b.submit_time; });
  return jobs;
}

std::vector<AppTemplate> DefaultAppTemplates() {
  // The (batch, GPU count) combinations used by the Pollux workloads.
  return {
      {"ncf", 32768, 1, 1},         {"yolov3", 64, 4, 4},         {"cifar10", 2048, 6, 8},
      {"cifar10", 4096, 12, 16},    {"deepspeech2", 320, 6, 8},   {"deepspeech2", 640, 12, 12},
      {"bert", 384, 6, 16},         {"imagenet", 3200, 24, 24},   {"imagenet", 6400, 32, 48},
  };
}

Result<std::vector<JobSpec>> GenerateWorkload(const std::vector<PhillyJob>& trace, const ApplicationCatalog& catalog,
                                              const WorkloadGeneratorOptions& options) {
  if (options.num_jobs <= 0) return Status::InvalidArgument("number of jobs must be positive");
  if (options.cluster_gpus <= 0 || options.gpus_per_node <= 0) {
    return Status::InvalidArgument("cluster must have GPUs");
  }
  if (!(options.load > 0)) return Status::InvalidArgument("load must be positive");
  if (trace.size() < static_cast<size_t>(options.num_jobs)) {
    return Status::InvalidArgument("trace has " + std::to_string(trace.size()) + " jobs, fewer than the " +
                                   std::to_string(options.num_jobs) + " requested");
  }
  // Run time of every (template, GPU count) the cluster can hold.
  struct Choice {
    const Application* app;
    int batch;
    int gpus;
    double gpu_time;
  };
  std::vector<std::vector<Choice>> by_template;
  for (const AppTemplate& tpl : DefaultAppTemplates()) {
    const Application* app = catalog.Find(tpl.application);
    if (app == nullptr || tpl.min_gpus > options.cluster_gpus) continue;
    std::vector<Choice> choices;
    for (int g = tpl.min_gpus; g <= std::min(tpl.max_gpus, options.cluster_gpus); ++g) {
      double rt = RunTime(*app, tpl.batch_size, g, options.gpus_per_node);
      if (std::isfinite(rt)) choices.push_back({app, tpl.batch_size, g, g * rt});
    }
    if (!choices.empty()) by_template.push_back(std::move(choices));
  }
  if (by_template.empty()) {
    return Status::InvalidArgument("none of the applications ncf, yolov3, cifar10, deepspeech2, bert, imagenet "
                                   "is in the traces directory");
  }

  SplitMix64 rng(options.seed);
  size_t start = rng.Below(trace.size() - options.num_jobs + 1);
  std::vector<JobSpec> jobs;
  double offered = 0;
  for (int k = 0; k < options.num_jobs; ++k) {
    const PhillyJob& p = trace[start + k];
    // The template whose GPU-time at (the trace's GPU count clamped to the
    // template's range) is closest in log space to the trace's GPU-time.
    const Choice* best = nullptr;
    double best_dist = std::numeric_limits<double>::infinity();
    for (const auto& choices : by_template) {
      int g = std::clamp(p.num_gpus, choices.front().gpus, choices.back().gpus);
      const Choice& c = choices[g - choices.front().gpus];
      double dist = std::fabs(std::log(p.gpu_time) - std::log(c.gpu_time));
      if (dist < best_dist) {
        best_dist = dist;
        best = &c;
      }
    }
    JobSpec j;
    j.name = best->app->name() + "-" + std::to_string(k);
    j.submit_time = p.submit_time - trace[start].submit_time;
    j.application = best->app->name();
    j.num_replicas = best->gpus;
    j.batch_size = best->batch;
    offered += best->gpu_time;
    jobs.push_back(std::move(j));
  }
  // Stretch or compress the trace's arrival gaps to reach the target load.
  double span = jobs.back().submit_time;
  if (span > 0) {
    double factor = offered / (span * options.cluster_gpus * options.load);
    for (JobSpec& j : jobs) j.submit_time = std::round(j.submit_time * factor);
  }
  return jobs;
}

}  // namespace frugal::sched
