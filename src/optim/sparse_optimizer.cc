// Sparse SGD and Adam/AdamW. See include/frugal/optim/sparse_optimizer.h.
//
// Note [Matching torch bit for bit]
// Each update is written as the same sequence of fp32 operations, with the
// same scalar casts, as LibTorch 1.13's dense kernels (torch/csrc/api/src/
// optim/{sgd,adam,adamw}.cpp): double hyper-parameters are rounded to float
// once, bias corrections are computed in double, and "x.add_(y, alpha)" is
// fma(y, alpha, x), because torch's vectorised CPU kernels use fused
// multiply-adds for it (Vectorized::fmadd). With that, our results equal
// torch's bit for bit on this machine (the test allows 1e-6 relative error).
// The kernels are compiled twice, with and without target("fma"), and picked
// at run time, so the library still runs (slower: std::fma is then a libm
// call) on CPUs without FMA.
#include "frugal/optim/sparse_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/common/finite.h"

namespace frugal::optim {
namespace {
constexpr uint32_t kStateMagic = 0x54504f46;  // "FOPT"
constexpr uint8_t kStateVersion = 1;

Status CheckStepArgs(const std::string& name, size_t size, Span<float> params, Span<const uint32_t> indices,
                     Span<const float> values) {
  if (params.size() != size) {
    return Status::InvalidArgument("tensor '" + name + "': " + std::to_string(params.size()) +
                                   " parameters, optimizer was created for " + std::to_string(size));
  }
  if (indices.size() != values.size()) {
    return Status::InvalidArgument("tensor '" + name + "': " + std::to_string(indices.size()) + " indices but " +
                                   std::to_string(values.size()) + " gradient values");
  }
  // The (small) sparse input: order and range, then finiteness.
  for (size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] >= size || (j > 0 && indices[j] <= indices[j - 1])) {
      return Status::InvalidArgument("tensor '" + name + "': index " + std::to_string(indices[j]) +
                                     " at position " + std::to_string(j) +
                                     (indices[j] >= size ? " is out of range" : " is not strictly increasing"));
    }
  }
  if (!AllFinite(values)) {
    const size_t j = FirstNonFinite(values);
    return Status::InvalidArgument("tensor '" + name + "': gradient has " + (std::isnan(values[j]) ? "NaN" : "Inf") +
                                   " at index " + std::to_string(indices[j]) + "; step skipped");
  }
  return Status::Ok();
}

Status CheckDenseFinite(const std::string& name, Span<const float> grad) {
  if (AllFinite(grad)) return Status::Ok();
  const size_t i = FirstNonFinite(grad);
  return Status::InvalidArgument("tensor '" + name + "': gradient has " + (std::isnan(grad[i]) ? "NaN" : "Inf") +
                                 " at index " + std::to_string(i) + "; step skipped");
}

// Adapts a dense gradient to the sparse loop without materialising indices.
struct AllIndices {
  uint32_t operator[](size_t j) const { return static_cast<uint32_t>(j); }
};

