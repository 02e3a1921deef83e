#include "frugal/engine/worker.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "control_kinds.h"
#include "frugal/comm/algorithms/collectives.h"
#include "frugal/engine/pipeline_record.h"
#include "sharded_eval.h"
#include "worker_impl.h"
#include "frugal/common/clock.h"

namespace frugal::engine {

namespace {

// LibTorch initialises modules from its process-wide default generator.
// Workers that run as threads of one process (tests, in-process runs) would
// otherwise interleave seeding and initialisation; this lock keeps "seed,
// then build the model" atomic. It guards torch's global, not state of ours.
std::mutex& TorchInitMutex() {
  static std::mutex mu;
  return mu;
}


}  // namespace

void Accumulate(PipelineStats* total, const PipelineStats& d) { AccumulateStats(total, d); }

void SetPipelineTimes(const PipelineStats& st, WorkerResult* result) {
  result->wait_s = st.wait_s;
  result->sparsify_s = st.sparsify_s;
  result->exchange_s = st.exchange_s;
  result->optimizer_s = st.optimizer_s;
}

// per_peer is indexed by rank, which a peer may change between generations:
// entry i sums what was sent to whoever was rank i.
void Accumulate(comm::TransportStats* total, const comm::TransportStats& d) {
  if (total->per_peer.size() < d.per_peer.size()) total->per_peer.resize(d.per_peer.size());
  auto add = [](comm::LinkCounters* to, const comm::LinkCounters& from) {
    *to += from;
    to->messages_in_flight = from.messages_in_flight;
  };
  for (size_t i = 0; i < d.per_peer.size(); ++i) add(&total->per_peer[i], d.per_peer[i]);
  add(&total->intra_cluster, d.intra_cluster);
  add(&total->inter_cluster, d.inter_cluster);
}

// What a worker needs whatever its world: the configuration checked, the
// device, the data and the model.
Status Worker::Impl::Prepare() {
  FRUGAL_RETURN_IF_ERROR(Validate(config));
  timeout = TimeoutOf(dist);
  device = torch::Device(options.device);
  if (options.threads > 0) torch::set_num_threads(options.threads);
  return BuildModel();
}

// A fixed world: the transport is given.
Status Worker::Impl::Init() {
  FRUGAL_RETURN_IF_ERROR(Prepare());
  // Every worker must run the same configuration.
  FRUGAL_RETURN_IF_ERROR(CheckSameConfiguration(*transport, SharedDigest(config), timeout));
  // --adapt auto reaches the engine resolved by the CLI (ResolveAdapt); from
  // the engine API, without a controller, it is off on every rank.
  const bool adapting = NeedsController(dist.adapt);
  if (adapting && rank() == 0 && policy == nullptr) {
    return Status::InvalidArgument(std::string("--adapt ") + NameOf(dist.adapt) + " needs a controller on rank 0");
  }
  FRUGAL_RETURN_IF_ERROR(PlanSteps());
  FRUGAL_RETURN_IF_ERROR(BuildAndResume());
  if (config.checkpoint.checkpoint_every > 0 && ClearsCheckpoints()) {
    FRUGAL_RETURN_IF_ERROR(ClearCheckpointsAfter(CheckpointDirOf(config), start_step));
  }
  if (adapting) {
    Decision initial;
    initial.density = DensityOf(dist);
    initial.batch_sizes = cursor->batch_sizes();
    if (sync->pipeline() == nullptr) {
      return Status::InvalidArgument(std::string("--adapt ") + NameOf(dist.adapt) + " needs --sync step");
    }
    protocol = std::make_unique<AdaptationProtocol>(transport.get(), sync->pipeline(), cursor.get(),
                                                    std::move(policy), initial, timeout);
  }
  // Rank 0's broadcast of the initial parameters returns once sent; the
  // clock waits until every rank has received them (Note [Training clock]).
  auto ready = comm::AllGather(*transport, ControlTag(start_step, kStart), comm::Bytes(), timeout);
  if (!ready.ok()) return ready.status().WithContext("waiting for every worker to start");
  return OpenReporter();
}

Status Worker::Impl::BuildModel() {
  FRUGAL_ASSIGN_OR_RETURN(data, train::LoadTrainingData(options));
  {
    std::lock_guard<std::mutex> lock(TorchInitMutex());
    torch::manual_seed(options.seed);
    FRUGAL_ASSIGN_OR_RETURN(model, models::CreateModel(options.model, data.train.num_classes));
  }
  model->to(device);
  train::MoveToDevice(&data, device);
  return Status::Ok();
}

Status Worker::Impl::PlanSteps() {
  std::vector<int64_t> batch_sizes(transport->world_size(), options.batch_size);
  if (options.global_batch > 0) {
    auto split = data::SplitGlobalBatch(options.global_batch, transport->world_size());
    if (!split.ok()) return split.status().WithContext("--global-batch");
    batch_sizes = std::move(*split);
  }
  FRUGAL_ASSIGN_OR_RETURN(data::BatchPlan plan, data::BatchPlan::Create(data.train.size, batch_sizes, options.seed, true));
  total_steps = options.epochs * plan.steps_per_epoch();
  if (options.max_steps > 0) total_steps = std::min(total_steps, options.max_steps);
  FRUGAL_ASSIGN_OR_RETURN(data::BatchCursor c, data::BatchCursor::Create(data.train.size, options.seed, batch_sizes));
  cursor = std::make_unique<data::BatchCursor>(std::move(c));
  FRUGAL_ASSIGN_OR_RETURN(train::LrSchedule sched, train::LrSchedule::Create(train::ScheduleOptions(options, total_steps)));
  schedule = std::make_unique<train::LrSchedule>(sched);
  return Status::Ok();
}

Status Worker::Impl::BuildSync(bool broadcast_initial) {
  const train::LrSchedule* sch = schedule.get();
  SyncInputs in;
  in.config = config;
  in.lr_at = [sch](int64_t t) { return sch->At(t); };
  in.outer = RunOuterStep();
  for (const auto& item : model->named_parameters(/*recurse=*/true)) in.params.emplace_back(item.key(), item.value());
  in.transport = transport.get();
  in.broadcast_initial = broadcast_initial;
  FRUGAL_ASSIGN_OR_RETURN(sync, CreateSyncStrategy(std::move(in)));
  return Status::Ok();
}

Status Worker::Impl::OpenReporter() {
  train::RunReporterOptions ro;
  std::string run_name = options.run_name.empty() ? options.model + "-distributed" : options.run_name;
  ro.metrics_path = (std::filesystem::path(options.runs_dir) / run_name / "metrics.jsonl").string();
  ro.log_every = options.log_every;
  ro.total_steps = total_steps;
  ro.quiet = options.quiet;
  ro.lead = rank() == 0;
  ro.append = start_step > 0 || generation.number > 1;
  // Note [Training clock]: wall_time_s and train_time_s count from the start
  // of training, after data loading, the configuration check and the initial
  // broadcast has reached every rank (a fixed world waits for all at kStart),
  // as bench/baselines/ddp.py's do (DDP's constructor broadcasts, then a
  // barrier); a later generation of an elastic run continues that clock.
  // Counting from the process start would put every worker's start-up
  // (seconds with 4 workers on 2 cores) into each time-to-accuracy figure.
  if (!training_started) training_started = clock.Now();
  ro.elapsed_offset_s = std::chrono::duration<double>(clock.Now() - *training_started).count();
  FRUGAL_ASSIGN_OR_RETURN(reporter, train::RunReporter::Create(ro));
  return Status::Ok();
}

std::vector<torch::Tensor> Worker::Impl::Buffers(bool floating_only) const {
  std::vector<torch::Tensor> out;
  for (auto& b : model->buffers()) {
    if (!floating_only || b.is_floating_point()) out.push_back(b);
  }
  return out;
}

void Worker::Impl::PrintHeader() const {
  if (!reporter->printing()) return;
  std::printf("frugal train: %d workers, model %s (%lld parameters, %zu buckets), %s, %lld steps, "
              "density %g, staleness %d, %s values, exchange %s\n",
              transport->world_size(), options.model.c_str(), static_cast<long long>(models::CountParameters(*model)),
              sync->replica().num_buckets(), data.train.name.c_str(), static_cast<long long>(total_steps),
              DensityOf(dist), dist.staleness, NameOf(dist.value_encoding), NameOf(sync->exchange()));
  const std::string schedule_line = sync->Describe();
  if (!schedule_line.empty()) std::printf("%s\n", schedule_line.c_str());
  std::printf("metrics: %s\n", reporter->metrics_path().c_str());
  std::fflush(stdout);
}

// Every rank averages its batch-norm statistics (Note [Batch-norm statistics]
// in replica.cc) and evaluates its share of the test set
// (Note [Sharded evaluation] in sharded_eval.cc); rank 0 records the result.
// Its seconds are left out of the run's train_time_s.
Status Worker::Impl::Evaluate(int64_t t, int64_t epoch) {
  const Clock::time_point started = clock.Now();
  FRUGAL_RETURN_IF_ERROR(sync->replica().AverageBuffers(t, Buffers(true)));
  train::Evaluation eval;
  FRUGAL_RETURN_IF_ERROR(sync->WithSyncedParameters([&]() -> Status {
    FRUGAL_ASSIGN_OR_RETURN(eval, EvaluateSharded(*transport, ControlTag(t, kEvaluation), timeout, *model, data.test,
                                                  device));
    return Status::Ok();
  }));
  const double eval_s = Seconds(clock.Now() - started);
  reporter->ExcludeFromTrainTime(eval_s);
  if (rank() != 0) return Status::Ok();
  nlohmann::json extra = eval.Fields();
  extra["evaluated_version"] = t - 1 - dist.staleness;
  extra["eval_s"] = eval_s;
  return reporter->Evaluated(t, epoch, eval.accuracy, /*record=*/true, extra);
}

// At the gate of iteration t: the parameters of version t-1-s, replica
// checks, checkpoint, membership check, evaluation and the controller's
// decision, in this order on every rank.
// kFinished: go on with iteration t; otherwise the generation ends here.
Result<LoopEnd> Worker::Impl::Gate(int64_t t, int64_t* evaluated_epoch) {
  const int64_t epoch = cursor->epoch();
  const bool check = dist.checksum_every > 0 && t % dist.checksum_every == 0;
  // The checkpoint and the snapshot come where the strategy's state is at
  // rest (Note [State at rest] in sync_strategy.h).
  const bool before_begin = sync->SavesBeforeBegin();
  FRUGAL_RETURN_IF_ERROR(before_begin ? sync->Settle(t) : sync->BeginIteration(t, check));
  if (config.checkpoint.checkpoint_every > 0) FRUGAL_RETURN_IF_ERROR(CheckpointGate(t));
  if (elastic && t > start_step && t % config.elastic.elastic_every == 0) {
    FRUGAL_ASSIGN_OR_RETURN(LoopEnd end, MembershipCheck(t));
    if (end != LoopEnd::kFinished) return end;
  } else if (elastic && t == start_step && !HasSnapshot(t)) {
    FRUGAL_RETURN_IF_ERROR(TakeSnapshot(t));  // a generation's start can be rolled back to
  }
  if (before_begin) FRUGAL_RETURN_IF_ERROR(sync->BeginIteration(t, check));
  const bool eval_now = t > 0 && (options.eval_every > 0 ? t % options.eval_every == 0 : epoch != *evaluated_epoch);
  *evaluated_epoch = epoch;
  if (eval_now) FRUGAL_RETURN_IF_ERROR(Evaluate(t, epoch));
  if (protocol && t > 0 && t % dist.decide_every == 0) {
    nlohmann::json record;
    FRUGAL_RETURN_IF_ERROR(protocol->Decide(t, reporter->Elapsed(), &record));
    if (!record.is_null()) FRUGAL_RETURN_IF_ERROR(reporter->Write(record));
    const std::string& reason = protocol->decision().reason;
    if (!reason.empty() && reason != "unchanged") reporter->Note("decision at step " + std::to_string(t) + ": " + reason);
  }
  return LoopEnd::kFinished;
}

// Forward and backward of iteration t on this worker's slice; returns the
// compute time (stretched by --compute-slowdown).
Result<double> Worker::Impl::ComputeStep(int64_t t, int64_t* samples) {
  const int world = transport->world_size();
  model->train();
  const auto c0 = clock.Now();
  std::vector<int64_t> indices = cursor->Slice(rank());
  train::Batch batch = train::MakeBatch(data.train, indices, device);
  // With unequal batch sizes each worker's mean loss is weighted by its
  // share of the global batch (times W: the exchange divides by W), so the
  // update is the mean over all samples of the step.
  const double weight = static_cast<double>(world) * static_cast<double>(indices.size()) /
                        static_cast<double>(cursor->global_batch());
  torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(batch.x), batch.y);
  (weight == 1.0 ? loss : loss * weight).backward();
  FRUGAL_RETURN_IF_ERROR(sync->EndBackward(t));
  const double loss_value = loss.item<double>();
  FRUGAL_RETURN_IF_ERROR(train::CheckLoss(loss_value, t, transport->topology().DescribeRank(rank())));
  double c = Seconds(clock.Now() - c0);
  if (dist.compute_slowdown > 1.0) {
    // Emulate a slower device: stretch this step's compute.
    std::this_thread::sleep_for(std::chrono::duration<double>(c * (dist.compute_slowdown - 1.0)));
    c *= dist.compute_slowdown;
  }
  *samples = static_cast<int64_t>(indices.size());
  if (protocol) protocol->AddStep(*samples, c);
  reporter->AddStep(loss_value, static_cast<double>(cursor->global_batch()), c);
  return c;
}

