#include "frugal/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace frugal::sim {
namespace {

Operator Gemm(std::string name, int64_t batch, int64_t m, int64_t n, int64_t k, int bytes) {
  Operator op;
  op.name = std::move(name);
  op.kind = OpKind::kMatmul;
  op.batch = batch;
  op.m = m;
  op.n = n;
  op.k = k;
  op.fwd_flops = 2.0 * batch * m * n * k;
  op.bwd_flops = 2.0 * op.fwd_flops;  // dgrad + wgrad
  op.fwd_bytes = static_cast<double>(bytes) * batch * (m * k + k * n + m * n);
  op.bwd_bytes = 2.0 * op.fwd_bytes;
  return op;
}

// An elementwise/normalisation kernel touching `elements` values `passes`
// times in forward (reads + writes) and about twice as many in backward.
Operator Pointwise(std::string name, double elements, double passes, int bytes) {
  Operator op;
  op.name = std::move(name);
  op.kind = OpKind::kMemoryBound;
  op.fwd_flops = elements * passes;
  op.bwd_flops = 2.0 * op.fwd_flops;
  op.fwd_bytes = elements * passes * bytes;
  op.bwd_bytes = 2.0 * op.fwd_bytes;
  return op;
}

Operator TpAllReduce(std::string name, double bytes) {
  Operator op;
  op.name = std::move(name);
  op.kind = OpKind::kTensorParallelAllReduce;
  op.comm_bytes = bytes;
  return op;
}

Operator Conv(std::string name, int64_t batch, int64_t cin, int64_t cout, int64_t kernel,
              int64_t out_hw, int bytes) {
  Operator op = Gemm(std::move(name), 1, batch * out_hw * out_hw, cout, cin * kernel * kernel, bytes);
  op.kind = OpKind::kConv;
  return op;
}

// Note [Unfused softmax]
// Megatron's fused scale-mask-softmax kernel (the causal, "upper triangular"
// one used by GPT) is only taken when the key length is in (16, 16384] and a
// multiple of 4 and the attention batches b x heads/t are a multiple of the
// kernel's batches per block (4 for keys longer than 128); otherwise
// FusedScaleMaskSoftmax falls back to PyTorch: cast to fp32, scale, masked
// fill, softmax, cast back (Megatron-LM / Megatron-DeepSpeed
// fused_softmax.py, is_kernel_available). The fallback costs four more
// kernels, i.e. four more operators for the host to dispatch in forward and
// backward, and their memory traffic. At hidden 1024 with 16 heads it is taken
// at tp 8 and micro-batch 1 (2 attention batches): the calibration set's
// slowest layer per sample relative to its neighbours (docs/design/planner.md).
}  // namespace

bool FusedSoftmaxAvailable(int64_t attention_batches, int64_t seq) {
  const int64_t batches_per_block = seq <= 128 ? 8 : 4;
  return seq > 16 && seq <= 16384 && seq % 4 == 0 && attention_batches % batches_per_block == 0;
}

