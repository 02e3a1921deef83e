#include "frugal/sim/frugal_validation.h"

#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "frugal/common/csv.h"
#include "frugal/common/file.h"

namespace frugal::sim {
namespace {

enum Column {
  kModel,
  kClusters,
  kIntra,
  kInter,
  kDensity,
  kBatch,
  kTimeMs,
  kStaleness,
  kComputeMs,
  kMergedDensity,
  kLocalSteps,
  kBytesPerValue,
  kNumColumns
};

const char* kNames[kNumColumns] = {"model",   "clusters",         "intra mbps",          "inter mbps",
                                   "density", "batch per worker", "iteration time (ms)", "staleness",
                                   "compute ms per sample", "merged density", "local steps",
                                   "bytes per value"};

// As `plan frugal`'s --batch and --staleness (the pipeline is played for 24
// iterations); a larger number would also overflow the integer it goes into.
constexpr int64_t kMaxBatch = 1000000;
constexpr int kMaxStaleness = 16;

bool Optional(int c) { return c >= kStaleness; }

std::string Lowered(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Field c of row r as a non-negative number (or, when allowed, "unlimited").
Status NonNegative(const CsvTable& t, size_t r, const std::vector<int>& col, int c, bool allow_unlimited,
                   double* out) {
  const std::string& raw = t.Field(r, col[c]);
  if (allow_unlimited && Lowered(raw) == "unlimited") {
    *out = kUnlimitedMbps;
    return Status::Ok();
  }
  const std::optional<double> v = ParseFiniteNumber(raw);
  if (!v || *v < 0) {
    return t.Error(r, std::string("'") + kNames[c] + "' must be a non-negative number" +
                          (allow_unlimited ? " or 'unlimited'" : "") + ", got '" + raw + "'");
  }
  *out = *v;
  return Status::Ok();
}

// "4" or "2+2": workers per cluster, each with `intra_gbps` inside it.
Result<std::vector<ClusterSpec>> ParseClusters(const std::string& text, double intra_gbps) {
  std::vector<ClusterSpec> clusters;
  size_t start = 0;
  while (true) {
    const size_t plus = text.find('+', start);
    const std::string part = text.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    const std::optional<double> workers = ParseFiniteNumber(part);
    if (!workers || *workers < 1 || *workers != std::floor(*workers) || *workers > 1e6) {
      return Status::InvalidArgument("'clusters' must look like 4 or 2+2, got '" + text + "'");
    }
    clusters.push_back(ClusterSpec{static_cast<int>(*workers), intra_gbps});
    if (plus == std::string::npos) return clusters;
    start = plus + 1;
  }
}

// The optional local-mode columns of row r (FrugalJob::local_steps, and the
// measured wire bytes per value).
Status ParseLocalColumns(const CsvTable& t, size_t r, const std::vector<int>& col, FrugalMeasurement* m) {
  if (col[kLocalSteps] >= 0) {
    double h = 0;
    FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kLocalSteps, false, &h));
    if (h > kMaxLocalSteps || h != std::floor(h)) {
      return t.Error(r, "'local steps' must be a whole number from 0 to " + std::to_string(kMaxLocalSteps));
    }
    m->job.local_steps = static_cast<int>(h);
    m->job.local_fragments = DefaultLocalFragments(m->job.local_steps);
  }
  if (col[kBytesPerValue] >= 0 && !t.Field(r, col[kBytesPerValue]).empty()) {  // empty: the wire's own figure
    FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kBytesPerValue, false, &m->job.bytes_per_selected));
    if (m->job.bytes_per_selected <= 0 || m->job.bytes_per_selected > 64) {
      return t.Error(r, "'bytes per value' must be in (0, 64]");
    }
    m->job.merged_bytes_per_selected = m->job.bytes_per_selected;
    m->measured_bytes = true;
  }
  return Status::Ok();
}

