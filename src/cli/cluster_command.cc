// `frugal cluster`: the elastic GPU-cluster scheduler.
//   simulate  run one policy (or --compare all) on a workload, trace-driven
//   workload  synthesise a workload from the Philly trace
//   bench     time one scheduling decision with many active jobs
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "input_checks.h"
#include "frugal/common/env.h"
#include "frugal/sched/decision_benchmark.h"
#ifdef FRUGAL_HAVE_SCHED_PLANNER
#include "frugal/sched/planner_throughput.h"
#endif
#include "frugal/sched/policy.h"
#include "frugal/sched/simulator.h"
#include "frugal/sched/throughput_model.h"
#include "frugal/sched/workload.h"
#include "frugal/sched/workload_generator.h"

namespace frugal::cli {
namespace {

namespace fs = std::filesystem;
using namespace frugal::sched;  // NOLINT: a .cc file, the whole command is about sched.

// Bounds of the simulated cluster: 65536 GPUs is beyond the largest
// clusters scheduled by one scheduler today and keeps a simulation within
// minutes; jobs: the Philly trace holds about 100k.
constexpr double kMaxNodes = 16384, kMaxGpusPerNode = 1024, kMaxGpus = 65536, kMaxJobs = 1000000;

void CheckClusterSize(int nodes, int gpus_per_node) {
  if (static_cast<double>(nodes) * gpus_per_node > kMaxGpus) {
    throw UsageError("--nodes x --gpus-per-node must be at most 65536 GPUs, got " +
                     std::to_string(static_cast<long long>(nodes) * gpus_per_node));
  }
}

struct ModelFlags {
  std::string traces;
  std::string table;
  std::string planner_apps;
};

void AddModelFlags(CLI::App* cmd, ModelFlags* f) {
  cmd->add_option("--traces", f->traces, "Directory of Pollux-format application traces (one sub-directory per app)");
  cmd->add_option("--table", f->table,
                  "CSV of plain throughput tables: application,total_samples,num_gpus,samples_per_s");
#ifdef FRUGAL_HAVE_SCHED_PLANNER
  cmd->add_option("--planner-apps", f->planner_apps,
                  "CSV of applications timed by the planner: application,model,hardware,total_samples");
#endif
}

ApplicationCatalog LoadCatalog(const ModelFlags& f) {
  if (f.traces.empty() && f.table.empty() && f.planner_apps.empty()) {
    throw UsageError("give --traces DIR (e.g. ../shared/data/scheduler/pollux-traces) and/or --table FILE");
  }
  ApplicationCatalog catalog;
  if (!f.traces.empty()) {
    Result<ApplicationCatalog> loaded = LoadPolluxTraces(f.traces);
    ThrowIfError(loaded.status());
    catalog = std::move(loaded).value();
  }
  if (!f.table.empty()) ThrowIfError(LoadThroughputTable(f.table, &catalog));
#ifdef FRUGAL_HAVE_SCHED_PLANNER
  if (!f.planner_apps.empty()) ThrowIfError(LoadPlannerApplications(f.planner_apps, &catalog));
#endif
  return catalog;
}

struct SimulateFlags {
  ModelFlags model;
  std::string workload;
  std::string policy = "afs-p";
  bool compare = false;
  std::string out;
  std::string plot;
  bool timing = false;
  int nodes = 16;
  int gpus_per_node = 4;
  double interval = 60;
  double realloc_cost = 30;
  double tiresias_threshold = 16 * 3600.0;
  double afsp_prior = 600;
  double stickiness_horizon = 600;
  double contended_horizon = 60;
  double long_job_seconds = PolicyOptions{}.long_job_seconds;
  std::string long_queue_order = "afs";  // PolicyOptions::long_queue_order: afs | fifo.
  double promote_knob = PolicyOptions{}.promote_knob;
  bool fit_aware_placement = PolicyOptions{}.fit_aware_placement;
};

void PrintHeader() {
  std::printf("%-14s %10s %10s %10s %10s %8s %9s\n", "policy", "avg_jct_s", "median_s", "p99_s", "makespan_s",
              "gpu_util", "reallocs");
}

void PrintRow(const SimulationResult& r) {
  std::printf("%-14s %10.0f %10.0f %10.0f %10.0f %8.3f %9ld\n", r.policy.c_str(), r.avg_jct, r.median_jct, r.p99_jct,
              r.makespan, r.gpu_utilization, r.num_reallocations);
}

void RunSimulate(const SimulateFlags& f) {
  CheckClusterSize(f.nodes, f.gpus_per_node);
  if (!f.out.empty() && !f.compare) CheckWritable(f.out, "--out");
  if (!f.plot.empty()) CheckWritable(f.plot, "--plot");
  ApplicationCatalog catalog = LoadCatalog(f.model);
  Result<std::vector<JobSpec>> workload = LoadWorkload(f.workload);
  ThrowIfError(workload.status());
  SimulatorOptions options;
  options.cluster = {f.nodes, f.gpus_per_node};
  options.round_interval = f.interval;
  options.reallocation_cost = f.realloc_cost;
  PolicyOptions popts;
  popts.tiresias_threshold_gpu_seconds = f.tiresias_threshold;
  popts.afsp_prior_seconds = f.afsp_prior;
  popts.reallocation_cost = f.realloc_cost;
  popts.stickiness_horizon = f.stickiness_horizon;
  popts.contended_horizon = f.contended_horizon;
  popts.long_job_seconds = f.long_job_seconds;
  popts.long_queue_order = f.long_queue_order == "fifo" ? LongQueueOrder::kSubmission : LongQueueOrder::kAfs;
  popts.promote_knob = f.promote_knob;
  popts.fit_aware_placement = f.fit_aware_placement;

  std::vector<std::string> policies = f.compare ? PolicyNames() : std::vector<std::string>{f.policy};
  if (f.compare && !f.out.empty()) fs::create_directories(f.out);
  std::vector<std::unique_ptr<Policy>> created;
  for (const std::string& name : policies) {
    Result<std::unique_ptr<Policy>> policy = CreatePolicy(name, popts);
    ThrowIfError(policy.status());
    created.push_back(std::move(policy).value());
  }
  std::vector<std::string> csvs;
  for (size_t p = 0; p < created.size(); ++p) {
    const std::string& name = policies[p];
    Simulator sim(catalog, *created[p], options);
    const Clock::time_point start = Env::Default().Now();
    Result<SimulationResult> result = sim.Run(workload.value());
    const double wall = Seconds(Env::Default().Now() - start);
    ThrowIfError(result.status());
    if (p == 0) PrintHeader();
    PrintRow(result.value());
    if (f.timing) {
      std::printf(
          "  timing: %zu jobs, %ld rounds, wall %.2f s, decisions total %.2f s, mean %.3f ms, "
          "max %.3f ms (%ld active jobs; most active in one round: %ld)\n",
          workload->size(), result->num_rounds, wall, result->decision_seconds_total,
          1e3 * result->decision_seconds_total / std::max<long>(1, result->num_rounds),
          1e3 * result->decision_seconds_max, result->active_jobs_at_slowest, result->max_active_jobs);
    }
    std::string csv;
    if (!f.out.empty()) csv = f.compare ? (fs::path(f.out) / (name + ".csv")).string() : f.out;
    if (csv.empty() && !f.plot.empty()) {
      csv = (fs::temp_directory_path() / ("frugal-jct-" + name + ".csv")).string();
    }
    if (!csv.empty()) {
      ThrowIfError(WriteJobResults(csv, result.value()));
      csvs.push_back(csv);
    }
  }
  if (!f.out.empty()) std::printf("per-job results: %s\n", f.out.c_str());
  if (!f.plot.empty()) {
    // The binary plots nothing itself and runs nothing from a source tree
    // (an installed frugal has none): the CSVs are written, and the command
    // that draws them with the matplotlib script of the source tree is said.
    std::string cmd = "python3 bench/sched/plot_jct_cdf.py --out '" + f.plot + "'";
    for (const std::string& c : csvs) cmd += " '" + c + "'";
    std::printf("JCT CDF plot: from a Frugal source tree, run\n  %s\n", cmd.c_str());
  }
}

struct WorkloadFlags {
  ModelFlags model;
  std::string from;
  std::string out;
  WorkloadGeneratorOptions gen;
};

void RunWorkload(const WorkloadFlags& f) {
  CheckWritable(f.out, "--out");
  ApplicationCatalog catalog = LoadCatalog(f.model);
  Result<std::vector<PhillyJob>> trace = LoadPhillyTrace(f.from);
  ThrowIfError(trace.status());
  Result<std::vector<JobSpec>> jobs = GenerateWorkload(trace.value(), catalog, f.gen);
  ThrowIfError(jobs.status());
  ThrowIfError(WriteWorkload(f.out, jobs.value()));
  std::printf("wrote %zu jobs spanning %.0f s to %s\n", jobs->size(), jobs->back().submit_time, f.out.c_str());
}

struct BenchFlags {
  ModelFlags model;
  std::string workload;
  std::string policy = "afs-p";
  int jobs = 1000;
  int nodes = 256;
  int gpus_per_node = 4;
  int repetitions = 11;
};

void RunBench(const BenchFlags& f) {
  CheckClusterSize(f.nodes, f.gpus_per_node);
  ApplicationCatalog catalog = LoadCatalog(f.model);
  Result<std::vector<JobSpec>> workload = LoadWorkload(f.workload);
  ThrowIfError(workload.status());
  std::vector<std::string> names = f.policy == "all" ? PolicyNames() : std::vector<std::string>{f.policy};
  for (const std::string& name : names) {
    Result<std::unique_ptr<Policy>> policy = CreatePolicy(name);
    ThrowIfError(policy.status());
    Result<DecisionTiming> t =
        TimeDecision(catalog, **policy, workload.value(), {f.nodes, f.gpus_per_node}, f.jobs, f.repetitions, 1);
    ThrowIfError(t.status());
    std::printf("%-11s jobs=%d gpus=%d allocated=%d decision median %.3f ms, max %.3f ms (%d reps)\n", name.c_str(),
                t->num_jobs, f.nodes * f.gpus_per_node, t->gpus_allocated, 1e3 * t->median, 1e3 * t->max,
                f.repetitions);
  }
}

void AddSimulate(CLI::App* cluster) {
  auto sim_flags = std::make_shared<SimulateFlags>();
  auto* sim =
      cluster->add_subcommand("simulate", "Run a scheduling policy on a workload in the trace-driven simulator");
  AddModelFlags(sim, &sim_flags->model);
  sim->add_option("--workload", sim_flags->workload, "Workload CSV: name,time,application,num_replicas,batch_size")
      ->required();
  std::string policy_help = "Policy: ";
  for (const auto& n : PolicyNames()) policy_help += n + " ";
  sim->add_option("--policy", sim_flags->policy, policy_help)->capture_default_str();
  sim->add_flag("--compare", sim_flags->compare, "Run every policy on the workload and print one table");
  sim->add_option("--out", sim_flags->out,
                  "Per-job results CSV (with --compare: a directory, one <policy>.csv per policy)");
  sim->add_option("--plot", sim_flags->plot,
                  "Write the per-job CSVs and print the command that plots their JCT CDFs into this PNG "
                  "(bench/sched/plot_jct_cdf.py, matplotlib)");
  sim->add_flag("--timing", sim_flags->timing, "Print wall time and per-decision times");
  sim->add_option("--nodes", sim_flags->nodes, "Nodes in the cluster")
      ->capture_default_str()
      ->check(Bounded(1, kMaxNodes));
  sim->add_option("--gpus-per-node", sim_flags->gpus_per_node, "GPUs per node")
      ->capture_default_str()
      ->check(Bounded(1, kMaxGpusPerNode));
  sim->add_option("--interval", sim_flags->interval, "Seconds between scheduling rounds")
      ->capture_default_str()
      ->check(Bounded(1, 86400, "every round is a full scheduling decision"));
  sim->add_option("--realloc-cost", sim_flags->realloc_cost, "Seconds a job pauses when its placement changes")
      ->capture_default_str()
      ->check(Bounded(0, 86400));
  sim->add_option("--tiresias-threshold", sim_flags->tiresias_threshold,
                  "Tiresias: GPU-seconds of attained service before demotion")
      ->capture_default_str()
      ->check(Bounded(0, 1e12));
  sim->add_option("--afsp-prior", sim_flags->afsp_prior,
                  "AFS-P: assumed remaining work of a new job, in seconds at one GPU")
      ->capture_default_str()
      ->check(Bounded(0, 1e9));
  sim->add_option("--stickiness-horizon", sim_flags->stickiness_horizon,
                  "AFS: seconds a new allocation is expected to last; a running job is resized only if that gains "
                  "more than cost / horizon in throughput (0 disables)")
      ->capture_default_str()
      ->check(Bounded(0, 1e9));
  sim->add_option("--contended-horizon", sim_flags->contended_horizon,
                  "AFS-P, afs-goodput: while GPUs are contended, seconds over which a running job's resize is valued "
                  "against --realloc-cost (Note [Switch cost]; about one round)")
      ->capture_default_str()
      ->check(Bounded(1e-3, 1e9));
  sim->add_option("--long-job-seconds", sim_flags->long_job_seconds,
                  "afs-goodput-2q: estimated work (seconds at one GPU) from which a job waits for the short ones "
                  "(Note [Two queues])")
      ->capture_default_str()
      ->check(Bounded(1, 1e12));
  sim->add_option("--long-queue-order", sim_flags->long_queue_order,
                  "afs-goodput-2q: how long jobs share what short ones leave: afs (the AFS rule) or fifo (oldest "
                  "first; Note [Long queue order])")
      ->capture_default_str()
      ->check(CLI::IsMember({"afs", "fifo"}));
  sim->add_option("--promote-knob", sim_flags->promote_knob,
                  "afs-goodput-2q: a long job whose service (GPU-seconds / requested GPUs) is at most 1 / (1 + K) "
                  "of its time in the system returns to the short queue (Note [Promotion]; 0 disables)")
      ->capture_default_str()
      ->check(Bounded(0, 1e9));
  sim->add_option("--fit-aware-placement", sim_flags->fit_aware_placement,
                  "afs-goodput-2q: a job whose GPUs would be spread over more nodes than needed may take fewer GPUs "
                  "or keep its current ones where that runs faster (Note [Fit-aware placement])")
      ->capture_default_str();
  AddConfigOption(sim);
  sim->callback([sim, sim_flags] {
    if (ApplyConfigAndMaybePrint(sim)) return;
    RunSimulate(*sim_flags);
  });
}

void AddWorkload(CLI::App* cluster) {
  auto wl_flags = std::make_shared<WorkloadFlags>();
  auto* wl = cluster->add_subcommand("workload", "Synthesise a workload from the Philly trace");
  AddModelFlags(wl, &wl_flags->model);
  wl->add_option("--from", wl_flags->from, "philly.csv (timestamp,duration,num_gpus,gpu_time,cluster)")->required();
  wl->add_option("--out", wl_flags->out, "Workload CSV to write")->required();
  wl->add_option("--jobs", wl_flags->gen.num_jobs, "Number of jobs")
      ->capture_default_str()
      ->check(Bounded(1, kMaxJobs));
  wl->add_option("--gpus", wl_flags->gen.cluster_gpus, "GPUs in the target cluster")
      ->capture_default_str()
      ->check(Bounded(1, kMaxGpus));
  wl->add_option("--gpus-per-node", wl_flags->gen.gpus_per_node, "GPUs per node")
      ->capture_default_str()
      ->check(Bounded(1, kMaxGpusPerNode));
  wl->add_option("--load", wl_flags->gen.load, "Offered load: requested GPU-time / (GPUs x span)")
      ->capture_default_str()
      ->check(Bounded(1e-3, 100));
  wl->add_option("--seed", wl_flags->gen.seed, "Seed for the window of the trace")->capture_default_str();
  AddConfigOption(wl);
  wl->callback([wl, wl_flags] {
    if (ApplyConfigAndMaybePrint(wl)) return;
    RunWorkload(*wl_flags);
  });
}

void AddBench(CLI::App* cluster) {
  auto bench_flags = std::make_shared<BenchFlags>();
  auto* bench = cluster->add_subcommand("bench", "Time one scheduling decision with many active jobs");
  AddModelFlags(bench, &bench_flags->model);
  bench->add_option("--workload", bench_flags->workload, "Workload CSV whose first --jobs jobs are made active")
      ->required();
  bench->add_option("--policy", bench_flags->policy, "Policy name or 'all'")->capture_default_str();
  bench->add_option("--jobs", bench_flags->jobs, "Active jobs")->capture_default_str()->check(Bounded(1, kMaxJobs));
  bench->add_option("--nodes", bench_flags->nodes, "Nodes")->capture_default_str()->check(Bounded(1, kMaxNodes));
  bench->add_option("--gpus-per-node", bench_flags->gpus_per_node, "GPUs per node")
      ->capture_default_str()
      ->check(Bounded(1, kMaxGpusPerNode));
  bench->add_option("--repetitions", bench_flags->repetitions, "Timed decisions")
      ->capture_default_str()
      ->check(Bounded(1, 10000));
  bench->callback([bench_flags] { RunBench(*bench_flags); });
}

}  // namespace

void AddClusterCommand(CLI::App& app) {
  auto* cluster = app.add_subcommand("cluster", "Elastic GPU-cluster scheduling: simulate policies on traces");
  cluster->require_subcommand(1);
  AddSimulate(cluster);
  AddWorkload(cluster);
  AddBench(cluster);
#ifdef FRUGAL_HAVE_CLUSTER
  AddClusterServiceCommands(cluster);
#endif
}

}  // namespace frugal::cli
