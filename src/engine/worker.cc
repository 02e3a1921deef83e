#include "frugal/engine/worker.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "frugal/comm/collectives.h"
#include "frugal/common/jsonl_writer.h"
#include "frugal/data/batch_plan.h"
#include "frugal/engine/adaptation.h"
#include "frugal/engine/gradient_pipeline.h"
#include "frugal/models/model.h"
#include "frugal/train/progress.h"
#include "frugal/train/training_data.h"

namespace frugal::engine {

namespace {

enum ControlKind : uint32_t {
  kChecksum = 1,
  kBatchNorm = 2,
  kConfig = 3,
  kInitialParams = 4,
  kTelemetry = 5,
  kDecision = 6,
};

// LibTorch initialises modules from its process-wide default generator.
// Workers that run as threads of one process (tests, in-process runs) would
// otherwise interleave seeding and initialisation; this lock keeps "seed,
// then build the model" atomic. It guards torch's global, not state of ours.
std::mutex& TorchInitMutex() {
  static std::mutex mu;
  return mu;
}

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Where one parameter lives inside the flat buckets.
struct ParamSlot {
  torch::Tensor param;
  size_t bucket = 0;
  size_t offset = 0;  // in elements, inside the bucket
  size_t numel = 0;
};

compress::ValueEncoding ValueEncodingOf(const std::string& s) {
  if (s == "fp32") return compress::ValueEncoding::kFp32;
  if (s == "bf16") return compress::ValueEncoding::kBf16;
  return compress::ValueEncoding::kFp16;
}

// A digest of the options every worker must agree on (not the per-worker ones).
uint64_t SharedConfigDigest(const train::TrainOptions& o) {
  std::string s = o.model + "|" + o.dataset + "|" + std::to_string(o.synthetic_train_size) + "|" +
                  std::to_string(o.epochs) + "|" + std::to_string(o.max_steps) + "|" + std::to_string(o.batch_size) +
                  "|" + o.optimizer + "|" + std::to_string(o.lr) + "|" + std::to_string(o.momentum) + "|" +
                  std::to_string(o.weight_decay) + "|" + std::to_string(o.nesterov) + "|" + o.lr_schedule + "|" +
                  std::to_string(o.warmup_steps) + "|" + std::to_string(o.seed) + "|" + std::to_string(o.density) +
                  "|" + o.sparsifier + "|" + o.value_encoding + "|" + std::to_string(o.staleness) + "|" +
                  std::to_string(o.bucket_mb) + "|" + o.exchange + "|" + std::to_string(o.checksum_every) + "|" +
                  std::to_string(o.dgc_momentum) + "|" + o.adapt + "|" + std::to_string(o.decide_every);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

comm::Bytes U64Bytes(uint64_t v) {
  comm::Bytes b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

uint64_t BytesU64(const comm::Bytes& b) {
  uint64_t v = 0;
  if (b.size() == 8) std::memcpy(&v, b.data(), 8);
  return v;
}

}  // namespace

class Worker::Impl {
 public:
  train::TrainOptions options;
  std::unique_ptr<comm::Transport> transport;
  torch::Device device{torch::kCPU};
  train::TrainingData data;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<data::BatchPlan> plan;      // fixed-size plan: only sizes the run
  std::unique_ptr<data::BatchCursor> cursor;  // the data position; batch sizes may change
  std::unique_ptr<AdaptationPolicy> policy;   // rank 0 with --adapt on
  Decision decision;                          // in force since decision.effective_iteration
  std::unique_ptr<train::LrSchedule> schedule;
  std::unique_ptr<GradientPipeline> pipeline;
  std::unique_ptr<JsonlWriter> metrics;  // rank 0 only
  std::vector<ParamSlot> slots;
  std::vector<std::vector<size_t>> bucket_params;  // slot indices per bucket
  int64_t total_steps = 0;
  Clock::time_point run_start;
  std::chrono::milliseconds timeout{60000};

  // Gradient hand-over state of the iteration in backward (compute thread).
  int64_t current_iteration = 0;
  std::vector<size_t> pending;      // params still missing per bucket
  std::vector<bool> got_grad;       // per slot
  Status hook_error;

  int rank() const { return transport->rank(); }
  Status Init();
  Result<WorkerResult> Run();
  void OnGradient(size_t slot_index, const torch::Tensor& grad);
  Status SubmitMissing();
  void CopyOut(size_t bucket, Span<const float> master);
  Status CompareChecksums(int64_t t, uint64_t* checksum);

  // Measurements since the last decision point.
  struct TelemetryWindow {
    Clock::time_point start;
    int64_t iterations = 0;
    int64_t samples = 0;
    double compute_s = 0;
    PipelineStats pipeline;
    comm::TransportStats traffic;
  };
  TelemetryWindow StartWindow() const {
    TelemetryWindow w;
    w.start = Clock::now();
    w.pipeline = pipeline->stats();
    w.traffic = transport->stats();
    return w;
  }
  Status Adapt(int64_t t, TelemetryWindow* window);
  Status AverageBatchNorm(int64_t t);
};

Status Worker::Impl::Init() {
  FRUGAL_RETURN_IF_ERROR(options.Validate());
  timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));
  device = torch::Device(options.device);
  if (options.threads > 0) torch::set_num_threads(options.threads);

