// frugal_round_bench: the CPU stages of one local-mode round on a GPT-2
// small parameter set (124.4 M fp32 values in the engine's 4 MB buckets),
// one thread, each stage next to a plain sum pass over the same values in
// the same run. Every stage calls the engine's own functions (compress,
// optim); nothing here re-implements a kernel except the reference sum.
//
//   frugal_round_bench [--reps N] [--world W] [--bucket-mb MB] [--scale S] [--out PATH]
//
// Throughput is GB/s of the parameter set's fp32 bytes (4 bytes per value
// the stage takes in: k messages of n values count k n), from the thread's
// CPU time, the median of N timed repetitions after one warm-up. The ratio
// column divides it by the sum pass's GB/s of the same run. Writes a JSON
// summary to PATH (default bench/round.json under the working directory).
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/common/span.h"
#include "frugal/common/status.h"
#include "frugal/compress/codec.h"
#include "frugal/compress/error_feedback.h"
#include "frugal/compress/merge.h"
#include "frugal/compress/round_kernels.h"
#include "frugal/compress/sparse_vector.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/optim/sparse_optimizer.h"
#include "plain_sum.h"

namespace {

using frugal::Span;
using frugal::Status;
namespace compress = frugal::compress;

const double kInt4Bytes = compress::BytesPerValue(compress::ValueEncoding::kInt4);

struct Options {
  int reps = 3;
  int world = 4;
  double bucket_mb = 4.0;  // the engine's default --bucket-mb
  double scale = 1.0;      // fraction of every tensor (tests and quick looks)
  std::string out = "bench/round.json";
};

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "frugal_round_bench: %s\n", message.c_str());
  std::exit(1);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + s.ToString());
}

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// examples/lm's "gpt2" size (12 layers, width 768, context 1024, vocabulary
// 50,257, the head tied to the token embedding), in parameter order.
std::vector<std::pair<std::string, size_t>> Gpt2SmallTensors() {
  const size_t d = 768, vocab = 50257, context = 1024;
  std::vector<std::pair<std::string, size_t>> t = {{"tok.weight", vocab * d}, {"pos.weight", context * d}};
  for (int l = 0; l < 12; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    for (auto [name, n] : std::vector<std::pair<std::string, size_t>>{
             {"ln1.weight", d}, {"ln1.bias", d}, {"attn.qkv.weight", 3 * d * d}, {"attn.qkv.bias", 3 * d},
             {"attn.proj.weight", d * d}, {"attn.proj.bias", d}, {"ln2.weight", d}, {"ln2.bias", d},
             {"fc.weight", 4 * d * d}, {"fc.bias", 4 * d}, {"out.weight", 4 * d * d}, {"out.bias", d}}) {
      t.emplace_back(p + name, n);
    }
  }
  t.emplace_back("ln_f.weight", d);
  t.emplace_back("ln_f.bias", d);
  return t;
}

// Buckets as the engine forms them: tensors in order, a bucket closed when
// the next tensor would pass bucket_mb, a tensor never split.
std::vector<size_t> Buckets(const std::vector<std::pair<std::string, size_t>>& tensors, double bucket_mb,
                            double scale) {
  const size_t cap = static_cast<size_t>(bucket_mb * 1024 * 1024 / 4);
  std::vector<size_t> out;
  size_t open = 0;
  for (const auto& [name, full] : tensors) {
    const size_t n = std::max<size_t>(1, static_cast<size_t>(std::llround(static_cast<double>(full) * scale)));
    if (open > 0 && open + n > cap) {
      out.push_back(open);
      open = 0;
    }
    open += n;
  }
  if (open > 0) out.push_back(open);
  return out;
}