// The metrics record of the window ending after iteration t (rank 0).
Status Worker::Impl::Record(int64_t t, int64_t epoch) {
  const PipelineStats now = Stats();
  const comm::TransportStats traffic = transport->stats();
  const train::RunReporter::Window w = reporter->window();
  PipelineWindow pw = MeasureWindow(now, window_stats, traffic, window_traffic, static_cast<double>(w.steps),
                                    w.span_s, w.compute_s);
  pw.staleness = dist.staleness;
  pw.workers = transport->world_size();
  nlohmann::json extra = WindowJson(pw);
  extra["batch_sizes"] = cursor->batch_sizes();
  std::string line;
  if (protocol) {
    extra["bandwidth_mbit"] = protocol->decision().bandwidth_mbit;
    char adapt[96];
    std::snprintf(adapt, sizeof(adapt), "link ~%.0f Mbit/s  %s  batch %lld", protocol->decision().bandwidth_mbit,
                  DensityText(pw.density).c_str(), static_cast<long long>(cursor->global_batch()));
    line = ProgressText(pw, adapt);
  } else {
    line = ProgressText(pw, sync->Progress(pw.density));
  }
  FRUGAL_RETURN_IF_ERROR(reporter->CloseWindow(t + 1, epoch, schedule->At(t), extra, line));
  window_stats = now;
  window_traffic = traffic;
  return Status::Ok();
}