void PutBytes(std::vector<uint8_t>* out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

// Shared state serialisation: header, step, then named float buffers.
void AppendBuffers(std::vector<uint8_t>* out, uint8_t kind, uint64_t step,
                   const std::vector<const std::vector<float>*>& bufs, const std::vector<uint64_t>& bitmap) {
  PutBytes(out, &kStateMagic, 4);  // Little-endian hosts only.
  out->push_back(kStateVersion);
  out->push_back(kind);
  PutBytes(out, &step, 8);
  for (const auto* b : bufs) {
    uint64_t n = b->size();
    PutBytes(out, &n, 8);
    PutBytes(out, b->data(), 4 * b->size());
  }
  uint64_t words = bitmap.size();
  PutBytes(out, &words, 8);
  PutBytes(out, bitmap.data(), 8 * bitmap.size());
}

size_t BuffersBytes(const std::vector<const std::vector<float>*>& bufs, const std::vector<uint64_t>& bitmap) {
  size_t n = 4 + 1 + 1 + 8 + 8 + 8 * bitmap.size();
  for (const auto* b : bufs) n += 8 + 4 * b->size();
  return n;
}

Status DeserializeBuffers(Span<const uint8_t> bytes, const std::string& name, uint8_t kind, uint64_t* step,
                          const std::vector<std::vector<float>*>& bufs, std::vector<uint64_t>* bitmap) {
  const std::string where = "tensor '" + name + "': optimizer state: ";
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (bytes.size() - pos < n) return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  };
  uint32_t magic = 0;
  uint8_t version = 0, got_kind = 0;
  uint64_t got_step = 0;
  if (!take(&magic, 4) || !take(&version, 1) || !take(&got_kind, 1) || !take(&got_step, 8)) {
    return Status::Corruption(where + "truncated header");
  }
  if (magic != kStateMagic) return Status::Corruption(where + "bad magic");
  if (version != kStateVersion) return Status::Corruption(where + "unsupported version");
  if (got_kind != kind) return Status::InvalidArgument(where + "saved by a different optimizer kind");
  // Validate all sizes before copying anything, so failure leaves state unchanged.
  size_t scan = pos;
  for (auto* b : bufs) {
    uint64_t n = 0;
    if (bytes.size() - scan < 8) return Status::Corruption(where + "truncated");
    std::memcpy(&n, bytes.data() + scan, 8);
    if (n != b->size()) return Status::InvalidArgument(where + "buffer size differs from the tensor");
    scan += 8;
    if ((bytes.size() - scan) / 4 < n) return Status::Corruption(where + "truncated buffer");
    scan += 4 * n;
  }
  uint64_t words = 0;
  if (bytes.size() - scan < 8) return Status::Corruption(where + "truncated");
  std::memcpy(&words, bytes.data() + scan, 8);
  if (words != bitmap->size()) return Status::InvalidArgument(where + "bitmap size differs from the tensor");
  scan += 8;
  if (bytes.size() - scan != 8 * words) return Status::Corruption(where + "wrong length");
  *step = got_step;
  // memcpy with an empty vector's null data() is undefined even for 0 bytes
  // (UBSan; Adam has no bitmap): copy only what exists.
  for (auto* b : bufs) {
    pos += 8;
    if (!b->empty()) std::memcpy(b->data(), bytes.data() + pos, 4 * b->size());
    pos += 4 * b->size();
  }
  pos += 8;
  if (words > 0) std::memcpy(bitmap->data(), bytes.data() + pos, 8 * words);
  return Status::Ok();
}

bool HasFma() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

struct SgdScalars {
  float wd, m, one_minus_damp, neg_lr;
  bool use_wd, use_momentum, nesterov;
};

// Note [Matching torch bit for bit]. Per coordinate, as torch's SGD:
//   d = g + wd * p;  buf = first ? d : m * buf + (1 - damp) * d;
//   d = nesterov ? d + m * buf : buf;  p = p + (-lr) * d.
// "first" is per coordinate (torch's per-tensor first step, applied to each
// coordinate the first time it is updated).
// One coordinate of SgdLoop; `first` means no momentum buffer yet.
__attribute__((always_inline)) inline void SgdOne(const SgdScalars& k, float& p, float g, float& buf, bool first) {
  float d = g;
  if (k.use_wd) d = std::fma(p, k.wd, d);
  float b;
  if (first) {
    b = d;
  } else {
    b = buf * k.m;
    b = std::fma(d, k.one_minus_damp, b);
  }
  buf = b;
  d = k.nesterov ? std::fma(b, k.m, d) : b;
  p = std::fma(d, k.neg_lr, p);
}

