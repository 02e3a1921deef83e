// The scheduling round and node liveness of ClusterManager::Impl.
#include <algorithm>
#include <cstdio>
#include <string>

#include "frugal/sched/decision.h"
#include "manager_impl.h"

namespace frugal::cluster {
namespace {

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

}  // namespace

void ClusterManager::Impl::AccrueService() {
  const double now = clock_.Now();
  const double dt = std::max(0.0, now - last_accrual_);
  last_accrual_ = now;
  for (JobRecord& j : jobs_) {
    if (j.state == JobState::kRunning) j.attained_service += dt * j.Workers();
  }
}

Status ClusterManager::Impl::NodeDown(NodeRecord& node) {
  node.up = false;
  FRUGAL_RETURN_IF_ERROR(store_->SaveNode(node).status());
  FRUGAL_RETURN_IF_ERROR(Event("node-down", 0, node.id,
                               node.name + " sent no heartbeat for " + FormatSeconds(options_.node_timeout_s)));
  for (JobRecord& j : jobs_) {
    if (j.state != JobState::kRunning) continue;
    std::vector<NodeSlots> kept;
    for (const NodeSlots& s : j.placement) {
      if (s.node_id != node.id) kept.push_back(s);
    }
    if (kept.size() == j.placement.size()) continue;
    int workers = 0;
    for (const NodeSlots& s : kept) workers += s.slots;
    // Shrink onto the surviving nodes if the job can run there, else re-queue;
    // either way it resumes from its newest checkpoint.
    if (workers < j.spec.min_workers) kept.clear();
    FRUGAL_RETURN_IF_ERROR(SetPlacement(j, kept, "node " + node.name + " lost"));
  }
  next_round_ = clock_.Now();
  return Status::Ok();
}

Status ClusterManager::Impl::MarkSilentNodesDown() {
  const double now = clock_.Now();
  for (NodeRecord& n : nodes_) {
    if (n.up && now - n.last_heartbeat > options_.node_timeout_s) FRUGAL_RETURN_IF_ERROR(NodeDown(n));
  }
  return Status::Ok();
}

Status ClusterManager::Impl::Tick() {
  FRUGAL_RETURN_IF_ERROR(MarkSilentNodesDown());
  // Submissions, exits and node changes pull the next round forward, but
  // rounds stay at least a second apart: under a burst of submissions each
  // round would otherwise re-decide (and re-save) every active job per tick.
  const double now = clock_.Now();
  if (now >= next_round_ && now - last_round_ >= std::min(1.0, options_.round_interval_s)) return RunRound();
  return Status::Ok();
}

std::vector<sched::JobView> ClusterManager::Impl::BuildViews(const std::vector<JobRecord*>& active,
                                                             const std::map<int64_t, int>& index, int gpus_per_node) {
  std::vector<sched::JobView> views;
  const int cap = gpus_per_node * controller_->MaxNodesPerJob();
  for (JobRecord* j : active) {
    sched::JobView v;
    v.id = j->id;
    v.submit_time = j->submit_time;
    v.max_gpus = std::max(1, std::min(j->spec.max_workers, cap));
    v.requested_gpus = v.max_gpus;  // Non-elastic policies run a job at its largest size.
    v.max_gpus_at_max_batch = v.max_gpus;
    v.batch_size = v.min_batch_size = v.max_batch_size = 1;  // `frugal train` fixes its batch per worker.
    v.attained_service = j->attained_service;
    v.progress = j->progress;
    std::vector<sched::NodeShare> shares;
    for (const NodeSlots& s : j->placement) {
      auto it = index.find(s.node_id);
      if (it != index.end()) shares.push_back({it->second, s.slots});
    }
    std::sort(shares.begin(), shares.end(), [](auto& a, auto& b) { return a.node < b.node; });
    v.placement = sched::Placement(shares);
    v.speed = &speeds_[j->id];
    views.push_back(v);
  }
  return views;
}

// The policy's placements in node ids, fitted to what the controller can
// run. A placement on more nodes than MaxNodesPerJob keeps its size but is
// moved onto the node with the most slots left after every fitting placement
// (or trimmed to them); a job left below its min_workers gets nothing this
// round. The policy decides how many slots each job gets; this step only
// changes where, and only for jobs it placed across hosts.
std::vector<std::vector<NodeSlots>> ClusterManager::Impl::FitToController(
    const std::vector<sched::Placement>& placements, const std::vector<int64_t>& node_of_index,
    const std::vector<JobRecord*>& jobs) const {
  std::vector<std::vector<NodeSlots>> out(placements.size());
  std::map<int64_t, int> free;
  for (const NodeRecord& n : nodes_) {
    if (n.up) free[n.id] = n.slots;
  }
  std::vector<size_t> spread;
  for (size_t k = 0; k < placements.size(); ++k) {
    if (placements[k].NumNodes() > controller_->MaxNodesPerJob()) {
      spread.push_back(k);
      continue;
    }
    for (const sched::NodeShare& s : placements[k].shares()) {
      out[k].push_back({node_of_index[s.node], s.gpus});
      free[node_of_index[s.node]] -= s.gpus;
    }
  }
  for (size_t k : spread) {
    auto best = std::max_element(free.begin(), free.end(), [](auto& a, auto& b) { return a.second < b.second; });
    const int slots = std::min(placements[k].NumGpus(), best->second);
    if (slots < jobs[k]->spec.min_workers) continue;
    out[k] = {{best->first, slots}};
    best->second -= slots;
  }
  for (size_t k = 0; k < out.size(); ++k) {
    int workers = 0;
    for (const NodeSlots& s : out[k]) workers += s.slots;
    if (workers < jobs[k]->spec.min_workers) out[k].clear();
  }
  RaiseToMinimum(placements, jobs, &out);
  return out;
}

// The policies know no minimum size: one may give a job fewer slots than its
// min_workers. Such a job still gets to run if its node can make room: its
// min_workers come from free slots first, then from jobs on that node holding
// more than their own minimum (largest surplus first). Jobs are taken in
// queue order, so earlier jobs are served first.
void ClusterManager::Impl::RaiseToMinimum(const std::vector<sched::Placement>& placements,
                                          const std::vector<JobRecord*>& jobs,
                                          std::vector<std::vector<NodeSlots>>* out) const {
  std::map<int64_t, int> free;
  for (const NodeRecord& n : nodes_) {
    if (n.up) free[n.id] = n.slots;
  }
  for (const auto& p : *out) {
    for (const NodeSlots& s : p) free[s.node_id] -= s.slots;
  }
  auto surplus = [&](size_t j) {  // Slots job j holds above its minimum (one-node placements).
    return (*out)[j].empty() ? 0 : (*out)[j][0].slots - jobs[j]->spec.min_workers;
  };
  for (size_t k = 0; k < out->size(); ++k) {
    if (!(*out)[k].empty() || placements[k].NumGpus() == 0) continue;
    const int need = jobs[k]->spec.min_workers;
    for (auto& [node, slots_free] : free) {
      int avail = slots_free;
      for (size_t j = 0; j < out->size(); ++j) {
        if ((*out)[j].size() == 1 && (*out)[j][0].node_id == node) avail += std::max(0, surplus(j));
      }
      if (avail < need) continue;
      int missing = need - std::min(need, slots_free);
      slots_free -= need - missing;
      while (missing > 0) {
        size_t donor = k;
        for (size_t j = 0; j < out->size(); ++j) {
          if ((*out)[j].size() == 1 && (*out)[j][0].node_id == node && surplus(j) > 0 &&
              (donor == k || surplus(j) > surplus(donor))) {
            donor = j;
          }
        }
        if (donor == k) break;  // Unreachable: `avail` counted enough surplus.
        const int take = std::min(missing, surplus(donor));
        (*out)[donor][0].slots -= take;
        missing -= take;
      }
      (*out)[k] = {{node, need}};
      break;
    }
  }
}

// Note [One scheduling code path]: the round builds the same ClusterView and
// JobViews the simulator builds (sched/simulator.cc, ScheduleRound) and asks
// sched::DecideRound, which calls the policy and checks its answer. The
// cluster is the up nodes, indexed in id order, each counted with the
// smallest slot count among them (ClusterSpec is homogeneous).
Status ClusterManager::Impl::RunRound() {
  AccrueService();
  last_round_ = clock_.Now();
  next_round_ = last_round_ + options_.round_interval_s;
  std::vector<int64_t> node_of_index;
  std::map<int64_t, int> index;
  int gpus_per_node = 0;
  for (const NodeRecord& n : nodes_) {
    if (!n.up) continue;
    index[n.id] = static_cast<int>(node_of_index.size());
    node_of_index.push_back(n.id);
    gpus_per_node = gpus_per_node == 0 ? n.slots : std::min(gpus_per_node, n.slots);
  }
  std::vector<JobRecord*> active;
  for (JobRecord& j : jobs_) {
    if (!IsTerminal(j.state)) active.push_back(&j);
  }
  for (JobRecord* j : active) {
    if (j->state == JobState::kRunning) FRUGAL_RETURN_IF_ERROR(store_->SaveJob(*j).status());  // Attained service.
  }
  if (active.empty() || node_of_index.empty()) return Status::Ok();
  ++rounds_;
  const sched::ClusterView cluster{{static_cast<int>(node_of_index.size()), gpus_per_node}, clock_.Now()};
  const std::vector<sched::JobView> views = BuildViews(active, index, gpus_per_node);
  FRUGAL_ASSIGN_OR_RETURN(sched::RoundDecision decision, sched::DecideRound(*policy_, cluster, views));
  std::vector<std::vector<NodeSlots>> next = FitToController(decision.placements, node_of_index, active);
  for (size_t k = 0; k < active.size(); ++k) {
    if (next[k] == active[k]->placement) continue;
    FRUGAL_RETURN_IF_ERROR(SetPlacement(*active[k], std::move(next[k]), "policy " + policy_->Name()));
  }
  return Status::Ok();
}

}  // namespace frugal::cluster
