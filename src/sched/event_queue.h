// The simulator's event queue: a binary min-heap keyed by (time, sequence
// number), so events at equal times run in the order they were scheduled and
// every run is deterministic. Internal to src/sched.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

namespace frugal::sched {

enum class EventKind { kArrival, kRound, kCompletion };

struct Event {
  double time = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kRound;
  size_t job = 0;        // Arrival, completion.
  uint64_t version = 0;  // Completion: valid only if the job's placement is unchanged since.
};

class EventQueue {
 public:
  void Push(double time, EventKind kind, size_t job = 0, uint64_t version = 0) {
    heap_.push(Event{time, next_seq_++, kind, job, version});
  }
  bool empty() const { return heap_.empty(); }
  // REQUIRES: !empty().
  Event Pop() {
    Event e = heap_.top();
    heap_.pop();
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      if (a.time != b.time) return a.time > b.time;
      return a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace frugal::sched
