#include "frugal/sched/workload.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "frugal/common/csv.h"

namespace frugal::sched {

Result<std::vector<JobSpec>> LoadWorkload(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_name, c_time, c_app, c_rep, c_bsz;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"name", &c_name}, {"time", &c_time}, {"application", &c_app},
                                    {"num_replicas", &c_rep}, {"batch_size", &c_bsz}}));
  std::vector<JobSpec> jobs;
  jobs.reserve(t.NumRows());
  for (size_t r = 0; r < t.NumRows(); ++r) {
    JobSpec j;
    j.name = t.Field(r, c_name);
    j.application = t.Field(r, c_app);
    if (j.name.empty() || j.application.empty()) {
      return Status::Corruption(t.Where(r) + ": name and application must not be empty");
    }
    FRUGAL_ASSIGN_OR_RETURN(j.submit_time, t.Number(r, c_time));
    FRUGAL_ASSIGN_OR_RETURN(long long rep, t.Integer(r, c_rep));
    FRUGAL_ASSIGN_OR_RETURN(long long bsz, t.Integer(r, c_bsz));
    if (j.submit_time < 0 || rep <= 0 || bsz <= 0 || rep > 1000000 || bsz > 1000000000) {
      return Status::Corruption(t.Where(r) +
                                ": time must be >= 0, num_replicas and batch_size positive (and sane)");
    }
    j.num_replicas = static_cast<int>(rep);
    j.batch_size = static_cast<int>(bsz);
    jobs.push_back(std::move(j));
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const JobSpec& a, const JobSpec& b) { return a.submit_time < b.submit_time; });
  return jobs;
}

Status WriteWorkload(const std::string& path, const std::vector<JobSpec>& jobs) {
  std::ofstream out(path);
  if (!out) return Status::IOError(path + ": cannot open for writing");
  out << "name,time,application,num_replicas,batch_size\n";
  char buf[64];
  for (const JobSpec& j : jobs) {
    std::snprintf(buf, sizeof(buf), "%.0f", j.submit_time);
    out << j.name << ',' << buf << ',' << j.application << ',' << j.num_replicas << ',' << j.batch_size << '\n';
  }
  out.flush();
  if (!out) return Status::IOError(path + ": write failed");
  return Status::Ok();
}

}  // namespace frugal::sched