  // Every worker must run the same configuration.
  {
    auto digests = comm::AllGather(*transport, ControlTag(0, kConfig), U64Bytes(SharedConfigDigest(options)), timeout);
    if (!digests.ok()) return digests.status().WithContext("exchanging run configuration");
    for (int r = 0; r < transport->world_size(); ++r) {
      if ((*digests)[r] != (*digests)[rank()]) {
        return Status::InvalidArgument("worker " + transport->topology().DescribeRank(r) +
                                       " runs a different configuration than " +
                                       transport->topology().DescribeRank(rank()) +
                                       " (start every worker with the same config file and flags)");
      }
    }
  }

  FRUGAL_ASSIGN_OR_RETURN(data, train::LoadTrainingData(options));
  {
    std::lock_guard<std::mutex> lock(TorchInitMutex());
    torch::manual_seed(options.seed);
    FRUGAL_ASSIGN_OR_RETURN(model, models::CreateModel(options.model, data.train.num_classes));
  }
  model->to(device);
  std::vector<int64_t> batch_sizes(transport->world_size(), options.batch_size);
  FRUGAL_ASSIGN_OR_RETURN(data::BatchPlan p, data::BatchPlan::Create(data.train.size, batch_sizes, options.seed, true));
  plan = std::make_unique<data::BatchPlan>(std::move(p));
  total_steps = options.epochs * plan->steps_per_epoch();
  FRUGAL_ASSIGN_OR_RETURN(data::BatchCursor c, data::BatchCursor::Create(data.train.size, options.seed, batch_sizes));
  cursor = std::make_unique<data::BatchCursor>(std::move(c));
  decision.density = options.density;
  decision.batch_sizes = batch_sizes;
  if (options.adapt != "off" && rank() == 0 && policy == nullptr) {
    return Status::InvalidArgument("--adapt " + options.adapt + " needs a controller on rank 0");
  }
  if (options.max_steps > 0) total_steps = std::min(total_steps, options.max_steps);
  FRUGAL_ASSIGN_OR_RETURN(train::LrSchedule sched, train::LrSchedule::Create(train::ScheduleOptions(options, total_steps)));
  schedule = std::make_unique<train::LrSchedule>(sched);