// Note [Contiguous runs]
// The block sparsifier sends whole aligned runs of 16 coordinates. For such a
// run whose momentum buffers all exist, the update is a branch-free loop over
// contiguous memory that the compiler vectorises; the arithmetic per element
// is the same, so results are identical to the one-at-a-time path.
template <typename Indices>
__attribute__((always_inline)) inline void SgdLoop(const SgdScalars& k, float* p, Indices idx, const float* g,
                                                   size_t count, float* buf, uint64_t* init) {
  if (!k.use_momentum) {
    for (size_t j = 0; j < count; ++j) {
      const uint32_t i = idx[j];
      float d = g[j];
      if (k.use_wd) d = std::fma(p[i], k.wd, d);
      p[i] = std::fma(d, k.neg_lr, p[i]);
    }
    return;
  }
  size_t j = 0;
  while (j < count) {
    const uint32_t i0 = idx[j];
    if (i0 % 16 == 0 && j + 16 <= count && idx[j + 15] == i0 + 15 &&
        ((init[i0 / 64] >> (i0 % 64)) & 0xffff) == 0xffff) {
      float* pp = p + i0;
      float* bb = buf + i0;
      const float* gg = g + j;
      for (int t = 0; t < 16; ++t) SgdOne(k, pp[t], gg[t], bb[t], false);
      j += 16;
      continue;
    }
    const uint64_t bit = uint64_t{1} << (i0 % 64);
    SgdOne(k, p[i0], g[j], buf[i0], (init[i0 / 64] & bit) == 0);
    init[i0 / 64] |= bit;
    ++j;
  }
}

struct AdamScalars {
  float b1, one_minus_b1, b2, one_minus_b2, sqrt_bc2, eps, neg_step, wd, decay;
  bool use_wd, decoupled;
};

// Note [Matching torch bit for bit]. Per coordinate, as torch's Adam/AdamW:
//   adamw: p = p * (1 - lr * wd);   adam: g = g + wd * p
//   m = m * b1 + (1 - b1) * g;  v = v * b2 + ((1 - b2) * g) * g
//   denom = sqrt(v) / sqrt(bc2) + eps;  p = p + ((-lr / bc1) * m) / denom
__attribute__((always_inline)) inline void AdamOne(const AdamScalars& k, float& p, float g, float& m, float& v) {
  float grad = g;
  float param = p;
  if (k.use_wd) {
    if (k.decoupled) {
      param = param * k.decay;
    } else {
      grad = std::fma(param, k.wd, grad);
    }
  }
  float mi = m * k.b1;
  mi = std::fma(grad, k.one_minus_b1, mi);
  float vi = v * k.b2;
  vi = std::fma(k.one_minus_b2 * grad, grad, vi);
  m = mi;
  v = vi;
  const float denom = std::sqrt(vi) / k.sqrt_bc2 + k.eps;
  p = param + (k.neg_step * mi) / denom;
}

// Contiguous runs as in Note [Contiguous runs].
template <typename Indices>
__attribute__((always_inline)) inline void AdamLoop(const AdamScalars& k, float* p, Indices idx, const float* g,
                                                    size_t count, float* m, float* v) {
  size_t j = 0;
  while (j < count) {
    const uint32_t i0 = idx[j];
    if (j + 16 <= count && idx[j + 15] == i0 + 15) {
      for (int t = 0; t < 16; ++t) AdamOne(k, p[i0 + t], g[j + t], m[i0 + t], v[i0 + t]);
      j += 16;
      continue;
    }
    AdamOne(k, p[i0], g[j], m[i0], v[i0]);
    ++j;
  }
}

