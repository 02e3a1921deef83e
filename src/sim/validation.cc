#include "frugal/sim/validation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "frugal/common/csv.h"
#include "frugal/common/file.h"

namespace frugal::sim {
namespace {

enum Column {
  kParams, kGpus, kGlobalBatch, kMicroBatch, kHidden, kHeads, kLayers, kSeqLen, kTp, kDp, kPp, kTimeMs, kSchedule,
  kNumColumns
};

const char* kColumnNames[kNumColumns] = {
    "parameters (billion)", "# gpus",           "global batch",         "micro batch",
    "hidden size",          "attention heads",  "# layers",             "sequence length",
    "tensor parallelism",   "data parallelism", "pipeline parallelism", "iteration time (ms)",
    "schedule"};

bool IsOptional(int c) { return c == kParams || c == kSchedule; }

// The fields of one data row, with errors naming its line and column.
class RowReader {
 public:
  RowReader(const CsvTable& table, size_t row, const std::vector<int>& column_of)
      : table_(table), row_(row), column_of_(column_of) {}

  const std::string& Raw(int c) const { return table_.Field(row_, column_of_[c]); }

  Status Positive(int c, double* out) const {
    const std::optional<double> v = ParseFiniteNumber(Raw(c));
    if (!v || *v <= 0) return Error(c, "must be a positive number");
    *out = *v;
    return Status::Ok();
  }

  // At most `max`: the bounds sit far above any published configuration, so
  // that a typo is named instead of simulated (or overflowing an int).
  Status PositiveInteger(int c, int64_t* out, double max) const {
    double v = 0;
    FRUGAL_RETURN_IF_ERROR(Positive(c, &v));
    if (v != std::floor(v)) return Error(c, "must be an integer");
    if (v > max) return Error(c, "must be at most " + std::to_string(static_cast<int64_t>(max)));
    *out = static_cast<int64_t>(v);
    return Status::Ok();
  }

  // "1f1b", "gpipe", "interleaved:3" ...
  Status Schedule(MeasuredRow* row) const {
    const std::string& sched = Raw(kSchedule);
    const size_t colon = sched.find(':');
    Result<PipelineSchedule> parsed = ParseSchedule(sched.substr(0, colon));
    if (!parsed.ok()) return table_.Error(row_, parsed.status().message());
    row->has_schedule = true;
    row->schedule = *parsed;
    if (colon != std::string::npos) {
      const std::optional<double> chunks = ParseFiniteNumber(sched.substr(colon + 1));
      if (!chunks || *chunks != std::floor(*chunks) || *chunks <= 0 || *chunks > 1e6) {
        return table_.Error(row_, "bad chunk count in schedule '" + sched + "'");
      }
      row->chunks = static_cast<int>(*chunks);
    }
    return Status::Ok();
  }

 private:
  Status Error(int c, const std::string& what) const {
    return table_.Error(row_, std::string("'") + kColumnNames[c] + "' " + what + ", got '" + Raw(c) + "'");
  }

  const CsvTable& table_;
  size_t row_;
  const std::vector<int>& column_of_;
};

Result<MeasuredRow> ParseRow(const CsvTable& table, size_t r, const std::vector<int>& column_of) {
  const RowReader in(table, r, column_of);
  MeasuredRow row;
  row.line = table.Line(r);
  int64_t gpus = 0, heads = 0, layers = 0, tp = 0, dp = 0, pp = 0;
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kGpus, &gpus, 1 << 20));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kGlobalBatch, &row.global_batch, 1e9));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kMicroBatch, &row.micro_batch, 1 << 20));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kHidden, &row.hidden, 1 << 20));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kHeads, &heads, 10000));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kLayers, &layers, 10000));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kSeqLen, &row.seq_len, 1 << 24));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kTp, &tp, 1024));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kDp, &dp, 1 << 20));
  FRUGAL_RETURN_IF_ERROR(in.PositiveInteger(kPp, &pp, 1024));
  FRUGAL_RETURN_IF_ERROR(in.Positive(kTimeMs, &row.iteration_ms));
  if (column_of[kParams] >= 0) FRUGAL_RETURN_IF_ERROR(in.Positive(kParams, &row.params_billion));
  row.gpus = static_cast<int>(gpus);
  row.heads = static_cast<int>(heads);
  row.layers = static_cast<int>(layers);
  row.tensor_parallel = static_cast<int>(tp);
  row.data_parallel = static_cast<int>(dp);
  row.pipeline_parallel = static_cast<int>(pp);
  if (tp * dp * pp != gpus) {
    return table.Error(r, "# GPUs " + std::to_string(gpus) + " != TP x DP x PP = " + std::to_string(tp * dp * pp));
  }
  if (column_of[kSchedule] >= 0) FRUGAL_RETURN_IF_ERROR(in.Schedule(&row));
  return row;
}

}  // namespace

