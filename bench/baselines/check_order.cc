// Prints the first indices of Frugal's data order for seed 1 (N = 60000,
// 4 workers of batch 64), for comparison with bench/baselines/data_order.py.
//   g++ -std=c++17 -Iinclude bench/baselines/check_order.cc src/data/batch_plan.cc \
//       src/common/status.cc -o /tmp/check_order && /tmp/check_order
#include <cstdio>

#include "frugal/data/batch_plan.h"

int main() {
  auto plan = frugal::data::BatchPlan::Create(60000, {64, 64, 64, 64}, /*seed=*/1, /*drop_last=*/true);
  if (!plan.ok()) return 1;
  std::vector<int64_t> order = plan->EpochOrder(0);
  for (int i = 0; i < 8; ++i) std::printf("%lld ", static_cast<long long>(order[i]));
  std::printf("| step 1 rank 2 first: %lld\n", static_cast<long long>(plan->Slice(order, 1, 2)[0]));
  return 0;
}