  // Buckets: parameters in reverse order (the order backward produces their
  // gradients), packed until a bucket reaches bucket_mb. A parameter is never
  // split across buckets.
  auto named = model->named_parameters(/*recurse=*/true);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : named) params.emplace_back(item.key(), item.value());
  std::reverse(params.begin(), params.end());
  const size_t cap = static_cast<size_t>(options.bucket_mb * 1024 * 1024 / sizeof(float));
  std::vector<BucketSpec> specs;
  for (auto& [name, param] : params) {
    size_t n = static_cast<size_t>(param.numel());
    if (specs.empty() || (specs.back().initial.size() > 0 && specs.back().initial.size() + n > cap)) {
      specs.emplace_back();
      bucket_params.emplace_back();
    }
    BucketSpec& spec = specs.back();
    ParamSlot slot;
    slot.param = param;
    slot.bucket = specs.size() - 1;
    slot.offset = spec.initial.size();
    slot.numel = n;
    torch::Tensor cpu = param.detach().to(torch::kCPU).contiguous();
    spec.initial.insert(spec.initial.end(), cpu.data_ptr<float>(), cpu.data_ptr<float>() + n);
    spec.name += (spec.name.empty() ? "" : "+") + name;
    bucket_params.back().push_back(slots.size());
    slots.push_back(slot);
  }

  // Like DDP, every replica starts from rank 0's parameters, so replicas
  // agree even if their LibTorch builds initialise differently.
  for (size_t b = 0; b < specs.size(); ++b) {
    comm::Bytes mine;
    if (rank() == 0) {
      mine.resize(specs[b].initial.size() * sizeof(float));
      std::memcpy(mine.data(), specs[b].initial.data(), mine.size());
    }
    auto got = comm::Broadcast(*transport, ControlTag(b, kInitialParams), 0, std::move(mine), timeout);
    if (!got.ok()) return got.status().WithContext("receiving the initial parameters");
    if (got->size() != specs[b].initial.size() * sizeof(float)) {
      return Status::Corruption("initial parameters of bucket " + specs[b].name + " have the wrong size");
    }
    std::memcpy(specs[b].initial.data(), got->data(), got->size());
  }

  PipelineOptions po;
  po.sparsifier = options.sparsifier;
  po.density = options.density;
  po.wire.values = ValueEncodingOf(options.value_encoding);
  po.wire.indices = options.sparsifier == "block" ? compress::IndexEncoding::kBlockId
                                                  : compress::IndexEncoding::kDeltaVarint;
  po.staleness = options.staleness;
  po.cpu_threads = options.cpu_threads;
  po.dgc_momentum = static_cast<float>(options.dgc_momentum);
  po.optimizer.kind = options.optimizer;
  po.optimizer.lr = options.lr;
  po.optimizer.weight_decay = options.weight_decay;
  po.optimizer.momentum = options.momentum;
  po.optimizer.dampening = options.dampening;
  po.optimizer.nesterov = options.nesterov;
  po.optimizer.beta1 = options.beta1;
  po.optimizer.beta2 = options.beta2;
  po.optimizer.eps = options.eps;
  po.exchange.timeout = timeout;
  po.exchange.algorithm = options.exchange == "flat"           ? comm::ExchangeAlgorithm::kFlat
                          : options.exchange == "hierarchical" ? comm::ExchangeAlgorithm::kHierarchical
                                                               : comm::ExchangeAlgorithm::kAuto;
  po.seed = options.seed;
  const train::LrSchedule* sch = schedule.get();
  po.lr_at = [sch](int64_t t) { return sch->At(t); };
  FRUGAL_ASSIGN_OR_RETURN(pipeline, GradientPipeline::Create(po, std::move(specs), transport.get()));

  pending.assign(bucket_params.size(), 0);
  got_grad.assign(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i].param.register_hook([this, i](torch::Tensor grad) { OnGradient(i, grad); });
  }

  if (rank() == 0) {
    std::string run_name = options.run_name.empty() ? options.model + "-distributed" : options.run_name;
    std::string path = (std::filesystem::path(options.runs_dir) / run_name / "metrics.jsonl").string();
    FRUGAL_ASSIGN_OR_RETURN(metrics, JsonlWriter::Open(path, true));
  }
  return Status::Ok();
}