Result<WorkerResult> Worker::Impl::Run() {
  if (elastic) return RunElastic();
  PrintHeader();
  const comm::TransportStats traffic_at_start = transport->stats();
  FRUGAL_ASSIGN_OR_RETURN(LoopEnd end, Loop());
  (void)end;  // a fixed world only finishes
  return Conclude(start_step, traffic_at_start);
}

// The iterations of one world, from start_step until the run is over or
// (elastic) the membership changes at a check gate.
Result<LoopEnd> Worker::Impl::Loop() {
  window_traffic = transport->stats();
  window_stats = Stats();
  int64_t t = start_step;
  int64_t evaluated_epoch = cursor->epoch();
  while (t < total_steps && cursor->epoch() < options.epochs) {
    const int64_t epoch = cursor->epoch();
    FRUGAL_ASSIGN_OR_RETURN(LoopEnd gate, Gate(t, &evaluated_epoch));
    if (gate != LoopEnd::kFinished) {
      start_step = t;
      return gate;
    }
    int64_t samples = 0;
    FRUGAL_ASSIGN_OR_RETURN(double c, ComputeStep(t, &samples));
    compute_s += c;
    samples_total += static_cast<double>(cursor->global_batch());
    if (reporter->WindowDue(t + 1)) {
      FRUGAL_RETURN_IF_ERROR(Record(t, epoch));
    }
    cursor->Advance();
    if (elastic) elastic->ReportIteration(t);
    ++t;
  }
  start_step = t;
  return LoopEnd::kFinished;
}