// The same loops compiled with and without hardware FMA (see the Note).
template <typename Indices>
__attribute__((target("fma"))) void SgdLoopFma(const SgdScalars& k, float* p, Indices idx, const float* g,
                                               size_t count, float* buf, uint64_t* init) {
  SgdLoop(k, p, idx, g, count, buf, init);
}
template <typename Indices>
void SgdLoopPlain(const SgdScalars& k, float* p, Indices idx, const float* g, size_t count, float* buf,
                  uint64_t* init) {
  SgdLoop(k, p, idx, g, count, buf, init);
}
template <typename Indices>
__attribute__((target("fma"))) void AdamLoopFma(const AdamScalars& k, float* p, Indices idx, const float* g,
                                                size_t count, float* m, float* v) {
  AdamLoop(k, p, idx, g, count, m, v);
}
template <typename Indices>
void AdamLoopPlain(const AdamScalars& k, float* p, Indices idx, const float* g, size_t count, float* m, float* v) {
  AdamLoop(k, p, idx, g, count, m, v);
}

// What every sparse optimizer shares: argument checks, the dense path (every
// index), the learning rate and the names. `Derived::Update(p, idx, g, count)`
// is a template over the index source (a pointer or AllIndices), hence CRTP.
template <typename Derived>
class SparseOptimizerBase : public SparseOptimizer {
 public:
  SparseOptimizerBase(const OptimizerOptions& o, size_t n, std::string name) : o_(o), n_(n), name_(std::move(name)) {}

  Status Step(Span<float> params, Span<const uint32_t> indices, Span<const float> values) override {
    FRUGAL_RETURN_IF_ERROR(CheckStepArgs(name_, n_, params, indices, values));
    self().Update(params.data(), indices.data(), values.data(), values.size());
    return Status::Ok();
  }

  Status StepDense(Span<float> params, Span<const float> grad) override {
    if (grad.size() != n_) return Status::InvalidArgument("tensor '" + name_ + "': gradient size differs");
    FRUGAL_RETURN_IF_ERROR(CheckStepArgs(name_, n_, params, Span<const uint32_t>(), Span<const float>()));
    FRUGAL_RETURN_IF_ERROR(CheckDenseFinite(name_, grad));
    self().Update(params.data(), AllIndices(), grad.data(), n_);
    return Status::Ok();
  }

  void set_lr(double lr) override { o_.lr = lr; }
  double lr() const override { return o_.lr; }
  size_t size() const override { return n_; }
  const std::string& tensor_name() const override { return name_; }

 protected:
  Derived& self() { return static_cast<Derived&>(*this); }

  OptimizerOptions o_;
  const size_t n_;
  const std::string name_;
  const bool fma_ = HasFma();
};

class SparseSgd final : public SparseOptimizerBase<SparseSgd> {
 public:
  SparseSgd(const OptimizerOptions& o, size_t n, std::string name) : SparseOptimizerBase(o, n, std::move(name)) {
    if (o.momentum != 0.0) {
      buf_.assign(n, 0.0f);
      initialized_.assign((n + 63) / 64, 0);
    }
  }

  void AppendState(std::vector<uint8_t>* out) const override { AppendBuffers(out, 0, 0, {&buf_}, initialized_); }
  size_t StateBytes() const override { return BuffersBytes({&buf_}, initialized_); }
  Status DeserializeState(Span<const uint8_t> bytes) override {
    uint64_t step = 0;
    return DeserializeBuffers(bytes, name_, 0, &step, {&buf_}, &initialized_);
  }
  std::vector<float*> DenseBuffers() override {
    if (buf_.empty()) return {};
    return {buf_.data()};
  }
  uint64_t dense_steps() const override { return !initialized_.empty() && (initialized_[0] & 1) != 0 ? 1 : 0; }
  void set_dense_steps(uint64_t steps) override {
    std::fill(initialized_.begin(), initialized_.end(), steps > 0 ? ~uint64_t{0} : 0);
  }

