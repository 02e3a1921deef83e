// The scheduling round and node liveness of ClusterManager::Impl.
#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
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

// Slots of a host of `host_slots` that a job of `gpus_per_worker` can use
// when the policy sees it as scheduler nodes of `unit` slots
// (Note [Unequal nodes]): whole workers on each.
int UsableSlots(int host_slots, int unit, int gpus_per_worker) {
  return host_slots / unit * (unit / gpus_per_worker * gpus_per_worker);
}

}  // namespace

void ClusterManager::Impl::AccrueService() {
  const double now = clock_.WallSeconds();
  const double dt = std::max(0.0, now - last_accrual_);
  last_accrual_ = now;
  for (JobRecord& j : jobs_) {
    if (j.state == JobState::kRunning) j.attained_service += dt * j.Slots();
  }
}

Status ClusterManager::Impl::NodeDown(NodeRecord& node) {
  node.up = false;
  ++node_version_;
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
    int slots = 0;
    for (const NodeSlots& s : kept) slots += s.slots;
    // Shrink onto the surviving nodes if the job can run there (in place for
    // an elastic job that keeps its coordinator), else re-queue.
    if (slots / j.spec.GpusPerWorker() < j.spec.min_workers) kept.clear();
    FRUGAL_RETURN_IF_ERROR(SetPlacement(j, kept, "node " + node.name + " lost", /*fresh=*/j.home_node == node.id));
  }
  next_round_ = clock_.WallSeconds();
  return Status::Ok();
}

Status ClusterManager::Impl::MarkSilentNodesDown() {
  const double now = clock_.WallSeconds();
  for (NodeRecord& n : nodes_) {
    if (n.up && now - n.last_heartbeat > options_.node_timeout_s) FRUGAL_RETURN_IF_ERROR(NodeDown(n));
  }
  return Status::Ok();
}

// Submissions, exits and node changes pull the next round forward, but rounds
// stay at least a second apart: under a burst of submissions each round would
// otherwise re-decide (and re-save) every active job per tick.
bool ClusterManager::Impl::RoundDue() const {
  const double now = clock_.WallSeconds();
  return now >= next_round_ && now - last_round_ >= std::min(1.0, options_.round_interval_s);
}

void ClusterManager::Impl::BuildViews(const std::vector<JobRecord*>& active, const std::map<int64_t, int>& index,
                                      RoundInput* in) {
  std::vector<int> largest;  // Up nodes' slots, largest first.
  for (const NodeRecord& n : in->up_nodes) largest.push_back(n.slots);
  std::sort(largest.rbegin(), largest.rend());
  const int unit = in->cluster.spec.gpus_per_node;
  std::vector<int> filled(in->up_nodes.size(), 0);  // Slots of each up node given to the views so far.
  for (JobRecord* j : active) {
    const int max_nodes = controller_->MaxNodesPerJob(j->spec);
    const int gpus = j->spec.GpusPerWorker();
    int cap = 0;  // Slots its workers can use on the job's max_nodes largest nodes.
    for (int k = 0; k < std::min<int>(max_nodes, static_cast<int>(largest.size())); ++k) {
      cap += UsableSlots(largest[k], unit, gpus);
    }
    sched::JobView v;
    v.id = j->id;
    v.submit_time = j->submit_time;
    v.gpus_per_worker = gpus;
    v.max_gpus = std::max(gpus, std::min(j->spec.max_workers * gpus, cap));
    v.requested_gpus = v.max_gpus;  // Non-elastic policies run a job at its largest size.
    v.max_gpus_at_max_batch = v.max_gpus;
    v.batch_size = v.min_batch_size = v.max_batch_size = 1;  // `frugal train` fixes its batch per worker.
    v.attained_service = j->attained_service;
    v.progress = j->progress;
    // The current placement on the scheduler's nodes: each up node's slots
    // are handed out in job order over its scheduler nodes.
    std::vector<sched::NodeShare> shares;
    for (const NodeSlots& s : j->placement) {
      auto it = index.find(s.node_id);
      if (it == index.end()) continue;
      const int node = it->second;
      int left = std::min(s.slots, in->up_nodes[node].slots - filled[node]);
      while (left > 0) {
        const int sched_node = in->first_sched[node] + filled[node] / unit;
        const int take = std::min(left, unit - filled[node] % unit);
        shares.push_back({sched_node, take});
        filled[node] += take;
        left -= take;
      }
    }
    std::sort(shares.begin(), shares.end(), [](auto& a, auto& b) { return a.node < b.node; });
    v.placement = sched::Placement(shares);
    // Past its last step: see Note [Held jobs] in sched/decision.cc.
    if (j->state == JobState::kRunning && j->spec.max_steps > 0 && j->last_step >= j->spec.max_steps &&
        !v.placement.empty()) {
      v.Hold();
    }
    in->speeds.push_back(SpeedForRound(*j));
    v.speed = &in->speeds.back();
    in->views.push_back(v);
    in->ids.push_back(j->id);
    in->generations.push_back(j->generation);
    in->min_slots.push_back(j->spec.min_workers * gpus);
    in->gpus_per_worker.push_back(gpus);
    in->max_nodes.push_back(max_nodes);
    in->placements.push_back(j->placement);
  }
}

