#include "frugal/engine/cluster_average.h"

#include <cstring>
#include <string>

#include "control_kinds.h"
#include "frugal/common/clock.h"
#include "frugal/engine/gradient_pipeline.h"

namespace frugal::engine {

ClusterAverage::ClusterAverage(comm::Transport* transport, std::vector<torch::Tensor> params,
                               std::chrono::milliseconds timeout)
    : transport_(transport), params_(std::move(params)), timeout_(timeout) {
  const comm::Topology& topo = transport_->topology();
  members_ = topo.members(topo.cluster_id(transport_->rank()));
  for (const torch::Tensor& p : params_) numel_ += p.numel();
}

Status ClusterAverage::Average(int64_t t) {
  if (members_.size() < 2) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  auto mine = std::make_shared<comm::Bytes>(static_cast<size_t>(numel_) * sizeof(float));
  {
    auto* out = reinterpret_cast<float*>(mine->data());
    for (torch::Tensor& p : params_) {
      if (p.grad().defined()) {
        torch::Tensor g = p.grad().detach().to(torch::kCPU, torch::kFloat32).contiguous();
        std::memcpy(out, g.data_ptr<float>(), g.numel() * sizeof(float));
      } else {
        std::memset(out, 0, p.numel() * sizeof(float));
      }
      out += p.numel();
    }
  }
  const int self = transport_->rank();
  const comm::Tag tag = ControlTag(t, kClusterGradients);
  comm::SharedBytes shared = mine;
  for (int m : members_) {
    if (m == self) continue;
    FRUGAL_RETURN_IF_ERROR(transport_->Send(m, tag, shared).WithContext("sending gradients to its cluster"));
    bytes_sent_ += shared->size();
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
                                std::to_string(values->size() / sizeof(float)) + " values, this rank's " +
                                std::to_string(numel_) + ": do all workers build the same model?");
    }
    const auto* v = reinterpret_cast<const float*>(values->data());
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += v[i];
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
  seconds_ += Seconds(std::chrono::steady_clock::now() - start);
  return Status::Ok();
}

}  // namespace frugal::engine
