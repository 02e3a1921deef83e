// frugal._C's run state for a user's script: the CLI's RunReporter
// (metrics.jsonl, the progress line) and its checkpoint files
// (engine/checkpoint.h, CheckpointWriter), bound for frugal.DistributedModel,
// frugal.save and frugal.load. The records and files are the ones
// `frugal train` writes (docs/guide/python.md, "Metrics" and "Checkpoints");
// nothing of their format lives in Python.
#include <chrono>
#include <cstdio>

#include "bindings.h"
#include "frugal/engine/checkpoint.h"
#include "frugal/engine/checkpoint_manifest.h"
#include "frugal/engine/checkpoint_writer.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/engine/pipeline_record.h"
#include "frugal/engine/replica.h"
#include "frugal/train/run_reporter.h"

namespace frugal::python {

py::dict ToPy(const std::map<std::string, std::vector<uint8_t>>& sections) {
  py::dict d;
  for (const auto& [name, bytes] : sections) {
    d[py::str(name)] = py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  return d;
}

// Sections are bytes or any contiguous buffer (a memoryview of a buffer
// the script reuses), copied into recycled memory where a buffer fits
// (Note [Recycled checkpoint buffers]).
std::map<std::string, std::vector<uint8_t>> FromPy(const py::dict& sections) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& [key, value] : sections) {
    Py_buffer view;
    if (!py::isinstance<py::str>(key) || PyObject_GetBuffer(value.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw py::type_error("checkpoint sections map str names to bytes (or a contiguous buffer)");
    }
    out[key.cast<std::string>()] =
        engine::CopyToCheckpointBuffer(static_cast<const uint8_t*>(view.buf), static_cast<size_t>(view.len));
    PyBuffer_Release(&view);
  }
  return out;
}

namespace {

nlohmann::json ParseJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw py::value_error("metrics values must be a JSON object of names to values");
  return j;
}

// The reporter of one DistributedModel: rank 0 writes, every rank keeps the
// window (as the CLI's workers do). The window's pipeline and traffic
// counters are the differences since the previous record.
class PyReporter {
 public:
  PyReporter(World& world, const std::string& metrics_path, int64_t log_every, int64_t total_steps, bool quiet,
             bool append)
      : world_(&world) {
    if (log_every < 1) throw py::value_error("log_every must be >= 1, got " + std::to_string(log_every));
    train::RunReporterOptions o;
    o.metrics_path = metrics_path;
    o.append = append;
    o.log_every = log_every;
    o.total_steps = total_steps;
    o.quiet = quiet;
    o.lead = world.transport().rank() == 0;
    o.progress_out = stderr;
    auto r = train::RunReporter::Create(o);
    ThrowIfError(r.status());
    reporter_ = std::move(*r);
    window_traffic_ = world.transport().stats();
  }

  void Start(const engine::PipelineStats& stats) {
    window_stats_ = stats;
    window_traffic_ = world_->transport().stats();
  }

  // The window's record, as the CLI's Worker writes it (Worker::Impl::Record):
  // the reporter's loss, lr and samples/s, the pipeline's per-step seconds
  // and bytes per link class, then `extra`. rounds >= 0: the local mode's
  // syncs so far (the progress line shows them instead of the density).
  void CloseWindow(int64_t step, int64_t epoch, double lr, const engine::PipelineStats& now, int64_t rounds,
                   int staleness, const std::string& extra_json) {
    const comm::TransportStats traffic = world_->transport().stats();
    const train::RunReporter::Window w = reporter_->window();
    const double steps = static_cast<double>(std::max<int64_t>(1, w.steps));
    engine::PipelineWindow pw =
        engine::MeasureWindow(now, window_stats_, traffic, window_traffic_, steps, w.span_s, w.compute_s);
    pw.staleness = staleness;
    pw.workers = world_->transport().world_size();
    nlohmann::json extra = engine::WindowJson(pw);
    const nlohmann::json user = ParseJson(extra_json);
    for (const auto& [k, v] : user.items()) extra[k] = v;
    const std::string line = engine::ProgressText(
        pw, rounds >= 0 ? "syncs " + std::to_string(rounds) : engine::DensityText(pw.density));
    ThrowIfError(reporter_->CloseWindow(step, epoch, lr, extra, line));
    window_stats_ = now;
    window_traffic_ = traffic;
  }