 private:
  friend class SparseOptimizerBase<SparseSgd>;
  template <typename Indices>
  void Update(float* p, Indices idx, const float* g, size_t count) {
    SgdScalars k;
    k.wd = static_cast<float>(o_.weight_decay);
    k.m = static_cast<float>(o_.momentum);
    k.one_minus_damp = static_cast<float>(1.0 - o_.dampening);
    k.neg_lr = static_cast<float>(-1.0 * o_.lr);
    k.use_wd = o_.weight_decay != 0.0;
    k.use_momentum = o_.momentum != 0.0;
    k.nesterov = o_.nesterov;
    if (fma_) {
      SgdLoopFma(k, p, idx, g, count, buf_.data(), initialized_.data());
    } else {
      SgdLoopPlain(k, p, idx, g, count, buf_.data(), initialized_.data());
    }
  }

  std::vector<float> buf_;
  std::vector<uint64_t> initialized_;  // Which coordinates have a momentum buffer.
};

class SparseAdam final : public SparseOptimizerBase<SparseAdam> {
 public:
  SparseAdam(const OptimizerOptions& o, size_t n, std::string name)
      : SparseOptimizerBase(o, n, std::move(name)), decoupled_(o.kind == "adamw"), m_(n, 0.0f), v_(n, 0.0f) {}

  void AppendState(std::vector<uint8_t>* out) const override {
    AppendBuffers(out, decoupled_ ? 2 : 1, step_, {&m_, &v_}, {});
  }
  size_t StateBytes() const override { return BuffersBytes({&m_, &v_}, {}); }
  Status DeserializeState(Span<const uint8_t> bytes) override {
    std::vector<uint64_t> no_bitmap;
    return DeserializeBuffers(bytes, name_, decoupled_ ? 2 : 1, &step_, {&m_, &v_}, &no_bitmap);
  }
  std::vector<float*> DenseBuffers() override { return {m_.data(), v_.data()}; }
  uint64_t dense_steps() const override { return step_; }
  void set_dense_steps(uint64_t steps) override { step_ = steps; }

 private:
  friend class SparseOptimizerBase<SparseAdam>;
  template <typename Indices>
  void Update(float* p, Indices idx, const float* g, size_t count) {
    ++step_;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(step_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(step_));
    AdamScalars k;
    k.b1 = static_cast<float>(o_.beta1);
    k.one_minus_b1 = static_cast<float>(1.0 - o_.beta1);
    k.b2 = static_cast<float>(o_.beta2);
    k.one_minus_b2 = static_cast<float>(1.0 - o_.beta2);
    k.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
    k.eps = static_cast<float>(o_.eps);
    k.neg_step = static_cast<float>(-(o_.lr / bc1));
    k.wd = static_cast<float>(o_.weight_decay);
    k.decay = static_cast<float>(1.0 - o_.lr * o_.weight_decay);
    k.use_wd = o_.weight_decay != 0.0;
    k.decoupled = decoupled_;
    if (fma_) {
      AdamLoopFma(k, p, idx, g, count, m_.data(), v_.data());
    } else {
      AdamLoopPlain(k, p, idx, g, count, m_.data(), v_.data());
    }
  }

  bool decoupled_;
  uint64_t step_ = 0;
  std::vector<float> m_, v_;
};

// Note [Segmented optimizer]
// A torch optimizer's parameter groups give the parameters of one bucket
// different settings (the usual recipe: no weight decay on norms and
// biases). The bucket keeps one optimizer, a composite of one per run of
// parameters that share a group, so the pipeline's tasks, state sections
// and locks stay per bucket. A step's indices are sorted, so each segment's
// share is a contiguous run of them, found by binary search and shifted to
// the segment's own coordinates; every segment is stepped on every call
// (with none of the indices, too), so each Adam step count advances as a
// group's does in torch. The whole step is checked before any segment
// changes, so a bad gradient leaves all of them as they were.
class SegmentedOptimizer final : public SparseOptimizer {
 public:
  SegmentedOptimizer(std::vector<std::unique_ptr<SparseOptimizer>> parts, std::vector<double> factors,
                     std::string name)
      : parts_(std::move(parts)), factors_(std::move(factors)), name_(std::move(name)) {
    for (const auto& part : parts_) {
      offsets_.push_back(n_);
      n_ += part->size();
    }
  }

