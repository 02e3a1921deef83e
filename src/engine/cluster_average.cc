#include "frugal/engine/cluster_average.h"

#include <cstring>
#include <string>

#include "control_kinds.h"
#include "frugal/compress/codec.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

ClusterAverage::ClusterAverage(comm::Transport* transport, std::vector<torch::Tensor> params,
                               std::chrono::milliseconds timeout, compress::ValueEncoding values)
    : transport_(transport),
      params_(std::move(params)),
      timeout_(timeout),
      bf16_(values == compress::ValueEncoding::kBf16) {
  const comm::Topology& topo = transport_->topology();
  members_ = topo.members(topo.cluster_id(transport_->rank()));
  for (const torch::Tensor& p : params_) numel_ += p.numel();
}

Status ClusterAverage::Average(int64_t t) {
  if (members_.size() < 2) return Status::Ok();
  torch::NoGradGuard no_grad;
  const size_t width = bf16_ ? sizeof(uint16_t) : sizeof(float);
  if (!send_ || send_.use_count() > 1) send_ = std::make_shared<comm::Bytes>(static_cast<size_t>(numel_) * width);
  // Not compress::PutValues: it requires finite values, and a non-finite
  // gradient must reach every member (GradScaler skips the step on all).
  {
    uint8_t* out = send_->data();
    for (torch::Tensor& p : params_) {
      const size_t n = static_cast<size_t>(p.numel());
      if (!p.grad().defined()) {
        std::memset(out, 0, n * width);  // +0 in both encodings
      } else {
        torch::Tensor g = p.grad().detach().to(torch::kCPU, torch::kFloat32).contiguous();
        const float* v = g.data_ptr<float>();
        if (bf16_) {
          auto* h = reinterpret_cast<uint16_t*>(out);
          for (size_t i = 0; i < n; ++i) h[i] = compress::FloatToBf16(v[i]);
        } else {
          std::memcpy(out, v, n * sizeof(float));
        }
      }
      out += n * width;
    }
  }
  const int self = transport_->rank();
  const comm::Tag tag = ControlTag(t, kClusterGradients);
  const comm::SharedBytes shared = send_;
  for (int m : members_) {
    if (m == self) continue;
    FRUGAL_RETURN_IF_ERROR(transport_->Send(m, tag, shared).WithContext("sending gradients to its cluster"));
  }
  // Rank order: every member adds the same values in the same order.
  sum_.assign(static_cast<size_t>(numel_), 0.0f);
  for (int m : members_) {
    comm::Bytes theirs;
    const comm::Bytes* values = shared.get();
    if (m != self) {
      auto got = transport_->Recv(m, tag, timeout_);
      if (!got.ok()) {
        return got.status().WithContext("waiting for the gradients of " + transport_->topology().DescribeRank(m) +
                                        " (--sync site averages a cluster's gradients every step)");
      }
      theirs = std::move(got->payload);
      values = &theirs;
    }
    if (values->size() != shared->size()) {
      return Status::Corruption("the gradients of " + transport_->topology().DescribeRank(m) + " have " +
                                std::to_string(values->size() / width) + " values, this rank's " +
                                std::to_string(numel_) + ": do all workers build the same model?");
    }
    if (bf16_) {
      const auto* h = reinterpret_cast<const uint16_t*>(values->data());
      for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += compress::Bf16ToFloat(h[i]);
    } else {
      const auto* v = reinterpret_cast<const float*>(values->data());
      for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += v[i];
    }
  }
  const float n = static_cast<float>(members_.size());
  for (float& x : sum_) x /= n;
  const float* in = sum_.data();
  for (torch::Tensor& p : params_) {
    torch::Tensor mean = torch::from_blob(const_cast<float*>(in), p.sizes(), torch::kFloat32);
    if (p.grad().defined()) {
      p.mutable_grad().copy_(mean);
    } else {
      p.mutable_grad() = mean.to(p.options()).clone();
    }
    in += p.numel();
  }
  return Status::Ok();
}

}  // namespace frugal::engine
