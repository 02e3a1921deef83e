// Operator cost models: how long one operator of the workload takes on one
// device. The simulator asks an OperatorCostModel, so where the numbers come
// from is a seam:
//   - CreateRooflineCostModel: max(compute, memory) time from the hardware
//     description's peaks and global efficiency curves;
//   - ProfileDatabase + CreateProfiledCostModel: measured times (written by a
//     profiler such as `frugal profile`), falling back to another model for
//     operators the database does not hold.
//
// Thread safety: implementations are immutable after construction; Seconds()
// may be called concurrently.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "frugal/common/status.h"
#include "frugal/sim/hardware.h"
#include "frugal/sim/workload.h"

namespace frugal::sim {

enum class Pass { kForward, kBackward };

class OperatorCostModel {
 public:
  virtual ~OperatorCostModel() = default;
  // Seconds `op` takes in `pass` on one device. Communication operators
  // (kTensorParallelAllReduce) cost 0 here: the NetworkModel times them.
  virtual double Seconds(const Operator& op, Pass pass) const = 0;
};

// `fp16`: true for tensor-core fp16/bf16 math, false for fp32.
std::unique_ptr<OperatorCostModel> CreateRooflineCostModel(const HardwareSpec& hw, bool fp16);

// Efficiency of a GEMM of these dims under `eff` (exposed for tests/docs).
double MatmulEfficiency(const EfficiencyParams& eff, int64_t m, int64_t n, int64_t k);

// Stable lookup key of an operator's shape, e.g. "gemm:1x2048x1536x12288"
// or "mem:softmax_dropout:50331648". Two ops with equal keys cost the same.
std::string OperatorKey(const Operator& op);

// Measured operator times keyed by OperatorKey. CSV format, one header line:
//   key,forward_us,backward_us
// Lines starting with '#' and blank lines are ignored.
class ProfileDatabase {
 public:
  static Result<ProfileDatabase> LoadCsv(const std::string& path);
  static Result<ProfileDatabase> ParseCsv(const std::string& text, const std::string& source_name);

  // The database in the format ParseCsv reads (header, one line per key in
  // key order, microseconds with nine significant digits), so that
  // ParseCsv(ToCsv()) holds the same entries. `comment` (optional) becomes a
  // leading '#' line; it names where the times came from (device, tool).
  std::string ToCsv(const std::string& comment = "") const;

  void Put(const std::string& key, double forward_s, double backward_s);
  // Returns false when `key` is absent.
  bool Find(const std::string& key, Pass pass, double* seconds) const;
  size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, std::pair<double, double>> entries_;
};

// Uses `db` when it holds the operator, else `fallback` (not null).
std::unique_ptr<OperatorCostModel> CreateProfiledCostModel(ProfileDatabase db,
                                                           std::unique_ptr<OperatorCostModel> fallback);

}  // namespace frugal::sim