Result<std::vector<MeasuredRow>> ParseMeasurementsCsv(const std::string& text, const std::string& source_name) {
  // The header itself starts with "# GPUs" (or "Parameters"); other '#'
  // lines are comments.
  CsvOptions options;
  options.hash_comments = true;
  options.header_field = kColumnNames[kGpus];
  FRUGAL_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Parse(text, source_name, options));
  if (table.FindColumn(kColumnNames[kGpus]) < 0) {
    return table.HeaderError("expected the header line starting with '# GPUs' (see docs/design/planner.md)");
  }
  std::vector<CsvColumn> columns;
  for (int c = 0; c < kNumColumns; ++c) columns.push_back({kColumnNames[c], IsOptional(c)});
  FRUGAL_ASSIGN_OR_RETURN(std::vector<int> column_of, table.BindColumns(columns));
  std::vector<MeasuredRow> rows;
  for (size_t r = 0; r < table.NumRows(); ++r) {
    FRUGAL_ASSIGN_OR_RETURN(MeasuredRow row, ParseRow(table, r, column_of));
    rows.push_back(row);
  }
  if (rows.empty()) return Status::Corruption(source_name + ": no measurement rows");
  return rows;
}

Result<std::vector<MeasuredRow>> LoadMeasurementsCsv(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "measurements file"));
  return ParseMeasurementsCsv(text, path);
}

Result<ValidationReport> Validate(const std::vector<MeasuredRow>& rows, const HardwareSpec& hw_in,
                                  const ValidationOptions& options) {
  HardwareSpec hw = hw_in;
  if (options.gpus_per_node > 0) hw.gpus_per_node = options.gpus_per_node;
  if (options.inter_node_gbps > 0) hw.inter_node_gbps = options.inter_node_gbps;
  std::unique_ptr<OperatorCostModel> cost;
  if (options.profile_db != nullptr) {
    cost = CreateProfiledCostModel(*options.profile_db, CreateRooflineCostModel(hw, true));
  }
  Simulator sim(hw, std::move(cost));
  ValidationReport report;
  double sum = 0;
  for (const MeasuredRow& row : rows) {
    ModelSpec model = MakeTransformer("row" + std::to_string(row.line), row.layers, row.hidden, row.heads, row.seq_len,
                                      options.vocab);
    ParallelStrategy s;
    s.tensor_parallel = row.tensor_parallel;
    s.pipeline_parallel = row.pipeline_parallel;
    s.data_parallel = row.data_parallel;
    s.micro_batch = row.micro_batch;
    s.global_batch = row.global_batch;
    s.schedule = row.has_schedule ? row.schedule : options.schedule;
    s.chunks = row.has_schedule ? row.chunks : options.chunks;
    if (s.schedule != PipelineSchedule::kInterleaved1F1B || s.pipeline_parallel == 1) {
      s.schedule = s.schedule == PipelineSchedule::kInterleaved1F1B ? PipelineSchedule::k1F1B : s.schedule;
      s.chunks = 1;
    }
    s.recompute = options.recompute;
    s.sequence_parallel = options.sequence_parallel;
    s.fused_softmax_any_batch = options.fused_softmax_any_batch;
    s.overlap_dp = options.overlap_dp;
    Result<IterationPrediction> pred = sim.Predict(model, s);
    if (!pred.ok()) return pred.status().WithContext("line " + std::to_string(row.line));
    RowResult r;
    r.row = row;
    r.strategy = s;
    r.predicted_ms = pred->iteration_s * 1e3;
    r.error_pct = (r.predicted_ms - row.iteration_ms) / row.iteration_ms * 100.0;
    r.achieved_tflops = pred->achieved_tflops_per_gpu;
    r.oom = pred->memory.oom();
    sum += std::fabs(r.error_pct);
    report.rows.push_back(r);
  }
  report.mape_pct = rows.empty() ? 0.0 : sum / rows.size();
  return report;
}