// Drains the pipeline, checks the replicas one last time, averages the
// batch-norm statistics and evaluates the final parameters.
Result<WorkerResult> Worker::Impl::Conclude(int64_t t, const comm::TransportStats& traffic_at_start) {
  FRUGAL_RETURN_IF_ERROR(ReportCheckpoint(/*wait=*/true));  // the write in flight finishes
  WorkerResult result;
  result.train.epochs_completed = cursor->epoch();
  result.train.final_loss = reporter->last_loss();
  FRUGAL_RETURN_IF_ERROR(sync->Finish(t));
  FRUGAL_ASSIGN_OR_RETURN(result.final_checksum, sync->CheckReplicas(t));
  FRUGAL_RETURN_IF_ERROR(sync->replica().AverageBuffers(t, Buffers(true)));
  double accuracy = -1;
  if (rank() == 0) {
    const double train_time_s = reporter->TrainTime();  // before the final evaluation
    const train::Evaluation eval = train::EvaluateModel(*model, data.test, device);
    accuracy = eval.accuracy;
    result.train.final_val_loss = eval.text ? eval.loss : -1;
    reporter->Finish();
    FRUGAL_RETURN_IF_ERROR(reporter->Evaluated(t, std::max<int64_t>(0, result.train.epochs_completed - 1), accuracy,
                                               /*record=*/false));
    nlohmann::json final_record = eval.Fields();
    final_record.update({{"wall_time_s", reporter->Elapsed()},
                         {"train_time_s", train_time_s},
                         {"step", t},
                         {"test_accuracy", accuracy},
                         {"final", true}});
    FRUGAL_RETURN_IF_ERROR(reporter->Write(final_record));
    result.train.metrics_path = reporter->metrics_path();
  }
  PipelineStats st = finished_stats;  // the whole run: earlier generations, then this one
  Accumulate(&st, Stats());
  result.train.steps = t;
  result.train.final_test_accuracy = accuracy;
  result.train.wall_time_s = reporter->Elapsed();
  result.train.samples_per_s = samples_total / result.train.wall_time_s;
  result.compute_s = compute_s;
  SetPipelineTimes(st, &result);
  result.traffic = finished_traffic;
  Accumulate(&result.traffic, transport->stats().Since(traffic_at_start));
  return result;
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::~Worker() = default;

Result<std::unique_ptr<Worker>> Worker::Create(const RunConfig& config, std::unique_ptr<comm::Transport> transport,
                                               std::unique_ptr<AdaptationPolicy> policy) {
  auto impl = std::make_unique<Impl>();
  impl->config = ResolvePlan(config, HostFacts{});  // as the front end did (Note [One resolver])
  impl->transport = std::move(transport);
  impl->policy = std::move(policy);
  try {
    FRUGAL_RETURN_IF_ERROR(impl->Init());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

Result<std::unique_ptr<Worker>> Worker::CreateElastic(const RunConfig& config,
                                                      std::unique_ptr<comm::MembershipClient> membership) {
  if (!config.elastic.elastic) return Status::InvalidArgument("Worker::CreateElastic needs --elastic");
  auto impl = std::make_unique<Impl>();
  impl->config = ResolvePlan(config, HostFacts{});  // as the front end did (Note [One resolver])
  if (membership == nullptr) return Status::InvalidArgument("Worker::CreateElastic needs a membership client");
  try {
    FRUGAL_RETURN_IF_ERROR(impl->Prepare());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  const auto heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(impl->config.elastic.heartbeat_timeout_s * 1000));
  impl->elastic = std::make_unique<ElasticSession>(std::move(membership), impl->timeout, heartbeat_timeout, impl->clock);
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

std::atomic<bool>& Worker::leave_signal() {
  return impl_->elastic ? impl_->elastic->leave_signal() : impl_->leave_signal;
}

Result<WorkerResult> Worker::Run() {
  try {
    return impl_->Run();
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
}

std::vector<float> Worker::Parameters() const {
  std::vector<float> out;
  for (const auto& p : impl_->model->parameters()) {
    torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

}  // namespace frugal::engine