void Worker::Impl::OnGradient(size_t i, const torch::Tensor& grad) {
  if (!hook_error.ok() || got_grad[i]) return;
  const ParamSlot& slot = slots[i];
  Span<float> buf = pipeline->GradBuffer(slot.bucket, current_iteration);
  torch::Tensor g = grad.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  std::memcpy(buf.data() + slot.offset, g.data_ptr<float>(), slot.numel * sizeof(float));
  got_grad[i] = true;
  if (--pending[slot.bucket] == 0) {
    Status s = pipeline->Submit(slot.bucket, current_iteration);
    if (!s.ok()) hook_error = s;
  }
}

// Parameters that got no gradient this iteration (unused by the forward)
// contribute zeros, so every bucket is submitted every iteration.
Status Worker::Impl::SubmitMissing() {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (got_grad[i]) continue;
    const ParamSlot& slot = slots[i];
    Span<float> buf = pipeline->GradBuffer(slot.bucket, current_iteration);
    std::fill(buf.data() + slot.offset, buf.data() + slot.offset + slot.numel, 0.0f);
    got_grad[i] = true;
    if (--pending[slot.bucket] == 0) FRUGAL_RETURN_IF_ERROR(pipeline->Submit(slot.bucket, current_iteration));
  }
  return Status::Ok();
}

void Worker::Impl::CopyOut(size_t bucket, Span<const float> master) {
  torch::NoGradGuard no_grad;
  for (size_t i : bucket_params[bucket]) {
    const ParamSlot& slot = slots[i];
    torch::Tensor src = torch::from_blob(const_cast<float*>(master.data() + slot.offset), slot.param.sizes(),
                                         torch::kFloat32);
    slot.param.copy_(src);
  }
}

Status Worker::Impl::CompareChecksums(int64_t t, uint64_t* checksum) {
  *checksum = pipeline->Checksum();
  auto all = comm::AllGather(*transport, ControlTag(t, kChecksum), U64Bytes(*checksum), timeout);
  if (!all.ok()) return all.status().WithContext("comparing replica checksums at step " + std::to_string(t));
  for (int r = 0; r < transport->world_size(); ++r) {
    if (BytesU64((*all)[r]) != *checksum) {
      return Status::Internal("replicas diverged at step " + std::to_string(t) + ": " +
                              transport->topology().DescribeRank(r) + " has parameter checksum " +
                              std::to_string(BytesU64((*all)[r])) + ", " +
                              transport->topology().DescribeRank(rank()) + " has " + std::to_string(*checksum));
    }
  }
  return Status::Ok();
}