  Status Step(Span<float> params, Span<const uint32_t> indices, Span<const float> values) override {
    FRUGAL_RETURN_IF_ERROR(CheckStepArgs(name_, n_, params, indices, values));
    size_t lo = 0;
    for (size_t s = 0; s < parts_.size(); ++s) {
      const uint32_t end = static_cast<uint32_t>(offsets_[s] + parts_[s]->size());
      const size_t hi = std::lower_bound(indices.begin() + lo, indices.end(), end) - indices.begin();
      local_.resize(hi - lo);
      for (size_t j = lo; j < hi; ++j) local_[j - lo] = indices[j] - static_cast<uint32_t>(offsets_[s]);
      FRUGAL_RETURN_IF_ERROR(parts_[s]->Step(params.subspan(offsets_[s], parts_[s]->size()), local_,
                                             values.subspan(lo, hi - lo)));
      lo = hi;
    }
    return Status::Ok();
  }

  Status StepDense(Span<float> params, Span<const float> grad) override {
    if (grad.size() != n_) return Status::InvalidArgument("tensor '" + name_ + "': gradient size differs");
    FRUGAL_RETURN_IF_ERROR(CheckStepArgs(name_, n_, params, Span<const uint32_t>(), Span<const float>()));
    FRUGAL_RETURN_IF_ERROR(CheckDenseFinite(name_, grad));
    for (size_t s = 0; s < parts_.size(); ++s) {
      FRUGAL_RETURN_IF_ERROR(parts_[s]->StepDense(params.subspan(offsets_[s], parts_[s]->size()),
                                                  grad.subspan(offsets_[s], parts_[s]->size())));
    }
    return Status::Ok();
  }

  void set_lr(double lr) override {
    lr_ = lr;
    for (size_t s = 0; s < parts_.size(); ++s) parts_[s]->set_lr(lr * factors_[s]);
  }
  double lr() const override { return lr_; }
  size_t size() const override { return n_; }
  const std::string& tensor_name() const override { return name_; }

  // Each segment's bytes after their count (8 bytes, little-endian).
  void AppendState(std::vector<uint8_t>* out) const override {
    for (const auto& part : parts_) {
      const uint64_t bytes = part->StateBytes();
      for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(bytes >> (8 * i)));
      part->AppendState(out);
    }
  }
  size_t StateBytes() const override {
    size_t total = 0;
    for (const auto& part : parts_) total += 8 + part->StateBytes();
    return total;
  }
  Status DeserializeState(Span<const uint8_t> bytes) override {
    // Parsed into fresh copies first, so malformed bytes leave this unchanged.
    std::vector<std::vector<uint8_t>> saved;
    for (const auto& part : parts_) saved.push_back(part->SerializeState());
    size_t pos = 0;
    for (size_t s = 0; s < parts_.size(); ++s) {
      uint64_t n = 0;
      if (bytes.size() - pos < 8) return Restore(saved, "truncated");
      for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[pos + i]) << (8 * i);
      pos += 8;
      if (n > bytes.size() - pos) return Restore(saved, "truncated");
      if (Status st = parts_[s]->DeserializeState(bytes.subspan(pos, n)); !st.ok()) {
        return Restore(saved, st.message());
      }
      pos += n;
    }
    if (pos != bytes.size()) return Restore(saved, "trailing bytes");
    return Status::Ok();
  }

  std::vector<float*> DenseBuffers() override { return {}; }
  uint64_t dense_steps() const override { return 0; }
  void set_dense_steps(uint64_t) override {}

 private:
  Status Restore(const std::vector<std::vector<uint8_t>>& saved, const std::string& why) {
    for (size_t s = 0; s < parts_.size(); ++s) (void)parts_[s]->DeserializeState(saved[s]);
    return Status::InvalidArgument("tensor '" + name_ + "': optimizer state of " + std::to_string(parts_.size()) +
                                   " parameter groups is malformed: " + why);
  }

  std::vector<std::unique_ptr<SparseOptimizer>> parts_;
  std::vector<double> factors_;
  std::vector<size_t> offsets_;
  size_t n_ = 0;
  double lr_ = 0;
  std::string name_;
  std::vector<uint32_t> local_;  // one segment's indices, in its own coordinates
};

}  // namespace

