// `frugal profile`: measure this machine for the planner.
#include <cstdio>
#include <fstream>

#include "commands.h"
#include "input_checks.h"
#include "frugal/profiler/profiler.h"
#include "frugal/sim/cost_model.h"

namespace frugal::cli {

void AddProfileCommand(CLI::App& app) {
  struct Flags {
    std::string model = "mlp";
    int64_t micro_batch = 64;
    int tp = 1;
    std::string out = "profile.csv";
    std::string hardware_out;
    profiler::ProfileOptions options;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Time a model's operators on this machine's LibTorch device (for frugal plan --profile-db)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--model", f->model, "Built-in model (mlp, cnn, resnet18, gpt-*)");
  // Every operator's tensors are allocated at this micro-batch: the bound
  // keeps a typo from asking LibTorch for terabytes.
  cmd->add_option("--micro-batch", f->micro_batch, "Micro-batch size of the timed operators")
      ->check(Bounded(1, 1 << 16, "the timed tensors must fit in memory"));
  cmd->add_option("--tp", f->tp, "Tensor parallelism of the operator shapes")->check(Bounded(1, 1024));
  cmd->add_option("--out", f->out, "Profile database CSV to write");
  cmd->add_option("--hardware-out", f->hardware_out,
                  "Also measure peak GEMM rate, memory bandwidth and Frugal's CPU stages and write a hardware TOML");
  cmd->add_option("--device", f->options.device, "LibTorch device");
  cmd->add_option("--repeats", f->options.repeats, "Timed runs per operator (median kept)")
      ->check(Bounded(1, 10000));
  cmd->add_option("--warmup", f->options.warmup, "Untimed runs per operator")->check(Bounded(0, 10000));
  cmd->callback([f] {
    CheckWritable(f->out, "--out");
    if (!f->hardware_out.empty()) CheckWritable(f->hardware_out, "--hardware-out");
    auto model = sim::BuiltinModel(f->model);
    ThrowIfError(model.status());
    sim::WorkloadOptions w;
    w.micro_batch = f->micro_batch;
    w.tensor_parallel = f->tp;
    auto workload = sim::BuildWorkload(*model, w);
    ThrowIfError(workload.status());
    f->options.fp16 = model->bytes_per_value <= 2;
    auto timings = profiler::ProfileOperators(sim::DistinctOperators(*workload), f->options);
    ThrowIfError(timings.status());
    std::ofstream out(f->out);
    out << profiler::ProfileCsv(*timings, "frugal profile --model " + f->model + " --micro-batch " +
                                              std::to_string(f->micro_batch) + " on " + f->options.device);
    if (!out) throw RunError("cannot write " + f->out);
    std::printf("%zu operators timed -> %s\n", timings->size(), f->out.c_str());
    if (!f->hardware_out.empty()) {
      auto m = profiler::MeasureMachine(f->options);
      ThrowIfError(m.status());
      auto base = sim::BuiltinHardware("cpu-local");
      ThrowIfError(base.status());
      sim::HardwareSpec hw = profiler::ApplyMeasurement(*base, *m, "this-machine");
      std::ofstream hout(f->hardware_out);
      hout << sim::HardwareToToml(hw);
      if (!hout) throw RunError("cannot write " + f->hardware_out);
      std::printf(
          "GEMM %.3f TFLOP/s, memory %.1f GB/s, sparsify %.2f GB/s, sparse optimizer %.2f GB/s, combine %.2f GB/s "
          "-> %s\n",
          m->matmul_tflops, m->memory_bandwidth_gbs, m->sparsify_gbs, m->sparse_optimizer_gbs, m->combine_gbs,
          f->hardware_out.c_str());
    }
  });
}

}  // namespace frugal::cli
