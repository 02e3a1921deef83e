// Discrete-event engine of the simulator.
//
// EventQueue is a binary heap keyed by (time, sequence number): events at the
// same time pop in the order they were pushed, so a run is deterministic.
//
// TaskGraph holds one iteration's work: tasks with durations, each bound to a
// resource (a compute stream or a link), plus dependencies. A resource is an
// in-order stream, like a CUDA stream: it runs its tasks one at a time in the
// order they were added to the graph, each as soon as it is the stream's next
// task, its dependencies are done and the previous one finished.
// RunTaskGraph() plays the graph through the event queue.
//
// Thread safety: none; one graph/queue per thread. No global state, so many
// engines may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/common/status.h"

namespace frugal::sim {

class EventQueue {
 public:
  struct Event {
    double time = 0;
    uint64_t seq = 0;
    int64_t payload = 0;
  };

  // Returns the sequence number given to the event.
  uint64_t Push(double time, int64_t payload);
  // REQUIRES: !empty().
  Event Pop();
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

 private:
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

using TaskId = int32_t;
using ResourceId = int32_t;

class TaskGraph {
 public:
  ResourceId AddResource(std::string name);
  // `category` is a caller-defined small integer used to sum busy time
  // (e.g. forward, backward, p2p, dp-allreduce); 0 <= category < 32.
  TaskId AddTask(ResourceId resource, double duration, int category);
  // `before` must finish before `after` starts.
  void AddDependency(TaskId before, TaskId after);

  size_t num_tasks() const { return tasks_.size(); }
  size_t num_resources() const { return resources_.size(); }
  const std::string& resource_name(ResourceId r) const { return resources_[r].name; }

 private:
  friend class TaskGraphRunner;
  struct Task {
    ResourceId resource;
    double duration;
    int category;
    int32_t num_deps = 0;
    std::vector<TaskId> dependents;
  };
  struct Resource {
    std::string name;
    std::vector<TaskId> order;
  };
  std::vector<Task> tasks_;
  std::vector<Resource> resources_;
};

struct TaskTiming {
  double start = 0;
  double end = 0;
};

struct EngineResult {
  double makespan = 0;
  std::vector<TaskTiming> tasks;           // Indexed by TaskId.
  std::vector<double> resource_busy;       // Seconds, indexed by ResourceId.
  std::vector<double> category_busy;       // Seconds summed over resources, by category.
  uint64_t events_processed = 0;
};

// Internal error when the graph cannot finish (a dependency cycle, or a
// stream whose next task waits on a later task of the same stream).
Result<EngineResult> RunTaskGraph(const TaskGraph& graph);

}  // namespace frugal::sim
