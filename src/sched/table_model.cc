#include "table_model.h"

#include <algorithm>
#include <limits>
#include <map>

#include "frugal/common/csv.h"

namespace frugal::sched {

TableThroughputModel::TableThroughputModel(std::vector<std::pair<int, double>> points)
    : points_(std::move(points)) {}

double TableThroughputModel::SamplesPerSecond(int gpus) const {
  if (gpus <= 0) return 0;
  if (gpus <= points_.front().first) {
    // Below the first measured count, scale linearly from zero.
    return points_.front().second * gpus / points_.front().first;
  }
  if (gpus >= points_.back().first) return points_.back().second;
  auto hi = std::lower_bound(points_.begin(), points_.end(), gpus,
                             [](const std::pair<int, double>& p, int g) { return p.first < g; });
  auto lo = std::prev(hi);
  double t = (gpus - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + (hi->second - lo->second) * t;
}

double TableThroughputModel::StepTime(const Shape& shape, int global_batch) const {
  int n = 0;
  for (int g : shape) n += g;
  double sps = SamplesPerSecond(n);
  if (!(sps > 0) || global_batch <= 0) return std::numeric_limits<double>::infinity();
  return global_batch / sps;
}

Status LoadThroughputTable(const std::string& path, ApplicationCatalog* catalog) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_app, c_tot, c_n, c_s;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"application", &c_app}, {"total_samples", &c_tot}, {"num_gpus", &c_n},
                                    {"samples_per_s", &c_s}}));
  struct Entry {
    double total = 0;
    std::vector<std::pair<int, double>> points;
  };
  std::map<std::string, Entry> apps;
  std::vector<std::string> order;
  for (size_t r = 0; r < t.NumRows(); ++r) {
    const std::string& name = t.Field(r, c_app);
    if (name.empty()) return Status::Corruption(t.Where(r) + ": empty application name");
    FRUGAL_ASSIGN_OR_RETURN(double total, t.Number(r, c_tot));
    FRUGAL_ASSIGN_OR_RETURN(long long n, t.Integer(r, c_n));
    FRUGAL_ASSIGN_OR_RETURN(double sps, t.Number(r, c_s));
    // Bounds far beyond real jobs (ImageNet x 1e6 samples, 65536 GPUs), so a
    // typo is named here instead of stalling the simulation.
    if (total <= 0 || n <= 0 || sps <= 0 || total > 1e15 || n > 65536 || sps < 1e-6 || sps > 1e12) {
      return Status::Corruption(t.Where(r) + ": total_samples must be in (0, 1e15], num_gpus in [1, 65536] and "
                                "samples_per_s in [1e-6, 1e12]");
    }
    if (total / sps > 1e8 * n) {
      return Status::Corruption(t.Where(r) + ": total_samples / samples_per_s is over 1e8 s (three years) per GPU");
    }
    auto [it, inserted] = apps.try_emplace(name);
    if (inserted) {
      order.push_back(name);
      it->second.total = total;
    } else if (it->second.total != total) {
      return Status::Corruption(t.Where(r) + ": total_samples differs from earlier rows of '" + name + "'");
    }
    for (const auto& p : it->second.points) {
      if (p.first == n) return Status::Corruption(t.Where(r) + ": num_gpus " + std::to_string(n) + " repeated");
    }
    it->second.points.emplace_back(static_cast<int>(n), sps);
  }
  if (order.empty()) return Status::Corruption(path + ": no rows");
  for (const std::string& name : order) {
    Entry& e = apps[name];
    std::sort(e.points.begin(), e.points.end());
    auto app = std::make_shared<Application>(name, std::make_shared<TableThroughputModel>(e.points),
                                             std::make_shared<SampleCountConvergence>(e.total));
    FRUGAL_RETURN_IF_ERROR(catalog->Add(std::move(app)).WithContext(path));
  }
  return Status::Ok();
}

}  // namespace frugal::sched
