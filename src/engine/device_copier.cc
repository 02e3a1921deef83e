#include "device_copier.h"

#include <chrono>
#include <cstring>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace frugal::engine {

namespace {

// How often the hand-over thread and an upload look at an event that has not
// fired yet: short against a bucket's copy (a 4 MB bucket takes ~0.2 ms over
// PCIe 4), long enough not to spin a core.
constexpr auto kPoll = std::chrono::microseconds(50);

void WaitFor(const c10::Event& event) {
  while (!event.query()) std::this_thread::sleep_for(kPoll);
}

torch::Tensor Pinned(size_t n) {
  return torch::empty({static_cast<int64_t>(n)}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
}

}  // namespace

DeviceCopier::DeviceCopier(const torch::Device& device, const std::vector<size_t>& bucket_sizes, bool enabled)
    : device_(device) {
  if (!enabled || device.is_cpu()) return;
  c10::impl::VirtualGuardImpl impl(device.type());
  if (!device_.has_index()) device_ = impl.getDevice();  // "cuda" = the current one
  side_ = impl.getStreamFromGlobalPool(device_);
  for (size_t n : bucket_sizes) {
    staged_.push_back(Pinned(n));
    upload_.push_back(Pinned(n));
  }
  uploaded_.resize(bucket_sizes.size());
  sources_.resize(bucket_sizes.size());
  active_ = true;
  thread_ = std::thread([this] { Run(); });
}

DeviceCopier::~DeviceCopier() {
  if (!active_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DeviceCopier::CopyGradient(size_t bucket, size_t offset, const torch::Tensor& grad) {
  // Conversion on the compute stream, then the side stream waits for it.
  torch::Tensor source = grad.detach().to(torch::kFloat32).contiguous().view({-1});
  c10::impl::VirtualGuardImpl impl(device_.type());
  c10::Event ready(device_.type());
  ready.record(impl.getStream(device_));
  ready.block(*side_);
  {
    c10::StreamGuard on_side(*side_);
    staged_[bucket].narrow(0, static_cast<int64_t>(offset), source.numel()).copy_(source, /*non_blocking=*/true);
  }
  sources_[bucket].push_back(std::move(source));
}

void DeviceCopier::ZeroStaged(size_t bucket, size_t offset, size_t numel) {
  std::memset(staged_[bucket].data_ptr<float>() + offset, 0, numel * sizeof(float));
}

void DeviceCopier::CompleteBucket(size_t bucket, HandOver done) {
  Job job;
  job.bucket = bucket;
  job.landed.emplace(device_.type());
  job.landed->record(*side_);
  job.sources = std::move(sources_[bucket]);
  sources_[bucket].clear();
  job.done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    ++in_flight_;
  }
  cv_.notify_all();
}

void DeviceCopier::Run() {
  for (;;) {
    Job job;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ with nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      stopping = stop_;
    }
    // Even when the replica is going, the copies must land before the
    // pinned buffers are freed; its pipeline may be gone, so no hand-over.
    WaitFor(*job.landed);
    job.sources.clear();
    if (stopping) continue;
    const torch::Tensor& staged = staged_[job.bucket];
    Status s = job.done(Span<const float>(staged.data_ptr<float>(), static_cast<size_t>(staged.numel())));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok() && error_.ok()) error_ = s;
      --in_flight_;
    }
    cv_.notify_all();
  }
}

Status DeviceCopier::Drain() {
  if (!active_) return Status::Ok();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return in_flight_ == 0; });
  Status s = error_;
  error_ = Status::Ok();
  return s;
}

torch::Tensor DeviceCopier::StageUpload(size_t bucket, Span<const float> master) {
  if (uploaded_[bucket]) WaitFor(*uploaded_[bucket]);
  torch::Tensor& buffer = upload_[bucket];
  std::memcpy(buffer.data_ptr<float>(), master.data(), master.size() * sizeof(float));
  return buffer;
}

void DeviceCopier::Uploaded(size_t bucket) {
  c10::impl::VirtualGuardImpl impl(device_.type());
  uploaded_[bucket].emplace(device_.type());
  uploaded_[bucket]->record(impl.getStream(device_));
}

}  // namespace frugal::engine