// A round's inputs: the anchor ~ N(0, 0.02) like the model's initialisation,
// and the inner parameters 16 steps away, by a pseudo-gradient whose scale
// varies by row (lognormal around 1e-3), as real layers' updates do.
void FillRound(size_t n, uint64_t seed, std::vector<float>* anchor, std::vector<float>* master) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  anchor->resize(n);
  master->resize(n);
  float row_scale = 1e-3f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 768 == 0) row_scale = 1e-3f * std::exp(0.7f * normal(rng));
    (*anchor)[i] = 0.02f * normal(rng);
    (*master)[i] = (*anchor)[i] - row_scale * normal(rng);
  }
}

struct Row {
  std::string stage;
  std::string note;
  double values = 0;  // fp32 values taken in per run of the stage (k messages of n count k n)
  // Bytes the stage must read and write per value taken in, as the engine's
  // types hold them (a SparseVector: 4 index + 4 value bytes); the sum pass
  // reads 4.
  double bytes = 4;
  std::vector<double> seconds;
  std::vector<double> sum_seconds;  // the sum pass over the same values, same repetition
  double median(const std::vector<double>& v) const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0.0 : s[s.size() / 2];
  }
  double gbps() const { return 4 * values / median(seconds) / 1e9; }
  double sum_gbps() const { return 4 * values / median(sum_seconds) / 1e9; }
  // The stage's bytes moved per second over the sum pass's.
  double bandwidth_ratio() const { return gbps() / sum_gbps() * bytes / 4; }
};

class RoundBench {
 public:
  explicit RoundBench(const Options& o) : o_(o) {
    sizes_ = Buckets(Gpt2SmallTensors(), o.bucket_mb, o.scale);
    for (size_t n : sizes_) n_ += n;
    const size_t nb = sizes_.size();
    anchor_.resize(nb);
    master_.resize(nb);
    delta_.resize(nb);
    base_.resize(nb);
    for (size_t b = 0; b < nb; ++b) {
      FillRound(sizes_[b], 1000 + b, &anchor_[b], &master_[b]);
      delta_[b].assign(sizes_[b], 0.0f);
      base_[b].assign(sizes_[b], 0.0f);
    }
  }

  size_t values() const { return n_; }
  size_t buckets() const { return sizes_.size(); }

  // Runs body(b) for every bucket, timed, reps + 1 times (the first a warm-up);
  // each repetition also times the sum pass over `passes` x the values.
  Row Measure(const std::string& stage, const std::string& note, int passes, double bytes,
              const std::function<void(size_t)>& body) {
    Row row{stage, note, static_cast<double>(passes) * static_cast<double>(n_), bytes, {}, {}};
    for (int r = 0; r <= o_.reps; ++r) {
      const double t0 = ThreadSeconds();
      for (size_t b = 0; b < sizes_.size(); ++b) body(b);
      const double t1 = ThreadSeconds();
      const double s = SumSeconds(passes);
      if (r == 0) continue;
      row.seconds.push_back(t1 - t0);
      row.sum_seconds.push_back(s);
    }
    std::printf("  %-28s %8.3f s\n", stage.c_str(), row.median(row.seconds));
    std::fflush(stdout);
    rows_.push_back(row);
    return row;
  }