std::vector<MapeGroup> MapeBreakdown(const ValidationReport& report) {
  struct Dimension {
    const char* name;
    std::function<std::string(const RowResult&)> value;
    std::function<double(const RowResult&)> order;
  };
  const Dimension dims[] = {
      {"tp", [](const RowResult& r) { return std::to_string(r.row.tensor_parallel); },
       [](const RowResult& r) { return r.row.tensor_parallel; }},
      {"pp", [](const RowResult& r) { return std::to_string(r.row.pipeline_parallel); },
       [](const RowResult& r) { return r.row.pipeline_parallel; }},
      {"dp", [](const RowResult& r) { return std::to_string(r.row.data_parallel); },
       [](const RowResult& r) { return r.row.data_parallel; }},
      {"micro batch", [](const RowResult& r) { return std::to_string(r.row.micro_batch); },
       [](const RowResult& r) { return static_cast<double>(r.row.micro_batch); }},
      {"model", [](const RowResult& r) {
         return "h" + std::to_string(r.row.hidden) + " l" + std::to_string(r.row.layers);
       },
       [](const RowResult& r) { return static_cast<double>(r.row.hidden) * r.row.hidden * r.row.layers; }},
  };
  std::vector<MapeGroup> out;
  for (const Dimension& d : dims) {
    std::vector<MapeGroup> groups;
    std::vector<double> order;
    for (const RowResult& r : report.rows) {
      const std::string v = d.value(r);
      auto it = std::find_if(groups.begin(), groups.end(), [&v](const MapeGroup& g) { return g.value == v; });
      if (it == groups.end()) {
        groups.push_back(MapeGroup{d.name, v, 0, 0, 0});
        order.push_back(d.order(r));
        it = groups.end() - 1;
      }
      ++it->rows;
      it->mape_pct += std::fabs(r.error_pct);
      it->mean_error_pct += r.error_pct;
    }
    std::vector<size_t> idx(groups.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&order](size_t a, size_t b) { return order[a] < order[b]; });
    for (size_t i : idx) {
      MapeGroup g = groups[i];
      g.mape_pct /= g.rows;
      g.mean_error_pct /= g.rows;
      out.push_back(g);
    }
  }
  return out;
}

