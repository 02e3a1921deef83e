#include "frugal/models/model.h"

#include "gpt_tiny.h"

namespace frugal::models {

namespace {

class Mlp : public Model {
 public:
  explicit Mlp(int64_t num_classes)
      : fc1_(register_module("fc1", torch::nn::Linear(784, 2048))),
        fc2_(register_module("fc2", torch::nn::Linear(2048, 2048))),
        fc3_(register_module("fc3", torch::nn::Linear(2048, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = x.flatten(1);
    x = torch::relu(fc1_(x));
    x = torch::relu(fc2_(x));
    return fc3_(x);
  }

 private:
  torch::nn::Linear fc1_, fc2_, fc3_;
};

class Cnn : public Model {
 public:
  explicit Cnn(int64_t num_classes)
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        fc1_(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 512))),
        fc2_(register_module("fc2", torch::nn::Linear(512, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(conv1_(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_(x)), 2);
    x = torch::relu(fc1_(x.flatten(1)));
    return fc2_(x);
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  torch::nn::Linear fc1_, fc2_;
};

// ResNet basic block: two 3x3 convolutions with batch norm and an identity
// (or 1x1 projection) shortcut.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2_(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut_ = register_module(
          "shortcut", torch::nn::Sequential(
                          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                          torch::nn::BatchNorm2d(out)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = torch::relu(bn1_(conv1_(x)));
    y = bn2_(conv2_(y));
    return torch::relu(y + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet18 : public Model {
 public:
  explicit ResNet18(int64_t num_classes)
      : stem_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 64, 3).padding(1).bias(false)))),
        bn_(register_module("bn1", torch::nn::BatchNorm2d(64))),
        fc_(nullptr) {
    int64_t in = 64;
    const int64_t widths[4] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; ++stage) {
      torch::nn::Sequential layer;
      for (int b = 0; b < 2; ++b) {
        int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
        layer->push_back(BasicBlock(in, widths[stage], stride));
        in = widths[stage];
      }
      layers_.push_back(register_module("layer" + std::to_string(stage + 1), layer));
    }
    fc_ = register_module("fc", torch::nn::Linear(512, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn_(stem_(x)));
    for (auto& layer : layers_) x = layer->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_(x);
  }

 private:
  torch::nn::Conv2d stem_;
  torch::nn::BatchNorm2d bn_;
  std::vector<torch::nn::Sequential> layers_;
  torch::nn::Linear fc_;
};

}  // namespace

const std::vector<std::string>& ModelNames() {
  static const std::vector<std::string> kNames = {"mlp", "cnn", "resnet18", "gpt-tiny"};
  return kNames;
}

int64_t SequenceLength(const std::string& name) { return name == "gpt-tiny" ? kGptTinyContext : 0; }

Result<std::shared_ptr<Model>> CreateModel(const std::string& name, int64_t num_classes) {
  if (num_classes <= 0) return Status::InvalidArgument("num_classes must be positive");
  if (name == "mlp") return std::shared_ptr<Model>(std::make_shared<Mlp>(num_classes));
  if (name == "cnn") return std::shared_ptr<Model>(std::make_shared<Cnn>(num_classes));
  if (name == "resnet18") return std::shared_ptr<Model>(std::make_shared<ResNet18>(num_classes));
  if (name == "gpt-tiny") return MakeGptTiny(num_classes);
  return Status::InvalidArgument("unknown model '" + name + "' (known: mlp, cnn, resnet18, gpt-tiny)");
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace frugal::models
