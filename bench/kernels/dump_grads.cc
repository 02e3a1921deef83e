// frugal_dump_grads: trains the Fashion-MNIST `mlp` (784-2048-2048-10, ReLU)
// with LibTorch for a few hundred steps and writes the gradients of every
// parameter at chosen steps to a FRGD file (grad_file.h) that
// frugal_kernels_bench reads, so selection quality is measured on real
// gradients. Standalone: src/train may replace it later.
//
// With --compress topk|block|randomk it also trains the way the engine will:
// per tensor, error feedback + that sparsifier at --density, then the sparse
// SGD-momentum step of frugal_optim on the selected coordinates, and reports
// the test accuracy; a quick check of what a sparsifier's selection quality
// costs in training. Dumped gradients are always the raw ones.
//
//   frugal_dump_grads [--out grads.bin] [--data DIR] [--steps 300]
//                     [--dump-every 100] [--batch 64] [--lr 0.01] [--seed 1]
//                     [--compress none|topk|block|randomk] [--density 0.01]
#include <torch/torch.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "frugal/compress/error_feedback.h"
#include "frugal/compress/sparsifier.h"
#include "frugal/optim/sparse_optimizer.h"
#include "grad_file.h"

namespace {

using frugal::Result;
using frugal::Status;

Result<std::vector<uint8_t>> ReadGz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Status::NotFound("cannot open " + path);
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof(buf))) > 0) data.insert(data.end(), buf, buf + got);
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (got < 0 || err < 0) return Status::Corruption(path + ": " + msg);
  return data;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// idx3 images -> [n, 784] float in [0, 1]; idx1 labels -> [n] int64.
Result<std::pair<torch::Tensor, torch::Tensor>> LoadFashionMnist(const std::string& dir, const std::string& split) {
  FRUGAL_ASSIGN_OR_RETURN(auto images, ReadGz(dir + "/" + split + "-images-idx3-ubyte.gz"));
  FRUGAL_ASSIGN_OR_RETURN(auto labels, ReadGz(dir + "/" + split + "-labels-idx1-ubyte.gz"));
  if (images.size() < 16 || BigEndian32(images.data()) != 2051) return Status::Corruption("bad idx3 image header");
  if (labels.size() < 8 || BigEndian32(labels.data()) != 2049) return Status::Corruption("bad idx1 label header");
  const int64_t n = BigEndian32(images.data() + 4);
  const int64_t rows = BigEndian32(images.data() + 8), cols = BigEndian32(images.data() + 12);
  if (rows * cols != 784 || images.size() != static_cast<size_t>(16 + n * 784) ||
      labels.size() != static_cast<size_t>(8 + n)) {
    return Status::Corruption("Fashion-MNIST files have unexpected sizes");
  }
  torch::Tensor x = torch::from_blob(images.data() + 16, {n, 784}, torch::kUInt8).to(torch::kFloat32).div_(255.0);
  torch::Tensor y = torch::from_blob(labels.data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
  return std::make_pair(x, y);
}

struct Flags {
  std::string out, data = "/usr/share/datasets/fashion-mnist", compress = "none";
  int steps = 300, dump_every = 100, batch = 64;
  double lr = 0.01, density = 0.01;
  uint64_t seed = 1;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--out") f.out = next();
    else if (a == "--data") f.data = next();
    else if (a == "--steps") f.steps = std::stoi(next());
    else if (a == "--dump-every") f.dump_every = std::stoi(next());
    else if (a == "--batch") f.batch = std::stoi(next());
    else if (a == "--lr") f.lr = std::stod(next());
    else if (a == "--seed") f.seed = std::stoull(next());
    else if (a == "--compress") f.compress = next();
    else if (a == "--density") f.density = std::stod(next());
    else throw std::invalid_argument("unknown flag " + a);
  }
  if (f.steps <= 0 || f.dump_every <= 0 || f.batch <= 0 || !(f.density > 0 && f.density <= 1)) {
    throw std::invalid_argument(
        "usage: frugal_dump_grads [--out FILE] [--data DIR] [--steps N] [--dump-every N] "
        "[--compress none|topk|block|randomk] [--density D]");
  }
  return f;
}