namespace {

// Note [Transformer layer operators]
// One Megatron-LM decoder layer on one tensor-parallel rank, micro-batch b,
// sequence s, hidden h, heads a, TP degree t. Forward GEMM FLOPs sum to
// (24 b s h^2 + 4 b s^2 h) / t, the count behind Narayanan et al.'s formula.
// Activation memory follows Korthikanti et al. 2022 (section 4): per layer
// s b h (10 + 24/t + 5 a s/(h t)) bytes without sequence parallelism, and
// s b h (34/t + 5 a s/(h t)) with it; selective recomputation drops the
// 5 a s/(h t) attention-core term; full recomputation keeps only the 2 s b h
// layer input (divided by t under sequence parallelism).
Block TransformerLayer(const TransformerSpec& spec, int64_t b, int t, bool sp, bool any_batch_softmax, int bytes) {
  const int64_t s = spec.seq_len, h = spec.hidden, a = spec.heads;
  const double bsh = static_cast<double>(b) * s * h;
  const double ln_elems = sp ? bsh / t : bsh;
  const double scores = static_cast<double>(b) * (a / t) * s * s;
  Block blk;
  blk.name = "decoder";
  blk.ops.push_back(Pointwise("layernorm1", ln_elems, 2, bytes));
  blk.ops.push_back(Gemm("qkv", 1, b * s, 3 * h / t, h, bytes));
  Operator qk = Gemm("attn_scores", b * a / t, s, s, h / a, bytes);
  qk.selective_recompute = true;
  blk.ops.push_back(qk);
  // Fused scale-mask-softmax then dropout: read scores, write probs, write
  // the dropout mask and the dropped probs.
  Operator softmax = Pointwise("softmax_dropout", scores, 4.5, bytes);
  softmax.selective_recompute = true;
  blk.ops.push_back(softmax);
  if (!any_batch_softmax && !FusedSoftmaxAvailable(b * a / t, s)) {
    // Note [Unfused softmax]: PyTorch's path in fp32 adds four kernels
    // (bytes per score: cast to fp32 2+4, scale 4+4, causal mask 4+1+4,
    // cast back 4+2) before the softmax itself.
    const std::pair<const char*, double> extra[] = {
        {"softmax_to_fp32", 6}, {"softmax_scale", 8}, {"softmax_mask", 9}, {"softmax_to_fp16", 6}};
    for (const auto& [name, bytes_per_score] : extra) {
      Operator op = Pointwise(name, scores, bytes_per_score, 1);
      op.selective_recompute = true;
      blk.ops.push_back(op);
    }
  }
  Operator av = Gemm("attn_values", b * a / t, s, h / a, s, bytes);
  av.selective_recompute = true;
  blk.ops.push_back(av);
  blk.ops.push_back(Gemm("attn_proj", 1, b * s, h, h / t, bytes));
  blk.ops.push_back(TpAllReduce("attn_allreduce", bsh * bytes));
  blk.ops.push_back(Pointwise("dropout_residual1", ln_elems, 4, bytes));
  blk.ops.push_back(Pointwise("layernorm2", ln_elems, 2, bytes));
  blk.ops.push_back(Gemm("mlp_fc1", 1, b * s, 4 * h / t, h, bytes));
  blk.ops.push_back(Pointwise("gelu", bsh * 4 / t, 2, bytes));
  blk.ops.push_back(Gemm("mlp_fc2", 1, b * s, h, 4 * h / t, bytes));
  blk.ops.push_back(TpAllReduce("mlp_allreduce", bsh * bytes));
  blk.ops.push_back(Pointwise("dropout_residual2", ln_elems, 4, bytes));
  blk.params = (12.0 * h * h + 4.0 * h) / t + 9.0 * h;
  const double core = 5.0 * a * s / (static_cast<double>(h) * t);
  if (sp) {
    blk.act_bytes_none = bsh * (34.0 / t + core);
    blk.act_bytes_selective = bsh * 34.0 / t;
    blk.act_bytes_full = 2.0 * bsh / t;
  } else {
    blk.act_bytes_none = bsh * (10.0 + 24.0 / t + core);
    blk.act_bytes_selective = bsh * (10.0 + 24.0 / t);
    blk.act_bytes_full = 2.0 * bsh;
  }
  return blk;
}

Result<Workload> TransformerWorkload(const ModelSpec& model, const WorkloadOptions& opt) {
  const TransformerSpec& spec = model.transformer;
  const int t = opt.tensor_parallel;
  if (spec.layers <= 0 || spec.hidden <= 0 || spec.heads <= 0 || spec.seq_len <= 0 || spec.vocab <= 0) {
    return Status::InvalidArgument("model '" + model.name + "': layers, hidden, heads, sequence length and vocabulary must be positive");
  }
  if (spec.hidden % spec.heads != 0) {
    return Status::InvalidArgument("model '" + model.name + "': hidden size " + std::to_string(spec.hidden) +
                                   " is not a multiple of the number of heads " + std::to_string(spec.heads));
  }
  if (spec.heads % t != 0) {
    return Status::InvalidArgument("tensor parallelism " + std::to_string(t) + " does not divide the " +
                                   std::to_string(spec.heads) + " attention heads of '" + model.name + "'");
  }
  const int bytes = model.bytes_per_value;
  const int64_t b = opt.micro_batch, s = spec.seq_len, h = spec.hidden, v = spec.vocab;
  const double bsh = static_cast<double>(b) * s * h;
  Workload w;
  w.is_transformer = true;
  w.total_params = model.ParameterCount();
  w.boundary_bytes = bsh * bytes;
  w.pre.name = "embedding";
  w.pre.ops.push_back(Pointwise("embedding_lookup", bsh, 3, bytes));
  w.pre.params = static_cast<double>(v) * h / t + static_cast<double>(s) * h;
  w.pre.act_bytes_none = w.pre.act_bytes_selective = w.pre.act_bytes_full = bsh * bytes;
  for (int i = 0; i < spec.layers; ++i) {
    w.blocks.push_back(TransformerLayer(spec, b, t, opt.sequence_parallel, opt.fused_softmax_any_batch, bytes));
  }
  w.post.name = "lm_head";
  w.post.ops.push_back(Pointwise("final_layernorm", bsh, 2, bytes));
  w.post.ops.push_back(Gemm("logits", 1, b * s, v / t, h, bytes));
  // Vocab-parallel cross entropy over fp32 logits.
  w.post.ops.push_back(Pointwise("cross_entropy", static_cast<double>(b) * s * v / t, 3, 4));
  w.post.params = static_cast<double>(v) * h / t + 2.0 * h;  // Tied copy on the last stage.
  w.post.act_bytes_none = w.post.act_bytes_selective = w.post.act_bytes_full =
      4.0 * b * s * v / t + bsh * bytes;
  return w;
}

Block LinearBlock(const std::string& name, int64_t b, int64_t in, int64_t out, bool relu, int bytes) {
  Block blk;
  blk.name = name;
  blk.ops.push_back(Gemm(name, 1, b, out, in, bytes));
  if (relu) blk.ops.push_back(Pointwise(name + "_relu", static_cast<double>(b) * out, 2, bytes));
  blk.params = static_cast<double>(in) * out + out;
  blk.act_bytes_none = blk.act_bytes_selective = static_cast<double>(b) * (in + (relu ? 2 : 1) * out) * bytes;
  blk.act_bytes_full = static_cast<double>(b) * in * bytes;
  return blk;
}

Block ConvBlock(const std::string& name, int64_t b, int64_t cin, int64_t cout, int64_t kernel,
                int64_t out_hw, bool norm_relu, int bytes) {
  Block blk;
  blk.name = name;
  blk.ops.push_back(Conv(name, b, cin, cout, kernel, out_hw, bytes));
  const double out = static_cast<double>(b) * cout * out_hw * out_hw;
  if (norm_relu) blk.ops.push_back(Pointwise(name + "_bn_relu", out, 4, bytes));
  blk.params = static_cast<double>(cin) * cout * kernel * kernel + (norm_relu ? 2.0 * cout : cout);
  blk.act_bytes_none = blk.act_bytes_selective = out * (norm_relu ? 3 : 1) * bytes;
  blk.act_bytes_full = out * bytes;
  return blk;
}

Result<Workload> ZooWorkload(const ModelSpec& model, const WorkloadOptions& opt) {
  if (opt.tensor_parallel != 1) {
    return Status::InvalidArgument("model '" + model.name + "' supports data parallelism only (tensor parallelism must be 1)");
  }
  const int bytes = model.bytes_per_value;
  const int64_t b = opt.micro_batch;
  Workload w;
  w.pre.name = "input";
  w.pre.act_bytes_none = w.pre.act_bytes_selective = w.pre.act_bytes_full = static_cast<double>(b) * 784 * bytes;
  if (model.zoo_name == "mlp") {
    w.blocks.push_back(LinearBlock("fc1", b, 784, 2048, true, bytes));
    w.blocks.push_back(LinearBlock("fc2", b, 2048, 2048, true, bytes));
    w.blocks.push_back(LinearBlock("fc3", b, 2048, 10, false, bytes));
  } else if (model.zoo_name == "cnn") {
    w.blocks.push_back(ConvBlock("conv1", b, 1, 32, 3, 28, false, bytes));
    w.blocks.back().ops.push_back(Pointwise("relu_pool1", static_cast<double>(b) * 32 * 28 * 28, 2.25, bytes));
    w.blocks.push_back(ConvBlock("conv2", b, 32, 64, 3, 14, false, bytes));
    w.blocks.back().ops.push_back(Pointwise("relu_pool2", static_cast<double>(b) * 64 * 14 * 14, 2.25, bytes));
    w.blocks.push_back(LinearBlock("fc1", b, 3136, 512, true, bytes));
    w.blocks.push_back(LinearBlock("fc2", b, 512, 10, false, bytes));
  } else if (model.zoo_name == "resnet18") {
    // CIFAR-style stem (3x3 conv, no max-pool) for 28x28 grey images;
    // stages of two BasicBlocks at 28, 14, 7 and 4 pixels.
    w.blocks.push_back(ConvBlock("stem", b, 1, 64, 3, 28, true, bytes));
    const int64_t widths[4] = {64, 128, 256, 512};
    const int64_t sizes[4] = {28, 14, 7, 4};
    int64_t cin = 64;
    for (int stage = 0; stage < 4; ++stage) {
      for (int unit = 0; unit < 2; ++unit) {
        const int64_t cout = widths[stage], hw = sizes[stage];
        const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(unit);
        Block blk = ConvBlock(name + ".conv1", b, cin, cout, 3, hw, true, bytes);
        Block second = ConvBlock(name + ".conv2", b, cout, cout, 3, hw, true, bytes);
        blk.name = name;
        blk.ops.insert(blk.ops.end(), second.ops.begin(), second.ops.end());
        blk.params += second.params;
        blk.act_bytes_none += second.act_bytes_none;
        blk.act_bytes_selective += second.act_bytes_selective;
        if (cin != cout) {
          Block down = ConvBlock(name + ".downsample", b, cin, cout, 1, hw, true, bytes);
          blk.ops.insert(blk.ops.end(), down.ops.begin(), down.ops.end());
          blk.params += down.params;
          blk.act_bytes_none += down.act_bytes_none;
          blk.act_bytes_selective += down.act_bytes_selective;
        }
        blk.ops.push_back(Pointwise(name + ".residual_relu", static_cast<double>(b) * cout * hw * hw, 3, bytes));
        w.blocks.push_back(std::move(blk));
        cin = cout;
      }
    }
    w.post.ops.push_back(Pointwise("avgpool", static_cast<double>(b) * 512 * 16, 1, bytes));
    Block fc = LinearBlock("fc", b, 512, 10, false, bytes);
    w.post.ops.insert(w.post.ops.end(), fc.ops.begin(), fc.ops.end());
    w.post.params = fc.params;
  } else {
    return Status::InvalidArgument("unknown zoo model '" + model.zoo_name + "' (expected mlp, cnn or resnet18)");
  }
  double params = w.pre.params + w.post.params;
  for (const Block& blk : w.blocks) params += blk.params;
  w.total_params = params;
  w.boundary_bytes = w.blocks.empty() ? 0 : w.blocks.front().act_bytes_full;
  return w;
}

// Note [Recorded workloads]
// frugal.plan records a user's module on one batch of b0 samples: every
// matrix product and convolution its forward and backward ran (the
// profiler's events with their shapes, both passes listed as forward
// operators, so the backward pass is empty), one memory-bound operator for
// the rest (the elementwise and normalisation work, priced as passes over
// the saved activations), the parameters and the activation bytes saved
// for backward. For a micro-batch of b samples every operator's rows, FLOPs
// and bytes and the activations scale by b / b0; the parameters do not.
// Products whose rows do not grow with the batch (a weight gradient's
// inner dimension does) are scaled all the same: the FLOPs stay exact,
// only the shape the cost model sees is approximate.
Result<Workload> RecordedWorkload(const ModelSpec& model, const WorkloadOptions& opt) {
  if (opt.tensor_parallel != 1) {
    return Status::InvalidArgument("model '" + model.name + "' was recorded for data parallelism only");
  }
  if (model.recorded_batch < 1) return Status::InvalidArgument("recorded workload with a batch of < 1 samples");
  const double r = static_cast<double>(opt.micro_batch) / static_cast<double>(model.recorded_batch);
  Workload w = *model.recorded;
  auto scale = [r](Block* blk) {
    for (Operator& op : blk->ops) {
      if (op.kind == OpKind::kMatmul || op.kind == OpKind::kConv) {
        op.m = std::max<int64_t>(1, std::llround(static_cast<double>(op.m) * r));
      }
      op.fwd_flops *= r;
      op.bwd_flops *= r;
      op.fwd_bytes *= r;
      op.bwd_bytes *= r;
    }
    blk->act_bytes_none *= r;
    blk->act_bytes_selective *= r;
    blk->act_bytes_full *= r;
  };
  scale(&w.pre);
  for (Block& blk : w.blocks) scale(&blk);
  scale(&w.post);
  w.boundary_bytes *= r;
  w.is_transformer = false;
  return w;
}

}  // namespace