// Note [Batch-norm statistics]: running means/variances are not gradients and
// are not exchanged every step; each replica tracks its own shard. Before
// every evaluation (and at the end) the float buffers are averaged across
// workers (an all-gather of the concatenated buffers, summed in rank order
// so every replica gets identical values); integer counters are left alone.
Status Worker::Impl::AverageBatchNorm(int64_t t) {
  std::vector<torch::Tensor> buffers;
  for (auto& b : model->buffers()) {
    if (b.is_floating_point()) buffers.push_back(b);
  }
  if (buffers.empty() || transport->world_size() == 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::cat([&] {
    std::vector<torch::Tensor> v;
    for (auto& b : buffers) v.push_back(b.detach().to(torch::kCPU, torch::kFloat32).flatten());
    return v;
  }()).contiguous();
  comm::Bytes mine(flat.numel() * sizeof(float));
  std::memcpy(mine.data(), flat.data_ptr<float>(), mine.size());
  auto all = comm::AllGather(*transport, ControlTag(t, kBatchNorm), std::move(mine), timeout);
  if (!all.ok()) return all.status().WithContext("averaging batch-norm statistics");
  torch::Tensor sum = torch::zeros_like(flat);
  for (auto& part : *all) {
    if (part.size() != static_cast<size_t>(flat.numel()) * sizeof(float)) {
      return Status::Corruption("batch-norm statistics of a peer have the wrong size");
    }
    sum += torch::from_blob(part.data(), {flat.numel()}, torch::kFloat32);
  }
  sum /= static_cast<double>(transport->world_size());
  int64_t offset = 0;
  for (auto& b : buffers) {
    b.copy_(sum.slice(0, offset, offset + b.numel()).view(b.sizes()));
    offset += b.numel();
  }
  return Status::Ok();
}

// The decision protocol (docs/architecture.md): at the gate of iteration t
// every worker all-gathers its telemetry, rank 0's policy decides, rank 0
// broadcasts the decision, and every worker applies it from iteration t on:
// the pipeline's density and learning-rate scale for tasks >= t, and the
// batch sizes of the data cursor from this step. All of it happens before
// any worker submits a gradient of iteration t, so all switch together.
Status Worker::Impl::Adapt(int64_t t, TelemetryWindow* window) {
  const bool multi_cluster = transport->topology().num_clusters() > 1;
  const comm::TransportStats traffic = transport->stats().Since(window->traffic);
  const comm::LinkCounters& link = multi_cluster ? traffic.inter_cluster : traffic.intra_cluster;
  PipelineStats ps = pipeline->stats();
  WorkerTelemetry mine;
  mine.rank = rank();
  mine.iterations = window->iterations;
  mine.window_s = Seconds(Clock::now() - window->start);
  mine.samples = window->samples;
  mine.compute_s = window->compute_s;
  mine.wait_s = ps.wait_s - window->pipeline.wait_s;
  mine.sparsify_s = ps.sparsify_s - window->pipeline.sparsify_s;
  mine.optimizer_s = ps.optimizer_s - window->pipeline.optimizer_s;
  mine.link_bytes = static_cast<double>(link.bytes_acked);  // bytes and busy time of the same transfers
  mine.link_busy_s = link.send_busy_s;
  auto all = comm::AllGather(*transport, ControlTag(t, kTelemetry), mine.Serialize(), timeout);
  if (!all.ok()) return all.status().WithContext("gathering telemetry at step " + std::to_string(t));
  comm::Bytes decided;
  std::vector<WorkerTelemetry> telemetry;  // rank 0: every worker's, for the metrics record
  if (rank() == 0) {
    for (const auto& bytes : *all) {
      FRUGAL_ASSIGN_OR_RETURN(WorkerTelemetry w, WorkerTelemetry::Deserialize(bytes));
      telemetry.push_back(w);
    }
    Decision d = policy->Decide(t, telemetry, decision);
    d.effective_iteration = t;
    decided = d.Serialize();
  }
  auto got = comm::Broadcast(*transport, ControlTag(t, kDecision), 0, std::move(decided), timeout);
  if (!got.ok()) return got.status().WithContext("receiving the controller's decision at step " + std::to_string(t));
  FRUGAL_ASSIGN_OR_RETURN(Decision d, Decision::Deserialize(*got));
  if (d.effective_iteration != t) return Status::Corruption("decision for the wrong iteration");
  if (d.batch_sizes.empty()) d.batch_sizes = decision.batch_sizes;
  if (static_cast<int>(d.batch_sizes.size()) != transport->world_size()) {
    return Status::Corruption("decision has " + std::to_string(d.batch_sizes.size()) + " batch sizes for " +
                              std::to_string(transport->world_size()) + " workers");
  }
  FRUGAL_RETURN_IF_ERROR(pipeline->SetFrom(t, d.density, d.lr_scale));
  FRUGAL_RETURN_IF_ERROR(cursor->SetBatchSizes(d.batch_sizes));
  decision = d;
  if (metrics) {
    // What the controller saw: per worker, its limiting link's acknowledged
    // bytes and busy time, and its compute, over the window.
    nlohmann::json seen = nlohmann::json::array();
    for (const auto& w : telemetry) {
      seen.push_back({{"rank", w.rank},
                      {"link_bytes", w.link_bytes},
                      {"link_busy_s", w.link_busy_s},
                      {"window_s", w.window_s},
                      {"samples", w.samples},
                      {"compute_s", w.compute_s}});
    }
    FRUGAL_RETURN_IF_ERROR(metrics->Write({{"wall_time_s", Seconds(Clock::now() - run_start)},
                                           {"step", t},
                                           {"decision",
                                            {{"density", d.density},
                                             {"batch_sizes", d.batch_sizes},
                                             {"lr_scale", d.lr_scale},
                                             {"bandwidth_mbit", d.bandwidth_mbit},
                                             {"predicted_iteration_s", d.predicted_iteration_s},
                                             {"reason", d.reason}}},
                                           {"telemetry", seen}}));
  }
  *window = StartWindow();
  return Status::Ok();
}

Result<WorkerResult> Worker::Impl::Run() {
  const auto start = Clock::now();
  run_start = start;
  auto elapsed = [&] { return Seconds(Clock::now() - start); };
  const bool lead = rank() == 0;
  const int world = transport->world_size();
  train::ProgressReporter progress(stdout, options.log_every, (options.quiet || !lead) ? 0 : -1);
  auto copy_out = [this](size_t b, Span<const float> m) { CopyOut(b, m); };
  if (lead && !options.quiet) {
    std::printf("frugal train: %d workers, model %s (%lld parameters, %zu buckets), %s, %lld steps, "
                "density %g, staleness %d, %s values, exchange %s\n",
                world, options.model.c_str(), static_cast<long long>(models::CountParameters(*model)),
                pipeline->num_buckets(), data.train.name.c_str(), static_cast<long long>(total_steps),
                options.density, options.staleness, options.value_encoding.c_str(), options.exchange.c_str());
    std::printf("metrics: %s\n", metrics->path().c_str());
    std::fflush(stdout);
  }

  WorkerResult result;
  const comm::TransportStats traffic_at_start = transport->stats();
  double compute_s = 0;
  double last_accuracy = -1;
  uint64_t checksum = 0;
  // Logging window.
  double window_loss = 0;
  int64_t window_steps = 0;
  double window_start = 0;
  double window_compute = 0;
  double window_samples = 0;
  double samples_total = 0;
  PipelineStats window_stats;
  const bool policy_active = options.adapt != "off";
  TelemetryWindow telemetry_window = StartWindow();
  comm::TransportStats window_traffic = transport->stats();

  int64_t t = 0;
  int64_t evaluated_epoch = 0;
  while (t < total_steps && cursor->epoch() < options.epochs) {
    const int64_t epoch = cursor->epoch();
    {
      const bool check = options.checksum_every > 0 && t % options.checksum_every == 0;
      FRUGAL_RETURN_IF_ERROR(pipeline->BeginIteration(t, copy_out, check));
      if (check) {
        FRUGAL_RETURN_IF_ERROR(CompareChecksums(t, &checksum));
      }
      const bool eval_now =
          t > 0 && (options.eval_every > 0 ? t % options.eval_every == 0 : epoch != evaluated_epoch);
      evaluated_epoch = epoch;
      if (eval_now) {
        FRUGAL_RETURN_IF_ERROR(AverageBatchNorm(t));
        if (lead) {
          last_accuracy = train::EvaluateAccuracy(*model, data.test, device);
          train::ProgressState ps;
          ps.step = t;
          ps.epoch = epoch;
          ps.test_accuracy = last_accuracy;
          ps.elapsed_s = elapsed();
          if (!options.quiet) progress.Evaluated(ps);
          FRUGAL_RETURN_IF_ERROR(metrics->Write(
              {{"wall_time_s", ps.elapsed_s}, {"step", t}, {"epoch", epoch}, {"test_accuracy", last_accuracy},
               {"evaluated_version", t - 1 - options.staleness}}));
        }
      }
      if (policy_active && t > 0 && t % options.decide_every == 0) {
        FRUGAL_RETURN_IF_ERROR(Adapt(t, &telemetry_window));
        if (lead && !options.quiet && !decision.reason.empty() && decision.reason != "unchanged") {
          progress.Note("decision at step " + std::to_string(t) + ": " + decision.reason);
        }
      }
      model->train();
      auto c0 = Clock::now();
      current_iteration = t;
      std::fill(got_grad.begin(), got_grad.end(), false);
      for (size_t b = 0; b < bucket_params.size(); ++b) pending[b] = bucket_params[b].size();
      std::vector<int64_t> indices = cursor->Slice(rank());
      train::Batch batch = train::MakeBatch(data.train, indices, device);
      // With unequal batch sizes each worker's mean loss is weighted by its
      // share of the global batch (times W: the exchange divides by W), so
      // the update is the mean over all samples of the step.
      const double weight = static_cast<double>(world) * static_cast<double>(indices.size()) /
                            static_cast<double>(cursor->global_batch());
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(batch.x), batch.y);
      (weight == 1.0 ? loss : loss * weight).backward();
      for (auto& slot : slots) slot.param.mutable_grad() = torch::Tensor();
      FRUGAL_RETURN_IF_ERROR(hook_error);
      FRUGAL_RETURN_IF_ERROR(SubmitMissing());
      double loss_value = loss.item<double>();
      FRUGAL_RETURN_IF_ERROR(train::CheckLoss(loss_value, t, transport->topology().DescribeRank(rank())));
      double c = Seconds(Clock::now() - c0);
      if (options.compute_slowdown > 1.0) {
        // Emulate a slower device: stretch this step's compute.
        std::this_thread::sleep_for(std::chrono::duration<double>(c * (options.compute_slowdown - 1.0)));
        c *= options.compute_slowdown;
      }
      compute_s += c;
      telemetry_window.compute_s += c;
      telemetry_window.samples += static_cast<int64_t>(indices.size());
      telemetry_window.iterations += 1;
      window_compute += c;
      window_loss += loss_value;
      window_samples += static_cast<double>(cursor->global_batch());
      samples_total += static_cast<double>(cursor->global_batch());
      ++window_steps;

      const int64_t done = t + 1;
      if (lead && (done % options.log_every == 0 || done == total_steps)) {
        PipelineStats ps_now = pipeline->stats();
        comm::TransportStats traffic = transport->stats();
        double span = std::max(1e-9, elapsed() - window_start);
        double steps = static_cast<double>(window_steps);
        auto per_step = [&](uint64_t now, uint64_t before) { return static_cast<double>(now - before) / steps; };
        double inter_bytes = per_step(traffic.inter_cluster.bytes_sent, window_traffic.inter_cluster.bytes_sent);
        double intra_bytes = per_step(traffic.intra_cluster.bytes_sent, window_traffic.intra_cluster.bytes_sent);
        double sent_mbit = (inter_bytes + intra_bytes) * steps * 8 / span / 1e6;
        double density_now = ps_now.total_values > window_stats.total_values
                                 ? static_cast<double>(ps_now.sent_values - window_stats.sent_values) /
                                       static_cast<double>(ps_now.total_values - window_stats.total_values)
                                 : 0.0;
        nlohmann::json rec = {
            {"wall_time_s", elapsed()},
            {"step", done},
            {"epoch", epoch},
            {"loss", window_loss / steps},
            {"lr", schedule->At(t)},
            {"samples_per_s", window_samples / span},
            {"iter_s", span / steps},
            {"compute_s", window_compute / steps},
            {"wait_s", (ps_now.wait_s - window_stats.wait_s) / steps},
            {"sparsify_s", (ps_now.sparsify_s - window_stats.sparsify_s) / steps},
            {"exchange_s", (ps_now.exchange_s - window_stats.exchange_s) / steps},
            {"optimizer_s", (ps_now.optimizer_s - window_stats.optimizer_s) / steps},
            {"bytes_sent_intra", intra_bytes},
            {"bytes_sent_inter", inter_bytes},
            {"bytes_received_intra",
             per_step(traffic.intra_cluster.bytes_received, window_traffic.intra_cluster.bytes_received)},
            {"bytes_received_inter",
             per_step(traffic.inter_cluster.bytes_received, window_traffic.inter_cluster.bytes_received)},
            {"density", density_now},
            {"staleness", options.staleness},
            {"batch_sizes", cursor->batch_sizes()},
            {"workers", world}};
        if (policy_active) rec["bandwidth_mbit"] = decision.bandwidth_mbit;
        FRUGAL_RETURN_IF_ERROR(metrics->Write(rec));
        train::ProgressState ps;
        ps.step = done;
        ps.total_steps = total_steps;
        ps.epoch = epoch;
        ps.loss = window_loss / steps;
        ps.test_accuracy = last_accuracy;
        ps.elapsed_s = elapsed();
        ps.samples_per_s = rec["samples_per_s"];
        char extra[128];
        if (policy_active) {
          std::snprintf(extra, sizeof(extra), "%.1f Mbit/s sent  link ~%.0f Mbit/s  density %.2g%%  batch %lld",
                        sent_mbit, decision.bandwidth_mbit, 100 * density_now,
                        static_cast<long long>(cursor->global_batch()));
        } else {
          std::snprintf(extra, sizeof(extra), "%.1f Mbit/s sent  density %.2g%%", sent_mbit, 100 * density_now);
        }
        ps.extra = extra;
        if (!options.quiet) progress.Update(ps);
        result.train.final_loss = ps.loss;
        window_loss = 0;
        window_samples = 0;
        window_steps = 0;
        window_compute = 0;
        window_start = elapsed();
        window_stats = ps_now;
        window_traffic = traffic;
      }
    }
    cursor->Advance();
    ++t;
  }
  result.train.epochs_completed = cursor->epoch();
  FRUGAL_RETURN_IF_ERROR(pipeline->Finish(copy_out));
  FRUGAL_RETURN_IF_ERROR(CompareChecksums(t, &checksum));
  FRUGAL_RETURN_IF_ERROR(AverageBatchNorm(t));
  if (lead) {
    last_accuracy = train::EvaluateAccuracy(*model, data.test, device);
    train::ProgressState ps;
    ps.step = t;
    ps.epoch = std::max<int64_t>(0, result.train.epochs_completed - 1);
    ps.test_accuracy = last_accuracy;
    ps.elapsed_s = elapsed();
    if (!options.quiet) {
      progress.Finish();
      progress.Evaluated(ps);
    }
    FRUGAL_RETURN_IF_ERROR(metrics->Write({{"wall_time_s", ps.elapsed_s},
                                           {"step", t},
                                           {"test_accuracy", last_accuracy},
                                           {"final", true}}));
    result.train.metrics_path = metrics->path();
  }
  PipelineStats st = pipeline->stats();
  result.train.steps = t;
  result.train.final_test_accuracy = last_accuracy;
  result.train.wall_time_s = elapsed();
  result.train.samples_per_s = samples_total / result.train.wall_time_s;
  result.final_checksum = checksum;
  result.compute_s = compute_s;
  result.wait_s = st.wait_s;
  result.sparsify_s = st.sparsify_s;
  result.exchange_s = st.exchange_s;
  result.optimizer_s = st.optimizer_s;
  result.traffic = transport->stats().Since(traffic_at_start);
  return result;
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::~Worker() = default;

Result<std::unique_ptr<Worker>> Worker::Create(const train::TrainOptions& options,
                                               std::unique_ptr<comm::Transport> transport,
                                               std::unique_ptr<AdaptationPolicy> policy) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->transport = std::move(transport);
  impl->policy = std::move(policy);
  try {
    FRUGAL_RETURN_IF_ERROR(impl->Init());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
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