// The policy's placements in node ids, fitted to what the controller can
// run. A placement on more nodes than MaxNodesPerJob keeps its size but is
// moved onto the node with the most slots left after every fitting placement
// (or trimmed to them); a job left below its min_workers gets nothing this
// round. The policy decides how many slots each job gets; this step only
// changes where, and only for jobs it placed across hosts.
std::vector<std::vector<NodeSlots>> ClusterManager::Impl::FitToController(
    const std::vector<sched::Placement>& placements, const RoundInput& in) const {
  const std::vector<int64_t>& node_of_index = in.node_of_index;
  std::vector<std::vector<NodeSlots>> out(placements.size());
  std::map<int64_t, int> free;
  for (const NodeRecord& n : in.up_nodes) free[n.id] = n.slots;
  std::vector<size_t> spread;
  for (size_t k = 0; k < placements.size(); ++k) {
    if (placements[k].NumNodes() > in.max_nodes[k]) {
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
    const int gpus = in.gpus_per_worker[k];
    const int slots = std::min(placements[k].NumGpus(), best->second) / gpus * gpus;  // Whole workers.
    if (slots < in.min_slots[k]) continue;
    out[k] = {{best->first, slots}};
    best->second -= slots;
  }
  for (size_t k = 0; k < out.size(); ++k) {
    int slots = 0;
    for (const NodeSlots& s : out[k]) slots += s.slots;
    if (slots < in.min_slots[k]) out[k].clear();
  }
  RaiseToMinimum(placements, in, &out);
  return out;
}

// The policies know no minimum size: one may give a job fewer slots than its
// min_workers. Such a job still gets to run if its node can make room: its
// min_workers come from free slots first, then from jobs on that node holding
// more than their own minimum (largest surplus first). Jobs are taken in
// queue order, so earlier jobs are served first.
void ClusterManager::Impl::RaiseToMinimum(const std::vector<sched::Placement>& placements, const RoundInput& in,
                                          std::vector<std::vector<NodeSlots>>* out) const {
  std::map<int64_t, int> free;
  for (const NodeRecord& n : in.up_nodes) free[n.id] = n.slots;
  for (const auto& p : *out) {
    for (const NodeSlots& s : p) free[s.node_id] -= s.slots;
  }
  auto surplus = [&](size_t j) {  // Whole workers' slots job j holds above its minimum (one node, not held).
    if ((*out)[j].empty() || in.views[j].hold) return 0;
    return ((*out)[j][0].slots - in.min_slots[j]) / in.gpus_per_worker[j] * in.gpus_per_worker[j];
  };
  for (size_t k = 0; k < out->size(); ++k) {
    if (!(*out)[k].empty() || placements[k].NumGpus() == 0) continue;
    const int need = in.min_slots[k];
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
        // Whole workers of the donor: what it gives beyond `missing` stays free.
        const int g = in.gpus_per_worker[donor];
        const int take = std::min((missing + g - 1) / g * g, surplus(donor));
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
// cluster is the up nodes, indexed in id order (Note [Unequal nodes]).
//
// Note [Unequal nodes]: sched::ClusterSpec describes equal nodes, and hosts
// are not: a 2-slot and a 4-slot agent offer 6 slots. So the policy is shown
// each up node as slots / unit scheduler nodes of `unit` slots, where unit is
// the greatest common divisor of the up nodes' slot counts (2 + 4 slots: three
// 2-slot nodes; equal nodes: the nodes themselves), and its placements are
// summed back per host (OnUpNodes) before FitToController. Every slot is
// offered and none twice. What it costs: the policy may see a job on one host
// as spread over several of its scheduler nodes, which the live speed
// estimate ignores (it depends on the worker count only), and a placement
// over more hosts than the job may span is moved onto one by FitToController.
// A job whose workers take several slots each (gpus_per_worker) gets whole
// workers on every scheduler node (Note [Workers of several GPUs] in
// sched/placer.cc), so it can use a host only as far as the unit holds
// them: 2 + 4 slots (unit 2) run workers of 2, not of 4 (ExplainTooLarge
// says so).
//
// Note [Rounds outside the lock]: with 10,000 active jobs the policy takes
// about a second, and heartbeats must not wait for it. So the round copies
// what the policy sees under mu_ (PrepareRound), decides without it
// (Decide), and applies the answer under mu_ again (ApplyRound) only if
// nothing it was decided on changed: the same nodes up with the same slots
// (node_version_), and every job it placed still at the generation it was
// seen at, or ended (its slots are free). Jobs submitted meanwhile wait for
// the next round; a discarded decision is retried at the next tick.
Result<bool> ClusterManager::Impl::PrepareRound(RoundInput* in) {
  FRUGAL_RETURN_IF_ERROR(AdoptResizeCost());
  AccrueService();
  last_round_ = clock_.WallSeconds();
  next_round_ = last_round_ + options_.round_interval_s;
  std::map<int64_t, int> index;
  int unit = 0;  // Note [Unequal nodes].
  for (const NodeRecord& n : nodes_) {
    if (!n.up) continue;
    index[n.id] = static_cast<int>(in->node_of_index.size());
    in->node_of_index.push_back(n.id);
    in->up_nodes.push_back(n);
    unit = std::gcd(unit, n.slots);
  }
  for (size_t k = 0; k < in->up_nodes.size(); ++k) {
    in->first_sched.push_back(static_cast<int>(in->node_of_sched.size()));
    for (int i = 0; i < in->up_nodes[k].slots / unit; ++i) in->node_of_sched.push_back(static_cast<int>(k));
  }
  std::vector<JobRecord*> active;
  std::vector<std::pair<int64_t, double>> attained;
  for (JobRecord& j : jobs_) {
    if (IsTerminal(j.state)) continue;
    active.push_back(&j);
    if (j.state == JobState::kRunning) attained.emplace_back(j.id, j.attained_service);
  }
  FRUGAL_RETURN_IF_ERROR(store_->SaveAttained(attained));
  if (active.empty() || in->node_of_index.empty()) return false;
  ++rounds_;
  in->node_version = node_version_;
  in->cluster = {{static_cast<int>(in->node_of_sched.size()), unit}, clock_.WallSeconds()};
  BuildViews(active, index, in);
  return true;
}

Result<std::vector<std::vector<NodeSlots>>> ClusterManager::Impl::Decide(const RoundInput& in) {
  FRUGAL_ASSIGN_OR_RETURN(sched::RoundDecision decision, sched::DecideRound(*policy_, in.cluster, in.views, clock_));
  return FitToController(OnUpNodes(decision.placements, in), in);
}

std::vector<sched::Placement> ClusterManager::Impl::OnUpNodes(const std::vector<sched::Placement>& placements,
                                                             const RoundInput& in) {
  std::vector<sched::Placement> out;
  for (const sched::Placement& p : placements) {
    std::map<int, int> per_node;
    for (const sched::NodeShare& s : p.shares()) per_node[in.node_of_sched[s.node]] += s.gpus;
    std::vector<sched::NodeShare> shares;
    for (const auto& [node, gpus] : per_node) shares.push_back({node, gpus});
    out.emplace_back(std::move(shares));
  }
  return out;
}

Status ClusterManager::Impl::ApplyRound(const RoundInput& in, std::vector<std::vector<NodeSlots>> next) {
  std::vector<JobRecord*> jobs(in.ids.size(), nullptr);
  bool valid = in.node_version == node_version_;
  for (size_t k = 0; valid && k < in.ids.size(); ++k) {
    JobRecord* j = FindJob(in.ids[k]);
    if (j == nullptr || IsTerminal(j->state)) continue;
    valid = j->generation == in.generations[k];
    jobs[k] = j;
  }
  if (!valid) {
    next_round_ = clock_.WallSeconds();
    return Status::Ok();
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (jobs[k] == nullptr || next[k] == jobs[k]->placement) continue;
    FRUGAL_RETURN_IF_ERROR(SetPlacement(*jobs[k], std::move(next[k]), "policy " + policy_->Name()));
  }
  return ExplainTooLarge(in, jobs);
}

// A queued job whose min_workers exceed the slots of the MaxNodesPerJob
// largest up nodes cannot start until hosts join; its message says so
// (saved only when it changes), so that `frugal cluster jobs` tells the
// user why it waits.
Status ClusterManager::Impl::ExplainTooLarge(const RoundInput& in, const std::vector<JobRecord*>& jobs) {
  std::vector<int> slots;
  for (const NodeRecord& n : in.up_nodes) slots.push_back(n.slots);
  std::sort(slots.rbegin(), slots.rend());
  const int unit = in.cluster.spec.gpus_per_node;
  for (JobRecord* j : jobs) {
    if (j == nullptr || j->state != JobState::kQueued) continue;
    const int max_nodes = controller_->MaxNodesPerJob(j->spec);
    const int hosts = std::min<int>(max_nodes, static_cast<int>(slots.size()));
    const int gpus = j->spec.GpusPerWorker();
    int most = 0;
    for (int i = 0; i < hosts; ++i) most += UsableSlots(slots[i], unit, gpus);
    const int need = j->spec.min_workers * gpus;
    if (need <= most) continue;
    const std::string per_worker =
        gpus > 1 ? " (workers of " + std::to_string(gpus) + " slots, each within the hosts' common slot unit of " +
                       std::to_string(unit) + ")"
                 : "";
    const std::string why = "waiting for hosts: needs " + std::to_string(need) + " slots" + per_worker +
                            " on at most " + std::to_string(max_nodes) + " host(s)" +
                            (j->spec.IsCommand() && max_nodes == 1 ? " (--max-nodes-per-job; with --controller "
                                                                      "restart a command job runs on one)"
                                                                    : " (--max-nodes-per-job)") +
                            "; the up hosts offer " + std::to_string(most);
    if (j->message == why) continue;
    j->message = why;
    FRUGAL_RETURN_IF_ERROR(store_->SaveJob(*j).status());
  }
  return Status::Ok();
}

Status ClusterManager::Impl::RoundOffLock() {
  RoundInput in;
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FRUGAL_RETURN_IF_ERROR(Transact([&]() -> Status {
      FRUGAL_ASSIGN_OR_RETURN(any, PrepareRound(&in));
      return Status::Ok();
    }));
  }
  if (!any) return Status::Ok();
  FRUGAL_ASSIGN_OR_RETURN(std::vector<std::vector<NodeSlots>> next, Decide(in));
  std::lock_guard<std::mutex> lock(mu_);
  return Transact([&] { return ApplyRound(in, std::move(next)); });
}

}  // namespace frugal::cluster
