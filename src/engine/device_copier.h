// Gradients off an accelerator and parameters back onto it without
// stalling the compute stream (Note [Gradients off the GPU]).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

#include "frugal/common/span.h"
#include "frugal/common/status.h"

namespace frugal::engine {

// Note [Gradients off the GPU]
// On a CPU device a gradient hook copies the gradient straight into the
// pipeline's buffer. On an accelerator a synchronous `.to(kCPU)` per
// parameter would make the host wait for the compute stream at every hook,
// so no further backward kernel is queued while the copy runs. Instead:
//  - each hook makes a side stream wait for the compute stream's work so far
//    (an event) and queues a non-blocking copy of the gradient into the
//    bucket's page-locked (pinned) host buffer on that side stream;
//  - when a bucket's last gradient is queued, an event is recorded on the
//    side stream and the bucket goes to a hand-over thread, which waits for
//    that event alone, copies the pinned buffer into the pipeline's buffer
//    and submits the bucket, so the CPU pipeline starts on early buckets
//    while the GPU is still computing later ones;
//  - the gradients stay referenced until their copy is done, so the caching
//    allocator cannot hand their memory to the compute stream too early;
//  - parameters go back through a second pinned buffer per bucket as
//    non-blocking copies on the compute stream, which orders them before the
//    next forward without making the host wait.
// Only the device-generic c10 stream and event API is used (no CUDA
// headers), so this compiles against any LibTorch and runs wherever the
// device type has streams; on a CPU device the copier is inactive.
class DeviceCopier {
 public:
  // `bucket_sizes`: values per bucket. Inactive (and allocates nothing) for a
  // CPU device or when `enabled` is false.
  DeviceCopier(const torch::Device& device, const std::vector<size_t>& bucket_sizes, bool enabled);
  ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  bool active() const { return active_; }

  // Queues the copy of `grad` (any floating type, on the device) into
  // bucket's staging at `offset`. Called from the autograd thread.
  void CopyGradient(size_t bucket, size_t offset, const torch::Tensor& grad);
  // Zeroes `numel` staged values of a parameter that got no gradient.
  void ZeroStaged(size_t bucket, size_t offset, size_t numel);
  // Every value of the bucket is queued: once the copies have landed, the
  // hand-over thread calls `done` with the staged values.
  using HandOver = std::function<Status(Span<const float>)>;
  void CompleteBucket(size_t bucket, HandOver done);
  // Waits until every completed bucket was handed over; the first hand-over
  // error since the last Drain, if any.
  Status Drain();

  // Parameters back to the device: stages `master` (waiting for the
  // bucket's previous upload to have left the buffer) and returns the pinned
  // tensor to copy from with non_blocking; then call Uploaded(bucket).
  torch::Tensor StageUpload(size_t bucket, Span<const float> master);
  void Uploaded(size_t bucket);

 private:
  struct Job {
    size_t bucket = 0;
    std::optional<c10::Event> landed;
    std::vector<torch::Tensor> sources;  // the gradients, alive until copied
    HandOver done;
  };
  void Run();

  bool active_ = false;
  torch::Device device_{torch::kCPU};
  std::optional<c10::Stream> side_;
  std::vector<torch::Tensor> staged_;                  // per bucket, pinned: gradients
  std::vector<torch::Tensor> upload_;                  // per bucket, pinned: parameters
  std::vector<std::optional<c10::Event>> uploaded_;    // per bucket: the last upload
  std::vector<std::vector<torch::Tensor>> sources_;    // per bucket, this backward

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  size_t in_flight_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace frugal::engine
