#include "frugal/sim/frugal_validation.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "frugal/common/file.h"

#include "csv_util.h"

namespace frugal::sim {
namespace {

using internal::NormaliseField;

enum Column { kModel, kClusters, kIntra, kInter, kDensity, kBatch, kTimeMs, kStaleness, kComputeMs, kNumColumns };

const char* kNames[kNumColumns] = {"model",   "clusters",         "intra mbps",          "inter mbps",           "density",
                                   "batch per worker", "iteration time (ms)", "staleness", "compute ms per sample"};

bool Optional(int c) { return c == kStaleness || c == kComputeMs; }

}  // namespace

Result<std::vector<FrugalMeasurement>> ParseFrugalMeasurementsCsv(const std::string& text,
                                                                 const std::string& source_name) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  std::vector<int> col(kNumColumns, -1);
  size_t num_fields = 0;
  bool header_seen = false;
  std::vector<FrugalMeasurement> rows;
  auto where = [&source_name](int ln) { return source_name + ":" + std::to_string(ln) + ": "; };
  while (std::getline(in, line)) {
    ++line_no;
    internal::CleanLine(&line, line_no == 1);
    const std::string norm = NormaliseField(line);
    if (norm.empty() || norm[0] == '#') continue;
    const std::vector<std::string> fields = internal::SplitCsvLine(line);
    if (!header_seen) {
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string name = NormaliseField(fields[i]);
        int found = -1;
        for (int c = 0; c < kNumColumns; ++c) {
          if (name == kNames[c]) found = c;
        }
        if (found < 0) return Status::Corruption(where(line_no) + "unknown column '" + fields[i] + "'");
        if (col[found] >= 0) return Status::Corruption(where(line_no) + "column '" + fields[i] + "' appears twice");
        col[found] = static_cast<int>(i);
      }
      for (int c = 0; c < kNumColumns; ++c) {
        if (col[c] < 0 && !Optional(c)) return Status::Corruption(where(line_no) + "missing column '" + kNames[c] + "'");
      }
      num_fields = fields.size();
      header_seen = true;
      continue;
    }
    if (fields.size() != num_fields) {
      return Status::Corruption(where(line_no) + "expected " + std::to_string(num_fields) + " fields, found " +
                                std::to_string(fields.size()));
    }
    auto number = [&](int c, bool allow_unlimited, double* out) -> Status {
      const std::string raw = NormaliseField(fields[col[c]]);
      if (allow_unlimited && raw == "unlimited") {
        *out = kUnlimitedMbps;
        return Status::Ok();
      }
      try {
        size_t used = 0;
        const double v = std::stod(raw, &used);
        if (used != raw.size() || !std::isfinite(v) || v < 0) throw std::invalid_argument(raw);
        *out = v;
      } catch (const std::exception&) {
        return Status::Corruption(where(line_no) + "'" + kNames[c] + "' must be a non-negative number" +
                                  (allow_unlimited ? " or 'unlimited'" : "") + ", got '" + fields[col[c]] + "'");
      }
      return Status::Ok();
    };
    FrugalMeasurement m;
    m.line = line_no;
    const std::string model = NormaliseField(fields[col[kModel]]);
    Result<ModelSpec> spec = BuiltinModel(model);
    if (!spec.ok()) return Status::Corruption(where(line_no) + spec.status().message());
    m.job.model = *spec;
    double intra = 0, inter = 0, batch = 0;
    FRUGAL_RETURN_IF_ERROR(number(kIntra, true, &intra));
    FRUGAL_RETURN_IF_ERROR(number(kInter, true, &inter));
    FRUGAL_RETURN_IF_ERROR(number(kDensity, false, &m.job.density));
    FRUGAL_RETURN_IF_ERROR(number(kBatch, false, &batch));
    FRUGAL_RETURN_IF_ERROR(number(kTimeMs, false, &m.iteration_ms));
    if (m.job.density <= 0 || m.job.density > 1) return Status::Corruption(where(line_no) + "'density' must be in (0, 1]");
    if (batch < 1 || batch != std::floor(batch)) {
      return Status::Corruption(where(line_no) + "'batch per worker' must be a positive integer");
    }
    if (m.iteration_ms <= 0 || intra <= 0 || inter <= 0) {
      return Status::Corruption(where(line_no) + "bandwidths and iteration time must be positive");
    }
    m.job.batch_per_worker = static_cast<int64_t>(batch);
    m.job.inter_cluster_gbps = inter / 1000.0;
    m.job.clusters.clear();
    std::stringstream parts(NormaliseField(fields[col[kClusters]]));
    std::string part;
    while (std::getline(parts, part, '+')) {
      int workers = 0;
      try {
        size_t used = 0;
        workers = std::stoi(part, &used);
        if (used != part.size()) workers = 0;
      } catch (const std::exception&) {
        workers = 0;
      }
      if (workers <= 0) {
        return Status::Corruption(where(line_no) + "'clusters' must look like 4 or 2+2, got '" + fields[col[kClusters]] +
                                  "'");
      }
      m.job.clusters.push_back(ClusterSpec{workers, intra / 1000.0});
    }
    if (col[kStaleness] >= 0) {
      double st = 0;
      FRUGAL_RETURN_IF_ERROR(number(kStaleness, false, &st));
      m.job.staleness = static_cast<int>(st);
    }
    if (col[kComputeMs] >= 0) {
      double ms = 0;
      FRUGAL_RETURN_IF_ERROR(number(kComputeMs, false, &ms));
      m.job.compute_s_per_sample = ms * 1e-3;
    }
    rows.push_back(std::move(m));
  }
  if (!header_seen) return Status::Corruption(source_name + ": no header line");
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