Result<FrugalMeasurement> ParseMeasurement(const CsvTable& t, size_t r, const std::vector<int>& col) {
  FrugalMeasurement m;
  m.line = t.Line(r);
  Result<ModelSpec> spec = BuiltinModel(Lowered(t.Field(r, col[kModel])));
  if (!spec.ok()) return t.Error(r, spec.status().message());
  m.job.model = *spec;
  double intra = 0, inter = 0, batch = 0;
  FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kIntra, true, &intra));
  FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kInter, true, &inter));
  FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kDensity, false, &m.job.density));
  FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kBatch, false, &batch));
  FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kTimeMs, false, &m.iteration_ms));
  if (m.job.density <= 0 || m.job.density > 1) return t.Error(r, "'density' must be in (0, 1]");
  if (batch < 1 || batch > kMaxBatch || batch != std::floor(batch)) {
    return t.Error(r, "'batch per worker' must be a whole number from 1 to " + std::to_string(kMaxBatch));
  }
  if (m.iteration_ms <= 0 || intra <= 0 || inter <= 0) {
    return t.Error(r, "bandwidths and iteration time must be positive");
  }
  m.job.batch_per_worker = static_cast<int64_t>(batch);
  m.job.inter_cluster_gbps = inter / 1000.0;
  Result<std::vector<ClusterSpec>> clusters = ParseClusters(t.Field(r, col[kClusters]), intra / 1000.0);
  if (!clusters.ok()) return t.Error(r, clusters.status().message());
  m.job.clusters = *clusters;
  if (col[kStaleness] >= 0) {
    double st = 0;
    FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kStaleness, false, &st));
    if (st > kMaxStaleness || st != std::floor(st)) {
      return t.Error(r, "'staleness' must be a whole number from 0 to " + std::to_string(kMaxStaleness));
    }
    m.job.staleness = static_cast<int>(st);
  }
  if (col[kComputeMs] >= 0) {
    double ms = 0;
    FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kComputeMs, false, &ms));
    m.job.compute_s_per_sample = ms * 1e-3;
  }
  if (col[kMergedDensity] >= 0) {
    FRUGAL_RETURN_IF_ERROR(NonNegative(t, r, col, kMergedDensity, false, &m.job.measured_merged_density));
    if (m.job.measured_merged_density > 1) return t.Error(r, "'merged density' must be in [0, 1]");
  }
  FRUGAL_RETURN_IF_ERROR(ParseLocalColumns(t, r, col, &m));
  return m;
}

}  // namespace

Result<std::vector<FrugalMeasurement>> ParseFrugalMeasurementsCsv(const std::string& text,
                                                                 const std::string& source_name) {
  CsvOptions options;
  options.hash_comments = true;
  FRUGAL_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Parse(text, source_name, options));
  std::vector<CsvColumn> columns;
  for (int c = 0; c < kNumColumns; ++c) columns.push_back({kNames[c], Optional(c)});
  FRUGAL_ASSIGN_OR_RETURN(std::vector<int> col, table.BindColumns(columns));
  std::vector<FrugalMeasurement> rows;
  for (size_t r = 0; r < table.NumRows(); ++r) {
    FRUGAL_ASSIGN_OR_RETURN(FrugalMeasurement m, ParseMeasurement(table, r, col));
    rows.push_back(std::move(m));
  }
  if (rows.empty()) return Status::Corruption(source_name + ": no measurement rows");
  return rows;
}

Result<std::vector<FrugalMeasurement>> LoadFrugalMeasurementsCsv(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "measurements file"));
  return ParseFrugalMeasurementsCsv(text, path);
}

Result<FrugalValidationReport> ValidateFrugal(const std::vector<FrugalMeasurement>& rows, const HardwareSpec& hw,
                                              bool shared_cpu) {
  FrugalValidationReport report;
  double sum = 0;
  for (const FrugalMeasurement& m : rows) {
    FrugalJob job = m.job;
    job.shared_cpu = job.shared_cpu || shared_cpu;
    Result<FrugalPrediction> p = PredictFrugalIteration(job, hw);
    if (!p.ok()) return p.status().WithContext("line " + std::to_string(m.line));
    FrugalRowResult r;
    r.row = m;
    r.prediction = *p;
    r.predicted_ms = p->iteration_s * 1e3;
    r.error_pct = (r.predicted_ms - m.iteration_ms) / m.iteration_ms * 100.0;
    sum += std::fabs(r.error_pct);
    report.rows.push_back(r);
  }
  report.mape_pct = rows.empty() ? 0.0 : sum / rows.size();
  return report;
}

}  // namespace frugal::sim
