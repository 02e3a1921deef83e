#include "mailbox.h"

namespace frugal::comm {

Mailbox::Mailbox(int self, Topology topology, const Clock& clock)
    : self_(self),
      topology_(std::move(topology)),
      clock_(clock),
      closed_reason_(topology_.world_size()),
      last_part_(topology_.world_size()),
      receiving_parts_(topology_.world_size(), 0) {}

void Mailbox::Deliver(int src, Tag tag, Bytes payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[{src, tag}].push_back(std::move(payload));
    if (src >= 0 && src < static_cast<int>(receiving_parts_.size()) && receiving_parts_[src]) {
      receiving_parts_[src] = 0;
      last_part_[src] = clock_.Now();
    }
  }
  cv_.notify_all();
}

void Mailbox::PartArrived(int src) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (src < 0 || src >= static_cast<int>(last_part_.size())) return;
    receiving_parts_[src] = 1;
    last_part_[src] = clock_.Now();
  }
  cv_.notify_all();
}

void Mailbox::MarkClosed(int src, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (src < 0 || src >= static_cast<int>(closed_reason_.size())) return;
    if (closed_reason_[src].empty()) closed_reason_[src] = reason.empty() ? "closed" : reason;
  }
  cv_.notify_all();
}

bool Mailbox::IsClosed(int src) const {
  std::lock_guard<std::mutex> lock(mu_);
  return src >= 0 && src < static_cast<int>(closed_reason_.size()) && !closed_reason_[src].empty();
}

std::string Mailbox::ClosedReason(int src) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (src < 0 || src >= static_cast<int>(closed_reason_.size())) return "";
  return closed_reason_[src];
}

void Mailbox::Fail(Status status) {
  if (status.ok()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = std::move(status);
  }
  cv_.notify_all();
}

Status Mailbox::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Result<Bytes> Mailbox::Take(int src, Tag tag, std::chrono::milliseconds timeout) {
  const Clock::time_point start = clock_.Now();
  const std::pair<int, Tag> key{src, tag};
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Queued messages are handed out even after the peer closed or the
    // backend failed: they arrived intact.
    auto it = queues_.find(key);
    if (it != queues_.end() && !it->second.empty()) {
      Bytes payload = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) queues_.erase(it);
      return payload;
    }
    if (!error_.ok()) return error_;
    if (!closed_reason_[src].empty()) {
      return Status::Unavailable(topology_.DescribeRank(src) + " " + closed_reason_[src] +
                                 " before sending tag " + std::to_string(tag) + " to " +
                                 topology_.DescribeRank(self_));
    }
    // The deadline is on clock_; the condition variable waits at most the
    // time left on it, then the loop looks again (a message may have
    // arrived together with the timeout). A part from `src` moves it on.
    const bool parts = last_part_[src] > start;
    const Clock::time_point deadline = (parts ? last_part_[src] : start) + timeout;
    const Clock::duration left = deadline - clock_.Now();
    if (left > Clock::duration::zero()) {
      cv_.wait_for(lock, left);
    } else {
      return Status::Timeout("no message with tag " + std::to_string(tag) + " from " +
                             topology_.DescribeRank(src) + " to " + topology_.DescribeRank(self_) + " within " +
                             std::to_string(timeout.count()) + " ms" +
                             (parts ? " of the last part of a message it was sending" : ""));
    }
  }
}

}  // namespace frugal::comm