  // A record of the caller's values at `step`: {wall_time_s, train_time_s,
  // step, epoch} + values (an evaluation's, say).
  void Log(int64_t step, int64_t epoch, const std::string& values_json) {
    const double now = reporter_->Elapsed();
    nlohmann::json rec = {{"wall_time_s", now}, {"train_time_s", reporter_->TrainTime()}, {"step", step},
                          {"epoch", epoch}};
    const nlohmann::json values = ParseJson(values_json);
    for (const auto& [k, v] : values.items()) rec[k] = v;
    ThrowIfError(reporter_->Write(rec));
  }

  train::RunReporter& reporter() { return *reporter_; }

 private:
  World* world_;  // kept alive by the Python object (keep_alive)
  std::unique_ptr<train::RunReporter> reporter_;
  engine::PipelineStats window_stats_;
  comm::TransportStats window_traffic_;
};

void BindReporter(py::module_& m) {
  py::class_<PyReporter>(m, "RunReporter", "frugal train's RunReporter (metrics.jsonl, progress line) for a script")
      .def(py::init<World&, const std::string&, int64_t, int64_t, bool, bool>(), py::arg("world"),
           py::arg("metrics_path"), py::arg("log_every"), py::arg("total_steps"), py::arg("quiet"),
           py::arg("append"), py::keep_alive<1, 2>())
      .def("start", &PyReporter::Start, py::arg("stats"), "The window's counters start here")
      .def("add_step", [](PyReporter& r, double loss, double samples, double compute_s) {
        r.reporter().AddStep(loss, samples, compute_s);
      }, py::arg("loss"), py::arg("samples"), py::arg("compute_s"))
      .def("window_due", [](PyReporter& r, int64_t steps_done) { return r.reporter().WindowDue(steps_done); },
           py::arg("steps_done"))
      .def("close_window", &PyReporter::CloseWindow, py::arg("step"), py::arg("epoch"), py::arg("lr"),
           py::arg("stats"), py::arg("rounds"), py::arg("staleness"), py::arg("extra_json"))
      .def("log", &PyReporter::Log, py::arg("step"), py::arg("epoch"), py::arg("values_json"))
      .def("note", [](PyReporter& r, const std::string& text) { r.reporter().Note(text); }, py::arg("text"))
      .def("exclude_from_train_time", [](PyReporter& r, double s) { r.reporter().ExcludeFromTrainTime(s); },
           py::arg("seconds"))
      .def("finish", [](PyReporter& r) { r.reporter().Finish(); })
      .def_property_readonly("lead", [](PyReporter& r) { return r.reporter().lead(); })
      .def_property_readonly("metrics_path", [](PyReporter& r) { return r.reporter().metrics_path(); })
      .def_property_readonly("elapsed", [](PyReporter& r) { return r.reporter().Elapsed(); })
      .def_property_readonly("train_time", [](PyReporter& r) { return r.reporter().TrainTime(); });
}

// frugal.save/load take one shared directory: the per-site resume (the
// shared part sent from the cluster that holds it) is the CLI worker's.
void RefusePerSite(const std::string& dir) {
  if (engine::IsPerSiteCheckpointDir(dir)) {
    throw py::value_error("frugal.save/load take one shared directory; " + dir +
                          " names one per cluster ({cluster}), which only frugal train/worker write and resume");
  }
}

// This rank's file of `step` under `root`, written as a CLI worker writes
// it (CheckpointWriter: temporary file, fsync, rename); rank 0 then waits up
// to wait_s for every rank's file, checks each (checksum, and the step,
// world and rank of its meta), writes COMPLETE and keeps the newest `keep`.
py::dict WriteCheckpoint(World& world, const std::string& root, int64_t step, int keep, const py::dict& sections,
                         double wait_s) {
  if (keep < 1) throw py::value_error("keep must be >= 1, got " + std::to_string(keep));
  RefusePerSite(root);
  engine::CheckpointJob job;
  job.root = root;
  job.step = step;
  job.rank = world.transport().rank();
  job.world = world.transport().world_size();
  job.keep = keep;
  job.wait_for_ranks = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  job.sections = FromPy(sections);
  const int64_t w = job.world;
  job.check_rank_file = [step, w](int r, const engine::CheckpointSections& s) {
    return engine::CheckRankFileMeta(s, step, w, r, /*generation=*/0);
  };
  std::optional<engine::CheckpointOutcome> outcome;
  {
    ReleaseGil release;
    engine::CheckpointWriter writer;
    Status started = writer.Start(std::move(job));
    if (started.ok()) outcome = writer.Take(/*wait=*/true);
    else outcome = engine::CheckpointOutcome{step, started};
  }
  ThrowIfError(outcome->status);
  py::dict d;
  d["step_dir"] = engine::CheckpointStepDir(root, step);
  d["bytes"] = outcome->bytes;
  d["write_s"] = outcome->write_s;
  d["complete_s"] = outcome->complete_s;
  d["complete"] = outcome->complete;
  d["abandoned"] = outcome->abandoned;
  return d;
}

void BindCheckpoints(py::module_& m) {
  m.def("write_checkpoint", &WriteCheckpoint, py::arg("world"), py::arg("root"), py::arg("step"), py::arg("keep"),
        py::arg("sections"), py::arg("wait_s"));
  m.def("newest_checkpoint", [](const std::string& dir) {
    RefusePerSite(dir);
    std::vector<std::string> skipped;
    Result<std::string> step = engine::NewestIntactCheckpoint(dir, &skipped);
    ThrowIfError(step.status());
    auto world = engine::CheckpointWorld(*step);
    ThrowIfError(world.status());
    return py::make_tuple(*step, *world, skipped);
  }, py::arg("dir"), "(step dir, its world size, [skipped steps and why]) of the newest intact complete step");
  m.def("read_checkpoint", [](const std::string& path) {
    auto s = engine::ReadCheckpointFile(path);
    ThrowIfError(s.status());
    return ToPy(*s);
  }, py::arg("path"));
  m.def("checkpoint_rank_file", &engine::CheckpointRankFile, py::arg("step_dir"), py::arg("rank"));
  m.def("clear_checkpoints_after", [](const std::string& dir, int64_t step) {
    ThrowIfError(engine::ClearCheckpointsAfter(dir, step));
  }, py::arg("dir"), py::arg("step"));
  m.def("encode_meta", [](int64_t step, int64_t world, int64_t rank) {
    engine::CheckpointMeta meta;
    meta.step = step;
    meta.world = world;
    meta.rank = rank;
    std::vector<uint8_t> b = engine::EncodeCheckpointMeta(meta);
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }, py::arg("step"), py::arg("world"), py::arg("rank"));
  m.def("parse_meta", [](const py::dict& sections, const std::string& what) {
    auto meta = engine::ParseCheckpointMeta(FromPy(sections), what);
    ThrowIfError(meta.status());
    py::dict d;
    d["step"] = meta->step;
    d["world"] = meta->world;
    d["rank"] = meta->rank;
    return d;
  }, py::arg("sections"), py::arg("what"));
  m.def("save_buffers", [](const std::vector<torch::Tensor>& buffers) {
    std::vector<uint8_t> b = engine::SaveBuffers(buffers);
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }, py::arg("buffers"));
  m.def("restore_buffers", [](const py::bytes& section, const std::vector<torch::Tensor>& buffers,
                              const std::string& what) {
    std::string s = section;
    ThrowIfError(engine::RestoreBuffers(std::vector<uint8_t>(s.begin(), s.end()), buffers, what));
  }, py::arg("section"), py::arg("buffers"), py::arg("what"));
}

}  // namespace

void BindRunState(py::module_& m) {
  BindReporter(m);
  BindCheckpoints(m);
}

}  // namespace frugal::python