  // The stages, in a round's order.
  void Run() {
    const size_t nb = sizes_.size();
    Measure("pseudo_gradient", "delta = anchor - master; base = master (compress::PseudoGradient)", 1, 16,
            [&](size_t b) { compress::PseudoGradient(anchor_[b], master_[b], delta_[b], base_[b]); });

    for (compress::ValueEncoding e :
         {compress::ValueEncoding::kInt4, compress::ValueEncoding::kInt8, compress::ValueEncoding::kBf16}) {
      MeasureEncoding(e);
    }

    // Decode-merge of k peers' int4 messages as the wire carries them (deflated).
    // The k parts are copies of one message: the merge's work is the same for
    // any k messages that each hold every index.
    for (int k : MergeCounts()) {
      std::vector<std::vector<std::vector<uint8_t>>> parts(nb);
      for (size_t b = 0; b < nb; ++b) parts[b].assign(static_cast<size_t>(k), wire_int4_[b]);
      Measure("decode_merge_k" + std::to_string(k), "compress::DecodeAndMerge of k deflated int4 messages", k,
              kInt4Bytes + 8.0 / k,
              [&](size_t b) { Check(compress::DecodeAndMerge(parts[b], &merged_), "decode-merge"); });
    }
    merged_ = compress::SparseVector();
    wire_int4_.clear();

    const float inv_world = 1.0f / static_cast<float>(o_.world);
    Measure("scale", "merged sum / world into the round's buffer (compress::Densify)", 1, 12,
            [&](size_t b) { compress::Densify(decoded_[b], inv_world, Span<float>(delta_[b])); });
    decoded_.clear();

    std::vector<std::unique_ptr<frugal::optim::SparseOptimizer>> outer(nb);
    frugal::optim::OptimizerOptions oo;
    oo.kind = "sgd";
    oo.lr = 0.7;  // DiLoCo's outer step, the engine's default
    oo.momentum = 0.9;
    oo.nesterov = true;
    for (size_t b = 0; b < nb; ++b) {
      auto made = frugal::optim::CreateSparseOptimizer(oo, sizes_[b], "bucket " + std::to_string(b));
      Check(made.status(), "outer optimizer");
      outer[b] = std::move(*made);
    }
    Measure("outer_step", "Nesterov SGD on the anchor (optim::SparseOptimizer::StepDense)", 1, 20, [&](size_t b) {
      Check(outer[b]->StepDense(Span<float>(anchor_[b]), Span<const float>(delta_[b])), "outer step");
    });
    Measure("rebase", "master = anchor - (base - master) (compress::Rebase)", 1, 16,
            [&](size_t b) { compress::Rebase(anchor_[b], base_[b], Span<float>(master_[b])); });
  }

  const std::vector<Row>& rows() const { return rows_; }
  std::vector<int> MergeCounts() const {
    std::vector<int> k = {1, 3};
    if (o_.world != 1 && o_.world != 3) k.push_back(o_.world);
    return k;
  }

 private:
  double SumSeconds(int passes) {
    const double t0 = ThreadSeconds();
    float s = 0;
    for (int p = 0; p < passes; ++p) {
      for (const auto& a : anchor_) s += frugal::bench::PlainSum(a.data(), a.size());
    }
    const double t1 = ThreadSeconds();
    sink_ += s;
    return t1 - t0;
  }

  // Error feedback (density 1, the block sparsifier, rounded to e), encode,
  // encode + deflate, decode and inflate + decode in wire format e.
  void MeasureEncoding(compress::ValueEncoding e) {
    const size_t nb = sizes_.size();
    const std::string name = frugal::NameOf(e);
    const double coded = compress::BytesPerValue(e);
    std::vector<std::unique_ptr<compress::ErrorFeedback>> feedback(nb);
    std::vector<std::unique_ptr<compress::Sparsifier>> sparsifier(nb);
    std::vector<compress::SparseVector> sent(nb);
    for (size_t b = 0; b < nb; ++b) {
      compress::ErrorFeedbackOptions eo;
      eo.tensor_name = "bucket " + std::to_string(b);
      eo.wire_values = e;
      feedback[b] = std::make_unique<compress::ErrorFeedback>(sizes_[b], eo);
      auto s = compress::CreateSparsifier("block");
      Check(s.status(), "sparsifier");
      sparsifier[b] = std::move(*s);
    }
    Measure("error_feedback_" + name, "residual + delta, block sparsifier at density 1, rounded to " + name, 1, 20,
            [&](size_t b) {
              Check(feedback[b]->Compress(Span<const float>(delta_[b]), *sparsifier[b], 1.0, &sent[b]),
                    "error feedback");
            });
    feedback.clear();
    sparsifier.clear();
    compress::WireFormat raw{e, compress::IndexEncoding::kBlockVarint, false};
    compress::WireFormat packed{e, compress::IndexEncoding::kBlockVarint, true};
    std::vector<std::vector<uint8_t>> raw_msg(nb), packed_msg(nb);
    Measure("encode_" + name, "compress::Encode, no deflate", 1, 8 + coded, [&](size_t b) {
      raw_msg[b].clear();
      Check(compress::Encode(sent[b], raw, &raw_msg[b]), "encode");
    });
    Measure("encode_deflate_" + name, "compress::Encode with deflate (zlib level 1)", 1, 8 + coded, [&](size_t b) {
      packed_msg[b].clear();
      Check(compress::Encode(sent[b], packed, &packed_msg[b]), "encode+deflate");
    });
    sent.clear();
    size_t raw_bytes = 0, packed_bytes = 0;
    for (size_t b = 0; b < nb; ++b) {
      raw_bytes += raw_msg[b].size();
      packed_bytes += packed_msg[b].size();
    }
    wire_bytes_[name] = {raw_bytes, packed_bytes};
    std::vector<compress::SparseVector> decoded(nb);
    Measure("decode_" + name, "compress::Decode, no deflate", 1, 8 + coded, [&](size_t b) {
      Check(compress::Decode(Span<const uint8_t>(raw_msg[b]), {}, &decoded[b]), "decode");
    });
    Measure("inflate_decode_" + name, "compress::Decode of the deflated message", 1, 8 + coded, [&](size_t b) {
      Check(compress::Decode(Span<const uint8_t>(packed_msg[b]), {}, &decoded[b]), "inflate+decode");
    });
    if (e == compress::ValueEncoding::kInt4) {  // decode-merge's input, and the scale stage's
      wire_int4_ = std::move(packed_msg);
      decoded_ = std::move(decoded);
    }
  }

