#include "gpt_tiny.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace frugal::models {

namespace {

// Multi-head causal self-attention: one fused q/k/v projection, scaled dot
// products masked to the past, an output projection. Written out instead of
// calling scaled_dot_product_attention, which LibTorch 1.13 lacks.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t width, int64_t heads)
      : heads_(heads),
        qkv_(register_module("qkv", torch::nn::Linear(width, 3 * width))),
        proj_(register_module("proj", torch::nn::Linear(width, width))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
    std::vector<torch::Tensor> qkv = qkv_(x).chunk(3, -1);
    auto split = [&](const torch::Tensor& y) { return y.view({b, t, heads_, hd}).transpose(1, 2); };
    torch::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    torch::Tensor future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    att = torch::softmax(att.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    torch::Tensor y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, d});
    return proj_(y);
  }

 private:
  int64_t heads_;
  torch::nn::Linear qkv_, proj_;
};
TORCH_MODULE(CausalSelfAttention);

// Pre-norm transformer block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t width, int64_t heads, int64_t hidden)
      : ln1_(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        attn_(register_module("attn", CausalSelfAttention(width, heads))),
        ln2_(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        fc1_(register_module("fc1", torch::nn::Linear(width, hidden))),
        fc2_(register_module("fc2", torch::nn::Linear(hidden, width))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x + attn_(ln1_(x));
    return x + fc2_(torch::gelu(fc1_(ln2_(x))));
  }

 private:
  torch::nn::LayerNorm ln1_;
  CausalSelfAttention attn_;
  torch::nn::LayerNorm ln2_;
  torch::nn::Linear fc1_, fc2_;
};
TORCH_MODULE(Block);

class GptTiny : public Model {
 public:
  explicit GptTiny(int64_t vocab)
      : tok_(register_module("tok_emb", torch::nn::Embedding(vocab, kGptTinyWidth))),
        pos_(register_module("pos_emb", torch::nn::Embedding(kGptTinyContext, kGptTinyWidth))),
        ln_f_(nullptr),
        head_(nullptr) {
    for (int64_t i = 0; i < kGptTinyLayers; ++i) {
      blocks_.push_back(register_module("block" + std::to_string(i),
                                        Block(kGptTinyWidth, kGptTinyHeads, kGptTinyHidden)));
    }
    ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kGptTinyWidth})));
    head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(kGptTinyWidth, vocab).bias(false)));
  }

  // tokens [N, T] int64, T <= kGptTinyContext -> logits [N, vocab, T].
  torch::Tensor forward(torch::Tensor tokens) override {
    const int64_t t = tokens.size(1);
    torch::Tensor positions = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    torch::Tensor x = tok_(tokens) + pos_(positions);
    for (auto& block : blocks_) x = block(x);
    return head_(ln_f_(x)).transpose(1, 2);
  }

 private:
  torch::nn::Embedding tok_, pos_;
  std::vector<Block> blocks_;
  torch::nn::LayerNorm ln_f_;
  torch::nn::Linear head_;
};

}  // namespace

std::shared_ptr<Model> MakeGptTiny(int64_t vocab) { return std::make_shared<GptTiny>(vocab); }

}  // namespace frugal::models