bool operator==(const OptimizerOptions& a, const OptimizerOptions& b) {
  return a.kind == b.kind && a.lr == b.lr && a.weight_decay == b.weight_decay && a.momentum == b.momentum &&
         a.dampening == b.dampening && a.nesterov == b.nesterov && a.beta1 == b.beta1 && a.beta2 == b.beta2 &&
         a.eps == b.eps;
}

std::vector<uint8_t> SparseOptimizer::SerializeState() const {
  std::vector<uint8_t> out;
  out.reserve(StateBytes());
  AppendState(&out);
  return out;
}

Result<std::unique_ptr<SparseOptimizer>> CreateSparseOptimizer(const OptimizerOptions& o, size_t num_params,
                                                                const std::string& tensor_name) {
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("optimizer for tensor '" + tensor_name + "': " + what);
  };
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) return bad("lr must be a finite number >= 0");
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) return bad("weight_decay must be >= 0");
  if (num_params > (size_t{1} << 32)) return bad("more than 2^32 parameters");
  if (o.kind == "sgd") {
    if (!(o.momentum >= 0) || !std::isfinite(o.momentum)) return bad("momentum must be >= 0");
    if (!(o.dampening >= 0 && o.dampening <= 1)) return bad("dampening must be in [0, 1]");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      return bad("Nesterov momentum requires momentum > 0 and dampening == 0");
    }
    return std::unique_ptr<SparseOptimizer>(new SparseSgd(o, num_params, tensor_name));
  }
  if (o.kind == "adam" || o.kind == "adamw") {
    if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) return bad("betas must be in [0, 1)");
    if (!(o.eps >= 0) || !std::isfinite(o.eps)) return bad("eps must be >= 0");
    return std::unique_ptr<SparseOptimizer>(new SparseAdam(o, num_params, tensor_name));
  }
  return bad("unknown optimizer '" + o.kind + "' (expected sgd, adam or adamw)");
}

Result<std::unique_ptr<SparseOptimizer>> CreateSegmentedOptimizer(const std::vector<OptimizerSegment>& segments,
                                                                   const std::string& tensor_name) {
  if (segments.empty()) return Status::InvalidArgument("optimizer for tensor '" + tensor_name + "': no segments");
  std::vector<std::unique_ptr<SparseOptimizer>> parts;
  std::vector<double> factors;
  size_t total = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const OptimizerSegment& seg = segments[s];
    const std::string name = tensor_name + (segments.size() > 1 ? "[segment " + std::to_string(s) + "]" : "");
    if (seg.size == 0) return Status::InvalidArgument("optimizer for tensor '" + name + "': empty segment");
    if (!(seg.lr_factor >= 0) || !std::isfinite(seg.lr_factor)) {
      return Status::InvalidArgument("optimizer for tensor '" + name + "': lr factor must be a finite number >= 0");
    }
    total += seg.size;
    FRUGAL_ASSIGN_OR_RETURN(auto part, CreateSparseOptimizer(seg.options, seg.size, name));
    parts.push_back(std::move(part));
    factors.push_back(seg.lr_factor);
  }
  if (total > (size_t{1} << 32)) {
    return Status::InvalidArgument("optimizer for tensor '" + tensor_name + "': more than 2^32 parameters");
  }
  if (parts.size() == 1 && factors[0] == 1.0) return std::move(parts[0]);
  return std::unique_ptr<SparseOptimizer>(new SegmentedOptimizer(std::move(parts), std::move(factors), tensor_name));
}

}  // namespace frugal::optim