 public:
  std::map<std::string, std::pair<size_t, size_t>> wire_bytes_;  // encoding -> raw, deflated bytes
  float sink_ = 0;

 private:
  Options o_;
  std::vector<size_t> sizes_;
  size_t n_ = 0;
  std::vector<std::vector<float>> anchor_, master_, delta_, base_;
  std::vector<compress::SparseVector> decoded_;
  std::vector<std::vector<uint8_t>> wire_int4_;
  compress::SparseVector merged_;
  std::vector<Row> rows_;
};

const Row* Find(const std::vector<Row>& rows, const std::string& stage) {
  for (const Row& r : rows) {
    if (r.stage == stage) return &r;
  }
  return nullptr;
}

double Median(const Row* r) { return r == nullptr ? 0.0 : r->median(r->seconds); }

// CPU seconds of one rank's round in the engine's default local mode
// (density 1, int4, deflated, the sharded exchange over `world` ranks:
// Note [Sharded exchange] in src/collective/compressed_collective.cc), composed
// from the stages: its contribution compressed and encoded whole; as a
// shard owner, world messages of 1/world of the values decode-merged and the
// mean compressed again; every owner's mean decoded; the outer step and
// the rebase.
nlohmann::json RoundSeconds(const std::vector<Row>& rows, int world, size_t n) {
  const double w = world;
  const double contribute = Median(Find(rows, "error_feedback_int4")) + Median(Find(rows, "encode_deflate_int4"));
  const Row* dm = Find(rows, "decode_merge_k" + std::to_string(world));
  const double own_shard = (Median(dm) + contribute) / w;
  const double gather = Median(Find(rows, "inflate_decode_int4")) + Median(Find(rows, "scale"));
  const double compute_thread =
      Median(Find(rows, "pseudo_gradient")) + Median(Find(rows, "outer_step")) + Median(Find(rows, "rebase"));
  const double round_thread = contribute + own_shard + gather;
  nlohmann::json j;
  j["world"] = world;
  j["round_thread_s"] = round_thread;
  j["compute_thread_s"] = compute_thread;
  j["total_s"] = round_thread + compute_thread;
  // What a rank sends: (world - 1) / world of its contribution, and its
  // shard's mean to the world - 1 others.
  j["int4_wire_bytes_per_rank"] =
      compress::BytesPerValue(compress::ValueEncoding::kInt4) * static_cast<double>(n) * 2 * (w - 1) / w;
  return j;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail(a + " needs a value");
      return argv[++i];
    };
    auto number = [&](const std::string& v) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !std::isfinite(d)) Fail(a + ": not a number: '" + v + "'");
      return d;
    };
    if (a == "--reps") {
      o.reps = static_cast<int>(number(value()));
      if (o.reps < 1 || o.reps > 100) Fail("--reps must be in [1, 100]");
    } else if (a == "--world") {
      o.world = static_cast<int>(number(value()));
      if (o.world < 1 || o.world > 1024) Fail("--world must be in [1, 1024]");
    } else if (a == "--bucket-mb") {
      o.bucket_mb = number(value());
      if (!(o.bucket_mb > 0) || o.bucket_mb > 4096) Fail("--bucket-mb must be in (0, 4096]");
    } else if (a == "--scale") {
      o.scale = number(value());
      if (!(o.scale > 0) || o.scale > 1) Fail("--scale must be in (0, 1]");
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: frugal_round_bench [--reps N] [--world W] [--bucket-mb MB] [--scale S] [--out PATH]\n");
      std::exit(0);
    } else {
      Fail("unknown argument '" + a + "' (--help lists them)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  std::printf("frugal_round_bench: GPT-2 small (scale %.3g), one thread, %d repetitions after a warm-up\n", o.scale,
              o.reps);
  RoundBench bench(o);
  std::printf("%zu values in %zu buckets of at most %.3g MB\n", bench.values(), bench.buckets(), o.bucket_mb);
  bench.Run();

  const auto& rows = bench.rows();
  std::printf("\n| stage | s | GB/s | sum GB/s | ratio | bytes/value | bandwidth ratio |\n"
              "|---|---|---|---|---|---|---|\n");
  nlohmann::json stages = nlohmann::json::array();
  for (const Row& r : rows) {
    const double ratio = r.gbps() / r.sum_gbps();
    std::printf("| %s | %.3f | %.2f | %.2f | %.2f | %.1f | %.2f |\n", r.stage.c_str(), r.median(r.seconds), r.gbps(),
                r.sum_gbps(), ratio, r.bytes, r.bandwidth_ratio());
    stages.push_back({{"stage", r.stage},
                      {"what", r.note},
                      {"values", r.values},
                      {"seconds", r.seconds},
                      {"sum_seconds", r.sum_seconds},
                      {"gbps", r.gbps()},
                      {"sum_gbps", r.sum_gbps()},
                      {"ratio", ratio},
                      {"bytes_per_value", r.bytes},
                      {"bandwidth_ratio", r.bandwidth_ratio()}});
  }
  nlohmann::json wire;
  for (const auto& [name, bytes] : bench.wire_bytes_) {
    wire[name] = {{"raw_bytes", bytes.first}, {"deflated_bytes", bytes.second}};
  }
  const nlohmann::json round = RoundSeconds(rows, o.world, bench.values());
  std::printf("\nwire bytes (one contribution): ");
  for (const auto& [name, bytes] : bench.wire_bytes_) {
    std::printf("%s %.1f MB (deflated %.1f MB)  ", name.c_str(), bytes.first / 1e6, bytes.second / 1e6);
  }
  std::printf("\none rank's round, world %d: round thread %.2f s, compute thread %.2f s\n", o.world,
              round["round_thread_s"].get<double>(), round["compute_thread_s"].get<double>());
  nlohmann::json j = {{"values", bench.values()}, {"buckets", bench.buckets()}, {"bucket_mb", o.bucket_mb},
                      {"scale", o.scale},         {"reps", o.reps},             {"world", o.world},
                      {"clock", "thread CPU time"}, {"stages", stages},         {"wire", wire},
                      {"round", round},           {"sink", bench.sink_}};
  std::ofstream f(o.out);
  if (!f) Fail("cannot write " + o.out);
  f << j.dump(2) << "\n";
  if (!f) Fail("cannot write " + o.out);
  std::printf("wrote %s\n", o.out.c_str());
  return 0;
}
