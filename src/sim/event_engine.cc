#include "frugal/sim/event_engine.h"

#include <algorithm>
#include <cassert>

namespace frugal::sim {
namespace {

// std::push_heap builds a max-heap; "greater" puts the earliest event on top.
struct Later {
  bool operator()(const EventQueue::Event& a, const EventQueue::Event& b) const {
    if (a.time != b.time) return a.time > b.time;
    return a.seq > b.seq;
  }
};

}  // namespace

uint64_t EventQueue::Push(double time, int64_t payload) {
  const uint64_t seq = next_seq_++;
  heap_.push_back(Event{time, seq, payload});
  std::push_heap(heap_.begin(), heap_.end(), Later());
  return seq;
}

EventQueue::Event EventQueue::Pop() {
  assert(!heap_.empty());
  std::pop_heap(heap_.begin(), heap_.end(), Later());
  Event e = heap_.back();
  heap_.pop_back();
  return e;
}

ResourceId TaskGraph::AddResource(std::string name) {
  resources_.push_back(Resource{std::move(name), {}});
  return static_cast<ResourceId>(resources_.size() - 1);
}

TaskId TaskGraph::AddTask(ResourceId resource, double duration, int category) {
  assert(resource >= 0 && static_cast<size_t>(resource) < resources_.size());
  assert(category >= 0 && category < 32);
  const TaskId id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(Task{resource, std::max(0.0, duration), category, 0, {}});
  resources_[resource].order.push_back(id);
  return id;
}

void TaskGraph::AddDependency(TaskId before, TaskId after) {
  assert(before >= 0 && static_cast<size_t>(before) < tasks_.size());
  assert(after >= 0 && static_cast<size_t>(after) < tasks_.size());
  tasks_[before].dependents.push_back(after);
  ++tasks_[after].num_deps;
}

class TaskGraphRunner {
 public:
  explicit TaskGraphRunner(const TaskGraph& g)
      : g_(g),
        deps_left_(g.tasks_.size()),
        next_(g.resources_.size(), 0),
        busy_(g.resources_.size(), false) {
    for (size_t i = 0; i < g.tasks_.size(); ++i) deps_left_[i] = g.tasks_[i].num_deps;
    result_.tasks.resize(g.tasks_.size());
    result_.resource_busy.assign(g.resources_.size(), 0.0);
    result_.category_busy.assign(32, 0.0);
  }

  Result<EngineResult> Run() {
    for (size_t r = 0; r < g_.resources_.size(); ++r) TryStart(static_cast<ResourceId>(r), 0.0);
    size_t done = 0;
    while (!queue_.empty()) {
      const EventQueue::Event e = queue_.Pop();
      ++result_.events_processed;
      const TaskId id = static_cast<TaskId>(e.payload);
      const TaskGraph::Task& task = g_.tasks_[id];
      ++done;
      busy_[task.resource] = false;
      ++next_[task.resource];
      result_.makespan = std::max(result_.makespan, e.time);
      for (TaskId d : task.dependents) {
        if (--deps_left_[d] == 0) TryStart(g_.tasks_[d].resource, e.time);
      }
      TryStart(task.resource, e.time);
    }
    if (done != g_.tasks_.size()) {
      for (size_t r = 0; r < g_.resources_.size(); ++r) {
        if (next_[r] < g_.resources_[r].order.size()) {
          return Status::Internal("simulation deadlocked: stream '" + g_.resources_[r].name + "' is stuck at task " +
                                  std::to_string(g_.resources_[r].order[next_[r]]) + " (" +
                                  std::to_string(done) + " of " + std::to_string(g_.tasks_.size()) + " tasks ran)");
        }
      }
      return Status::Internal("simulation deadlocked");
    }
    return std::move(result_);
  }

 private:
  void TryStart(ResourceId r, double now) {
    if (busy_[r]) return;
    const auto& order = g_.resources_[r].order;
    if (next_[r] >= order.size()) return;
    const TaskId id = order[next_[r]];
    if (deps_left_[id] != 0) return;
    const TaskGraph::Task& task = g_.tasks_[id];
    busy_[r] = true;
    result_.tasks[id] = TaskTiming{now, now + task.duration};
    result_.resource_busy[r] += task.duration;
    result_.category_busy[task.category] += task.duration;
    queue_.Push(now + task.duration, id);
  }

  const TaskGraph& g_;
  std::vector<int32_t> deps_left_;
  std::vector<size_t> next_;
  std::vector<bool> busy_;
  EventQueue queue_;
  EngineResult result_;
};

Result<EngineResult> RunTaskGraph(const TaskGraph& graph) { return TaskGraphRunner(graph).Run(); }

}  // namespace frugal::sim