double ModelSpec::ParameterCount() const {
  if (!is_transformer) {
    WorkloadOptions opt;
    Result<Workload> w = BuildWorkload(*this, opt);
    return w.ok() ? w->total_params : 0.0;
  }
  const double l = transformer.layers, h = static_cast<double>(transformer.hidden);
  const double v = static_cast<double>(transformer.vocab), s = static_cast<double>(transformer.seq_len);
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h));
}

ModelSpec MakeTransformer(const std::string& name, int layers, int64_t hidden, int heads,
                          int64_t seq_len, int64_t vocab) {
  ModelSpec m;
  m.name = name;
  m.is_transformer = true;
  m.transformer.layers = layers;
  m.transformer.hidden = hidden;
  m.transformer.heads = heads;
  m.transformer.seq_len = seq_len;
  m.transformer.vocab = vocab;
  m.bytes_per_value = 2;
  return m;
}

namespace {

struct Preset {
  const char* name;
  int layers;
  int64_t hidden;
  int heads;
};

// GPT-3 family (Brown et al. 2020) and the Megatron-LM scaling models.
constexpr Preset kPresets[] = {
    {"gpt-125m", 12, 768, 12},    {"gpt-350m", 24, 1024, 16},   {"gpt-1.3b", 24, 2048, 16},
    {"gpt-1.7b", 24, 2304, 24},   {"gpt-2.7b", 32, 2560, 32},   {"gpt-3.6b", 30, 3072, 32},
    {"gpt-6.7b", 32, 4096, 32},   {"gpt-7.5b", 36, 4096, 32},   {"gpt-13b", 40, 5120, 40},
    {"gpt-18b", 40, 6144, 48},    {"gpt-22b", 48, 6144, 64},    {"gpt-39b", 48, 8192, 64},
    {"gpt-76b", 60, 10240, 80},   {"gpt-145b", 80, 12288, 96},  {"gpt-175b", 96, 12288, 96},
    {"gpt-310b", 96, 16384, 128}, {"gpt-530b", 105, 20480, 128}, {"gpt-1t", 128, 25600, 160},
};

}  // namespace

