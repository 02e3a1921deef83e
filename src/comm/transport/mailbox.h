// Mailbox: the receive side shared by all Transport backends. Delivered
// messages wait in one FIFO queue per (src, tag) until a Take asks for them.
// Also tracks which peers have closed and a sticky backend error.
//
// Thread safety: all methods may be called concurrently (one mutex guards
// everything; waiters share one condition variable).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "frugal/comm/transport/transport.h"
#include "frugal/common/clock.h"
#include "frugal/common/env.h"

namespace frugal::comm {

class Mailbox {
 public:
  // `self` and `topology` only name ranks in error messages. Take's
  // deadline is on `clock`, which outlives the mailbox.
  Mailbox(int self, Topology topology, const Clock& clock = Env::Default());

  void Deliver(int src, Tag tag, Bytes payload);
  // A part of a message from `src` arrived; its last part comes as Deliver
  // (Note [Messages in parts] in zmq/zmq_transport.cc). Until then, and for a
  // timeout after that Deliver, waits on `src` run a timeout from the
  // latest part rather than from their start.
  void PartArrived(int src);

  // Peer `src` will send nothing more: waiters on it fail with Unavailable
  // once its queued messages are taken. `reason` ends up in the message.
  void MarkClosed(int src, const std::string& reason);
  bool IsClosed(int src) const;
  // Why `src` closed ("closed its transport"), or "" while it is open.
  std::string ClosedReason(int src) const;

  // Sticky error: every later Take returns `status` (the first one wins).
  void Fail(Status status);
  Status error() const;

  // The oldest message from (src, tag), waiting up to `timeout`, counted
  // from the later of the call and the latest part from `src` (PartArrived).
  Result<Bytes> Take(int src, Tag tag, std::chrono::milliseconds timeout);

 private:
  const int self_;
  const Topology topology_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, Tag>, std::deque<Bytes>> queues_;  // GUARDED_BY(mu_)
  std::vector<std::string> closed_reason_;                    // GUARDED_BY(mu_); empty = open
  // GUARDED_BY(mu_), by rank: when the latest part of a message in parts
  // arrived (or that message was completed), and whether one is under way.
  std::vector<Clock::time_point> last_part_;
  std::vector<char> receiving_parts_;
  Status error_;                                              // GUARDED_BY(mu_)
};

}  // namespace frugal::comm
