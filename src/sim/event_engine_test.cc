#include "frugal/sim/event_engine.h"

#include <random>

#include <gtest/gtest.h>

namespace frugal::sim {
namespace {

TEST(EventQueueTest, PopsByTimeThenInsertionOrder) {
  EventQueue q;
  q.Push(2.0, 10);
  q.Push(1.0, 20);
  q.Push(2.0, 11);
  q.Push(1.0, 21);
  q.Push(0.5, 30);
  std::vector<int64_t> order;
  while (!q.empty()) order.push_back(q.Pop().payload);
  EXPECT_EQ(order, (std::vector<int64_t>{30, 20, 21, 10, 11}));
}

TEST(TaskGraphTest, ChainAndParallelStreams) {
  TaskGraph g;
  const ResourceId a = g.AddResource("a");
  const ResourceId b = g.AddResource("b");
  const TaskId a1 = g.AddTask(a, 1.0, 0);
  const TaskId a2 = g.AddTask(a, 2.0, 0);
  const TaskId b1 = g.AddTask(b, 0.5, 1);
  const TaskId b2 = g.AddTask(b, 1.0, 1);
  g.AddDependency(a1, b2);  // b2 waits for a1 although b is free at 0.5.
  Result<EngineResult> r = RunTaskGraph(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->tasks[a2].start, 1.0);
  EXPECT_DOUBLE_EQ(r->tasks[b1].end, 0.5);
  EXPECT_DOUBLE_EQ(r->tasks[b2].start, 1.0);
  EXPECT_DOUBLE_EQ(r->makespan, 3.0);
  EXPECT_DOUBLE_EQ(r->resource_busy[a], 3.0);
  EXPECT_DOUBLE_EQ(r->category_busy[1], 1.5);
}

TEST(TaskGraphTest, StreamsRunInProgramOrder) {
  // The second task of the stream is ready first but must wait its turn.
  TaskGraph g;
  const ResourceId s = g.AddResource("s");
  const ResourceId other = g.AddResource("o");
  const TaskId gate = g.AddTask(other, 5.0, 0);
  const TaskId first = g.AddTask(s, 1.0, 0);
  const TaskId second = g.AddTask(s, 1.0, 0);
  g.AddDependency(gate, first);
  Result<EngineResult> r = RunTaskGraph(g);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->tasks[first].start, 5.0);
  EXPECT_DOUBLE_EQ(r->tasks[second].start, 6.0);
}

TEST(TaskGraphTest, DetectsDeadlock) {
  TaskGraph g;
  const ResourceId s = g.AddResource("stage0");
  const TaskId first = g.AddTask(s, 1.0, 0);
  const TaskId second = g.AddTask(s, 1.0, 0);
  g.AddDependency(second, first);  // First waits for a task queued behind it.
  Result<EngineResult> r = RunTaskGraph(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stage0"), std::string::npos);
}

TaskGraph RandomGraph(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> res(0, 3);
  std::uniform_int_distribution<int> dur(0, 3);  // Many equal times on purpose.
  TaskGraph g;
  for (int r = 0; r < 4; ++r) g.AddResource("r" + std::to_string(r));
  for (int i = 0; i < 500; ++i) {
    const TaskId t = g.AddTask(res(rng), dur(rng) * 0.25, 0);
    if (i > 0) {
      std::uniform_int_distribution<int> pick(0, i - 1);
      g.AddDependency(pick(rng), t);
    }
  }
  return g;
}

TEST(TaskGraphTest, RunsAreDeterministic) {
  const TaskGraph g = RandomGraph(7);
  Result<EngineResult> a = RunTaskGraph(g);
  Result<EngineResult> b = RunTaskGraph(RandomGraph(7));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tasks.size(), b->tasks.size());
  for (size_t i = 0; i < a->tasks.size(); ++i) {
    EXPECT_EQ(a->tasks[i].start, b->tasks[i].start) << i;
    EXPECT_EQ(a->tasks[i].end, b->tasks[i].end) << i;
  }
  EXPECT_EQ(a->makespan, b->makespan);
  EXPECT_EQ(a->events_processed, 500u);
}

}  // namespace
}  // namespace frugal::sim