Result<ModelSpec> BuiltinModel(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return MakeTransformer(name, p.layers, p.hidden, p.heads, 2048, 51200);
  }
  if (name == "mlp" || name == "cnn" || name == "resnet18") {
    ModelSpec m;
    m.name = name;
    m.is_transformer = false;
    m.zoo_name = name;
    m.bytes_per_value = 4;
    return m;
  }
  std::string known;
  for (const std::string& n : BuiltinModelNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound("unknown model '" + name + "'; built-in models: " + known);
}

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  names.emplace_back("mlp");
  names.emplace_back("cnn");
  names.emplace_back("resnet18");
  return names;
}

Result<Workload> BuildWorkload(const ModelSpec& model, const WorkloadOptions& options) {
  if (options.tensor_parallel <= 0 || options.micro_batch <= 0) {
    return Status::InvalidArgument("tensor parallelism and micro-batch must be positive");
  }
  if (model.recorded != nullptr) return RecordedWorkload(model, options);
  return model.is_transformer ? TransformerWorkload(model, options) : ZooWorkload(model, options);
}

double ModelFlopsPerSample(const ModelSpec& model) {
  WorkloadOptions opt;
  Result<Workload> w = BuildWorkload(model, opt);
  if (!w.ok()) return 0.0;
  double flops = 0;
  auto add = [&flops](const Block& blk) {
    for (const Operator& op : blk.ops) {
      if (op.kind == OpKind::kMatmul || op.kind == OpKind::kConv) flops += op.fwd_flops + op.bwd_flops;
    }
  };
  add(w->pre);
  for (const Block& blk : w->blocks) add(blk);
  add(w->post);
  return flops;
}

}  // namespace frugal::sim
