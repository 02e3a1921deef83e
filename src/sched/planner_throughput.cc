#include "frugal/sched/planner_throughput.h"

#include <limits>

#include "frugal/common/csv.h"
#include "frugal/sim/planner.h"
#include "table_model.h"

namespace frugal::sched {

PlannerThroughputModel::PlannerThroughputModel(sim::ModelSpec model, sim::HardwareSpec hardware)
    : model_(std::move(model)), hardware_(std::move(hardware)) {}

double PlannerThroughputModel::StepTime(const Shape& shape, int global_batch) const {
  Result<sim::DataParallelStep> step = sim::PredictDataParallelStep(model_, hardware_, shape, global_batch);
  if (!step.ok()) return std::numeric_limits<double>::infinity();
  return step->step_s;
}

Status LoadPlannerApplications(const std::string& path, ApplicationCatalog* catalog) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_app, c_model, c_hw, c_total;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"application", &c_app}, {"model", &c_model}, {"hardware", &c_hw},
                                    {"total_samples", &c_total}}));
  if (t.NumRows() == 0) return Status::Corruption(path + ": no rows");
  for (size_t r = 0; r < t.NumRows(); ++r) {
    const std::string& name = t.Field(r, c_app);
    if (name.empty()) return Status::Corruption(t.Where(r) + ": empty application name");
    Result<sim::ModelSpec> model = sim::BuiltinModel(t.Field(r, c_model));
    if (!model.ok()) return Status::Corruption(t.Where(r) + ": " + model.status().message());
    Result<sim::HardwareSpec> hw = sim::LoadHardware(t.Field(r, c_hw));
    if (!hw.ok()) return Status::Corruption(t.Where(r) + ": " + hw.status().message());
    FRUGAL_ASSIGN_OR_RETURN(double total, t.Number(r, c_total));
    if (total <= 0) return Status::Corruption(t.Where(r) + ": total_samples must be positive");
    auto app = std::make_shared<Application>(
        name, std::make_shared<PlannerThroughputModel>(std::move(model).value(), std::move(hw).value()),
        std::make_shared<SampleCountConvergence>(total));
    Status added = catalog->Add(std::move(app));
    if (!added.ok()) return Status::Corruption(t.Where(r) + ": " + added.message());
  }
  return Status::Ok();
}

}  // namespace frugal::sched
