#include "frugal/sim/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

#include "frugal/common/csv.h"
#include "frugal/common/file.h"

namespace frugal::sim {
namespace {

class RooflineCostModel : public OperatorCostModel {
 public:
  RooflineCostModel(const HardwareSpec& hw, bool fp16)
      : eff_(hw.efficiency),
        peak_flops_((fp16 ? hw.device.peak_tflops_fp16 : hw.device.peak_tflops_fp32) * 1e12),
        mem_bytes_per_s_(hw.device.memory_bandwidth_gbs * 1e9 * hw.efficiency.memory),
        overhead_s_(hw.efficiency.kernel_overhead_us * 1e-6) {}

  double Seconds(const Operator& op, Pass pass) const override {
    const bool fwd = pass == Pass::kForward;
    const double flops = fwd ? op.fwd_flops : op.bwd_flops;
    const double bytes = fwd ? op.fwd_bytes : op.bwd_bytes;
    const int kernels = fwd ? 1 : 2;
    switch (op.kind) {
      case OpKind::kTensorParallelAllReduce:
        return 0.0;
      case OpKind::kMatmul:
      case OpKind::kConv: {
        const double rate = peak_flops_ * MatmulEfficiency(eff_, op.m, op.n, op.k);
        return std::max(flops / rate, bytes / mem_bytes_per_s_) + kernels * overhead_s_;
      }
      case OpKind::kMemoryBound:
        return bytes / mem_bytes_per_s_ + kernels * overhead_s_;
    }
    return 0.0;
  }

 private:
  EfficiencyParams eff_;
  double peak_flops_;
  double mem_bytes_per_s_;
  double overhead_s_;
};

class ProfiledCostModel : public OperatorCostModel {
 public:
  ProfiledCostModel(ProfileDatabase db, std::unique_ptr<OperatorCostModel> fallback)
      : db_(std::move(db)), fallback_(std::move(fallback)) {}

  double Seconds(const Operator& op, Pass pass) const override {
    if (op.kind == OpKind::kTensorParallelAllReduce) return 0.0;
    double s = 0;
    if (db_.Find(OperatorKey(op), pass, &s)) return s;
    return fallback_->Seconds(op, pass);
  }

 private:
  ProfileDatabase db_;
  std::unique_ptr<OperatorCostModel> fallback_;
};

}  // namespace

double MatmulEfficiency(const EfficiencyParams& eff, int64_t m, int64_t n, int64_t k) {
  const double c = eff.matmul_half_dim;
  auto f = [c](int64_t d) { return static_cast<double>(d) / (static_cast<double>(d) + c); };
  return eff.matmul_max * f(m) * f(n) * f(k);
}

std::string OperatorKey(const Operator& op) {
  std::ostringstream key;
  switch (op.kind) {
    case OpKind::kMatmul:
    case OpKind::kConv:
      key << (op.kind == OpKind::kConv ? "conv:" : "gemm:") << op.batch << "x" << op.m << "x" << op.n << "x" << op.k;
      break;
    case OpKind::kMemoryBound:
      key << "mem:" << op.name << ":" << static_cast<int64_t>(op.fwd_bytes);
      break;
    case OpKind::kTensorParallelAllReduce:
      key << "allreduce:" << static_cast<int64_t>(op.comm_bytes);
      break;
  }
  return key.str();
}

std::vector<Operator> DistinctOperators(const Workload& workload) {
  std::vector<Operator> out;
  std::set<std::string> seen;
  auto add = [&](const Block& blk) {
    for (const Operator& op : blk.ops) {
      if (op.kind == OpKind::kTensorParallelAllReduce) continue;
      if (seen.insert(OperatorKey(op)).second) out.push_back(op);
    }
  };
  add(workload.pre);
  for (const Block& blk : workload.blocks) add(blk);
  add(workload.post);
  return out;
}

std::unique_ptr<OperatorCostModel> CreateRooflineCostModel(const HardwareSpec& hw, bool fp16) {
  return std::make_unique<RooflineCostModel>(hw, fp16);
}

std::unique_ptr<OperatorCostModel> CreateProfiledCostModel(ProfileDatabase db,
                                                           std::unique_ptr<OperatorCostModel> fallback) {
  return std::make_unique<ProfiledCostModel>(std::move(db), std::move(fallback));
}

std::string ProfileDatabase::ToCsv(const std::string& comment) const {
  std::string out;
  if (!comment.empty()) out += "# " + comment.substr(0, comment.find('\n')) + "\n";
  out += "key,forward_us,backward_us\n";
  char line[64];
  for (const auto& [key, times] : entries_) {
    std::snprintf(line, sizeof line, ",%.9g,%.9g\n", times.first * 1e6, times.second * 1e6);
    out += key + line;
  }
  return out;
}

void ProfileDatabase::Put(const std::string& key, double forward_s, double backward_s) {
  entries_[key] = {forward_s, backward_s};
}

bool ProfileDatabase::Find(const std::string& key, Pass pass, double* seconds) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  *seconds = pass == Pass::kForward ? it->second.first : it->second.second;
  return true;
}

Result<ProfileDatabase> ProfileDatabase::ParseCsv(const std::string& text, const std::string& source_name) {
  CsvOptions options;
  options.hash_comments = true;
  FRUGAL_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Parse(text, source_name, options));
  if (table.header() != std::vector<std::string>{"key", "forward_us", "backward_us"}) {
    return table.HeaderError("expected header 'key,forward_us,backward_us'");
  }
  ProfileDatabase db;
  for (size_t r = 0; r < table.NumRows(); ++r) {
    const std::optional<double> forward_us = ParseFiniteNumber(table.Field(r, 1));
    const std::optional<double> backward_us = ParseFiniteNumber(table.Field(r, 2));
    // 1e10 us (about 3 hours) per operator is far beyond any kernel; a larger
    // value is a unit mistake, not a measurement.
    constexpr double kMaxUs = 1e10;
    if (!forward_us || !backward_us || *forward_us < 0 || *backward_us < 0 || *forward_us > kMaxUs ||
        *backward_us > kMaxUs) {
      return table.Error(r, "times must be numbers in [0, 1e10] microseconds");
    }
    const std::string& key = table.Field(r, 0);
    if (key.empty() || !std::all_of(key.begin(), key.end(), [](char c) { return c >= ' ' && c < 127; })) {
      return table.Error(r, "operator key must be printable ASCII (as frugal plan ops writes it)");
    }
    db.Put(table.Field(r, 0), *forward_us * 1e-6, *backward_us * 1e-6);
  }
  return db;
}

Result<ProfileDatabase> ProfileDatabase::LoadCsv(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "profile database"));
  return ParseCsv(text, path);
}

}  // namespace frugal::sim
