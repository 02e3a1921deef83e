#include "frugal/sched/workload.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "frugal/common/csv.h"

namespace frugal::sched {

namespace {

constexpr double kMaxSubmitTime = 1e8;

// Names are shown in tables and matched against the catalog: valid UTF-8
// without control characters.
bool IsPrintableUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size() || (len == 1 && (c < 0x20 || c == 0x7f))) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

Result<std::vector<JobSpec>> LoadWorkload(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Read(path));
  int c_name, c_time, c_app, c_rep, c_bsz;
  FRUGAL_RETURN_IF_ERROR(t.Columns({{"name", &c_name}, {"time", &c_time}, {"application", &c_app},
                                    {"num_replicas", &c_rep}, {"batch_size", &c_bsz}}));
  const int c_tail = t.FindColumn("tail_gpu_s");  // Optional.
  const int c_unit = t.FindColumn("gpus_per_worker");  // Optional.
  std::vector<JobSpec> jobs;
  jobs.reserve(t.NumRows());
  for (size_t r = 0; r < t.NumRows(); ++r) {
    JobSpec j;
    j.name = t.Field(r, c_name);
    j.application = t.Field(r, c_app);
    if (j.name.empty() || j.application.empty()) {
      return Status::Corruption(t.Where(r) + ": name and application must not be empty");
    }
    if (!IsPrintableUtf8(j.name) || !IsPrintableUtf8(j.application)) {
      return Status::Corruption(t.Where(r) + ": name and application must be printable UTF-8 text");
    }
    FRUGAL_ASSIGN_OR_RETURN(j.submit_time, t.Number(r, c_time));
    FRUGAL_ASSIGN_OR_RETURN(long long rep, t.Integer(r, c_rep));
    FRUGAL_ASSIGN_OR_RETURN(long long bsz, t.Integer(r, c_bsz));
    // Bounds: the simulator stops at 1e9 s, so a job must arrive well before
    // (1e8 s, three years); counts far above any real cluster are typos.
    if (j.submit_time < 0 || j.submit_time > kMaxSubmitTime) {
      return Status::Corruption(t.Where(r) + ": time must be in [0, 1e8] seconds, got " + t.Field(r, c_time));
    }
    if (rep <= 0 || bsz <= 0 || rep > 1000000 || bsz > 1000000000) {
      return Status::Corruption(t.Where(r) + ": num_replicas must be in [1, 1e6] and batch_size in [1, 1e9]");
    }
    if (c_tail >= 0) {
      FRUGAL_ASSIGN_OR_RETURN(j.tail_gpu_seconds, t.Number(r, c_tail));
      if (!(j.tail_gpu_seconds >= 0 && j.tail_gpu_seconds <= kMaxSubmitTime)) {
        return Status::Corruption(t.Where(r) + ": tail_gpu_s must be in [0, 1e8] GPU-seconds, got " +
                                  t.Field(r, c_tail));
      }
    }
    if (c_unit >= 0) {
      FRUGAL_ASSIGN_OR_RETURN(long long unit, t.Integer(r, c_unit));
      if (unit <= 0 || unit > rep || rep % unit != 0) {
        return Status::Corruption(t.Where(r) + ": gpus_per_worker must be positive and divide num_replicas (" +
                                  t.Field(r, c_rep) + "), got " + t.Field(r, c_unit));
      }
      j.gpus_per_worker = static_cast<int>(unit);
    }
    j.num_replicas = static_cast<int>(rep);
    j.batch_size = static_cast<int>(bsz);
    jobs.push_back(std::move(j));
  }
  if (jobs.empty()) return Status::Corruption(path + ": no jobs (a header line and one row per job)");
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const JobSpec& a, const JobSpec& b) { return a.submit_time < b.submit_time; });
  return jobs;
}

Status WriteWorkload(const std::string& path, const std::vector<JobSpec>& jobs) {
  std::ofstream out(path);
  if (!out) return Status::IOError(path + ": cannot open for writing");
  const bool tails = std::any_of(jobs.begin(), jobs.end(), [](const JobSpec& j) { return j.tail_gpu_seconds > 0; });
  const bool units = std::any_of(jobs.begin(), jobs.end(), [](const JobSpec& j) { return j.gpus_per_worker != 1; });
  out << "name,time,application,num_replicas,batch_size" << (tails ? ",tail_gpu_s" : "")
      << (units ? ",gpus_per_worker\n" : "\n");
  char buf[64];
  for (const JobSpec& j : jobs) {
    std::snprintf(buf, sizeof(buf), "%.0f", j.submit_time);
    out << j.name << ',' << buf << ',' << j.application << ',' << j.num_replicas << ',' << j.batch_size;
    if (tails) {
      std::snprintf(buf, sizeof(buf), "%.3f", j.tail_gpu_seconds);
      out << ',' << buf;
    }
    if (units) out << ',' << j.gpus_per_worker;
    out << '\n';
  }
  out.flush();
  if (!out) return Status::IOError(path + ": write failed");
  return Status::Ok();
}

}  // namespace frugal::sched