const char* const kNames[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"};

// The compressed path: per tensor error feedback, sparsifier and sparse optimizer.
struct CompressedPath {
  std::vector<frugal::compress::ErrorFeedback> feedback;
  std::vector<std::unique_ptr<frugal::compress::Sparsifier>> sparsifiers;
  std::vector<std::unique_ptr<frugal::optim::SparseOptimizer>> optimizers;
  size_t sent = 0, total = 0;  // coordinates sent and held, over every step
};

CompressedPath BuildCompressedPath(const Flags& f, const std::vector<torch::Tensor>& params) {
  CompressedPath c;
  for (size_t p = 0; p < params.size(); ++p) {
    const size_t n = static_cast<size_t>(params[p].numel());
    c.feedback.emplace_back(n, frugal::compress::ErrorFeedbackOptions{kNames[p], 0.0f});
    frugal::compress::SparsifierOptions so;
    so.tensor_name = kNames[p];
    so.seed = f.seed + p;
    auto s = frugal::compress::CreateSparsifier(f.compress, so);
    if (!s.ok()) throw std::invalid_argument(s.status().message());
    c.sparsifiers.push_back(std::move(s).value());
    frugal::optim::OptimizerOptions oo;
    oo.lr = f.lr;
    oo.momentum = 0.9;
    c.optimizers.push_back(std::move(frugal::optim::CreateSparseOptimizer(oo, n, kNames[p]).value()));
  }
  return c;
}

// One step of the compressed path on the gradients in `params`.
Status CompressedStep(const Flags& f, const std::vector<torch::Tensor>& params, CompressedPath* c) {
  torch::NoGradGuard no_grad;
  for (size_t p = 0; p < params.size(); ++p) {
    torch::Tensor g = params[p].grad().contiguous();
    const size_t n = static_cast<size_t>(g.numel());
    frugal::compress::SparseVector sv;
    FRUGAL_RETURN_IF_ERROR(c->feedback[p].Compress(frugal::Span<const float>(g.data_ptr<float>(), n),
                                                   *c->sparsifiers[p], f.density, &sv));
    torch::Tensor w = params[p];
    FRUGAL_RETURN_IF_ERROR(c->optimizers[p]->Step(frugal::Span<float>(w.data_ptr<float>(), n), sv.indices, sv.values));
    c->sent += sv.nnz();
    c->total += n;
  }
  return Status::Ok();
}

void AppendGradients(int step, const std::vector<torch::Tensor>& params,
                     std::vector<frugal::bench::NamedGradient>* dumped) {
  for (size_t p = 0; p < params.size(); ++p) {
    torch::Tensor g = params[p].grad().contiguous();
    frugal::bench::NamedGradient ng;
    ng.name = "step" + std::to_string(step) + "/" + kNames[p];
    ng.values.assign(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    dumped->push_back(std::move(ng));
  }
}

void ReportAccuracy(const Flags& f, torch::nn::Sequential& mlp, const std::pair<torch::Tensor, torch::Tensor>& test,
                    const CompressedPath& c, double mean_recent_loss) {
  torch::NoGradGuard no_grad;
  torch::Tensor pred = mlp->forward(test.first).argmax(1);
  double acc = pred.eq(test.second).to(torch::kFloat64).mean().item<double>();
  std::cout << "compress=" << f.compress << " density=" << (f.compress == "none" ? 1.0 : f.density)
            << " sent_fraction=" << (c.total ? static_cast<double>(c.sent) / static_cast<double>(c.total) : 1.0)
            << " steps=" << f.steps << " mean_train_loss_last_100=" << mean_recent_loss
            << " test_accuracy=" << acc << "\n";
}

int Fail(const Status& st) {
  std::cerr << "frugal_dump_grads: " << st.ToString() << "\n";
  return 1;
}

int Run(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  torch::manual_seed(f.seed);
  torch::set_num_threads(1);
  auto loaded = LoadFashionMnist(f.data, "train");
  auto test = LoadFashionMnist(f.data, "t10k");
  for (const auto* r : {&loaded, &test}) {
    if (!r->ok()) return Fail(r->status());
  }
  auto [x, y] = loaded.value();
  torch::nn::Sequential mlp(torch::nn::Linear(784, 2048), torch::nn::ReLU(), torch::nn::Linear(2048, 2048),
                            torch::nn::ReLU(), torch::nn::Linear(2048, 10));
  torch::optim::SGD opt(mlp->parameters(), torch::optim::SGDOptions(f.lr).momentum(0.9));
  CompressedPath compressed = f.compress != "none" ? BuildCompressedPath(f, mlp->parameters()) : CompressedPath{};
  double recent_loss = 0;
  int recent = 0;
  std::vector<frugal::bench::NamedGradient> dumped;
  torch::Tensor perm = torch::randperm(x.size(0));
  for (int step = 1; step <= f.steps; ++step) {
    int64_t start = ((step - 1) * f.batch) % (x.size(0) - f.batch);
    torch::Tensor idx = perm.slice(0, start, start + f.batch);
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(mlp->forward(x.index_select(0, idx)),
                                                              y.index_select(0, idx));
    loss.backward();
    if (!f.out.empty() && step % f.dump_every == 0) {
      AppendGradients(step, mlp->parameters(), &dumped);
      std::cout << "step " << step << " loss " << loss.item<float>() << " (dumped)\n";
    }
    if (step > f.steps - 100) {
      recent_loss += loss.item<double>();
      ++recent;
    }
    if (f.compress == "none") {
      opt.step();
    } else if (Status st = CompressedStep(f, mlp->parameters(), &compressed); !st.ok()) {
      return Fail(st.WithContext("step " + std::to_string(step)));
    }
  }
  ReportAccuracy(f, mlp, test.value(), compressed, recent_loss / std::max(recent, 1));
  if (f.out.empty()) return 0;
  if (Status st = frugal::bench::WriteGradFile(f.out, dumped); !st.ok()) return Fail(st);
  std::cout << "wrote " << dumped.size() << " gradients to " << f.out << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "frugal_dump_grads: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "frugal_dump_grads: torch error: " << e.what_without_backtrace() << "\n";
    return 1;
  }
}