namespace {

struct Param {
  const char* name;
  double lo, hi;
  double& (*ref)(HardwareSpec&);
};

#define FRUGAL_EFF(name) [](HardwareSpec& h) -> double& { return h.efficiency.name; }

const Param kCalibratable[] = {
    {"matmul_max", 0.3, 1.0, FRUGAL_EFF(matmul_max)},
    {"matmul_half_dim", 1.0, 1024.0, FRUGAL_EFF(matmul_half_dim)},
    {"memory", 0.2, 1.0, FRUGAL_EFF(memory)},
    {"intra_link", 0.1, 1.0, FRUGAL_EFF(intra_link)},
    {"inter_link", 0.1, 1.0, FRUGAL_EFF(inter_link)},
    {"kernel_overhead_us", 0.0, 50.0, FRUGAL_EFF(kernel_overhead_us)},
    {"dispatch_us", 0.0, 500.0, FRUGAL_EFF(dispatch_us)},
    {"collective_latency_us", 0.0, 1000.0, FRUGAL_EFF(collective_latency_us)},
    {"p2p_latency_us", 0.0, 5000.0, FRUGAL_EFF(p2p_latency_us)},
    {"microbatch_overhead_us", 0.0, 100000.0, FRUGAL_EFF(microbatch_overhead_us)},
    {"iteration_overhead_us", 0.0, 1000000.0, FRUGAL_EFF(iteration_overhead_us)},
    {"intra_latency_us", 0.0, 200.0, [](HardwareSpec& h) -> double& { return h.intra_latency_us; }},
};
#undef FRUGAL_EFF

std::string CalibratableNames() {
  std::string names;
  for (const Param& p : kCalibratable) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

// Bounded parameter <-> unbounded search coordinate (logistic).
// A parameter at a bound (an overhead of 0) starts 2% of its range inside,
// where the logistic still has slope for the search to move it.
double ToUnbounded(const Param& p, double v) {
  const double u = std::clamp((v - p.lo) / (p.hi - p.lo), 0.02, 0.98);
  return std::log(u / (1 - u));
}
double ToBounded(const Param& p, double x) { return p.lo + (p.hi - p.lo) / (1 + std::exp(-x)); }

using Objective = std::function<double(const std::vector<double>&)>;

// Nelder-Mead with the standard coefficients from `start` (initial steps of
// 0.8 along each axis) while `keep_going()`, until the vertices' values agree
// within 1e-4. Returns the best vertex.
std::vector<double> MinimiseNelderMead(const Objective& objective, const std::vector<double>& start,
                                       const std::function<bool()>& keep_going) {
  const size_t n = start.size();
  std::vector<std::vector<double>> simplex(n + 1, std::vector<double>(n));
  simplex[0] = start;
  for (size_t j = 1; j <= n; ++j) {
    simplex[j] = simplex[0];
    simplex[j][j - 1] += 0.8;
  }
  std::vector<double> f(n + 1);
  for (size_t j = 0; j <= n; ++j) f[j] = objective(simplex[j]);
  while (keep_going()) {
    std::vector<size_t> idx(n + 1);
    for (size_t j = 0; j <= n; ++j) idx[j] = j;
    std::sort(idx.begin(), idx.end(), [&f](size_t a, size_t b) { return f[a] < f[b]; });
    const size_t best = idx[0], worst = idx[n], second = idx[n - 1];
    if (std::fabs(f[worst] - f[best]) < 1e-4) break;
    std::vector<double> centroid(n, 0.0);
    for (size_t j = 0; j <= n; ++j) {
      if (j == worst) continue;
      for (size_t i = 0; i < n; ++i) centroid[i] += simplex[j][i] / n;
    }
    auto along = [&](double coef) {
      std::vector<double> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = centroid[i] + coef * (simplex[worst][i] - centroid[i]);
      return x;
    };
    std::vector<double> xr = along(-1.0);
    const double fr = objective(xr);
    if (fr < f[best]) {
      std::vector<double> xe = along(-2.0);
      const double fe = objective(xe);
      if (fe < fr) {
        simplex[worst] = xe;
        f[worst] = fe;
      } else {
        simplex[worst] = xr;
        f[worst] = fr;
      }
    } else if (fr < f[second]) {
      simplex[worst] = xr;
      f[worst] = fr;
    } else {
      std::vector<double> xc = along(fr < f[worst] ? -0.5 : 0.5);
      const double fc = objective(xc);
      if (fc < std::min(fr, f[worst])) {
        simplex[worst] = xc;
        f[worst] = fc;
      } else {
        for (size_t j = 0; j <= n; ++j) {
          if (j == best) continue;
          for (size_t i = 0; i < n; ++i) simplex[j][i] = simplex[best][i] + 0.5 * (simplex[j][i] - simplex[best][i]);
          f[j] = objective(simplex[j]);
        }
      }
    }
  }
  size_t best = 0;
  for (size_t j = 1; j <= n; ++j) {
    if (f[j] < f[best]) best = j;
  }
  return simplex[best];
}

}  // namespace

Result<CalibrationResult> Calibrate(const std::vector<MeasuredRow>& rows, const HardwareSpec& hw,
                                    const ValidationOptions& validation, const CalibrationOptions& options) {
  std::vector<const Param*> params;
  for (const std::string& name : options.parameters) {
    const Param* found = nullptr;
    for (const Param& p : kCalibratable) {
      if (name == p.name) found = &p;
    }
    if (!found) {
      return Status::InvalidArgument("cannot calibrate '" + name + "' (choose from " + CalibratableNames() + ")");
    }
    params.push_back(found);
  }
  if (params.empty()) return Status::InvalidArgument("no parameters to calibrate");
  CalibrationResult out;
  FRUGAL_ASSIGN_OR_RETURN(ValidationReport before, Validate(rows, hw, validation));
  out.mape_before_pct = before.mape_pct;

  const size_t n = params.size();
  Status failure;
  auto apply = [&](const std::vector<double>& x) {
    HardwareSpec h = hw;
    for (size_t i = 0; i < n; ++i) params[i]->ref(h) = ToBounded(*params[i], x[i]);
    return h;
  };
  std::vector<double> start(n);
  HardwareSpec initial = hw;
  for (size_t i = 0; i < n; ++i) start[i] = ToUnbounded(*params[i], params[i]->ref(initial));
  double last_mape = 0;
  auto objective = [&](const std::vector<double>& x) {
    ++out.evaluations;
    Result<ValidationReport> r = Validate(rows, apply(x), validation);
    if (!r.ok()) {
      failure = r.status();
      last_mape = 1e9;
      return 1e9;
    }
    double penalty = 0;
    for (size_t i = 0; i < n; ++i) penalty += (x[i] - start[i]) * (x[i] - start[i]);
    last_mape = r->mape_pct;
    return r->mape_pct + options.prior_weight * penalty;
  };

  const std::vector<double> best =
      MinimiseNelderMead(objective, start, [&] { return out.evaluations < options.max_evaluations; });
  if (!failure.ok() && out.evaluations <= static_cast<int>(n) + 1) return failure;
  out.hardware = apply(best);
  objective(best);
  out.mape_after_pct = last_mape;
  return out;
}

}  // namespace frugal::sim
