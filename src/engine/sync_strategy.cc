// The strategies of include/frugal/engine/sync_strategy.h and their factory.
#include "frugal/engine/sync_strategy.h"

#include <cstdio>
#include <utility>

#include "frugal/engine/cluster_average.h"
#include "frugal/engine/local_sync.h"
#include "frugal/engine/pipeline_record.h"

namespace frugal::engine {

namespace {

// An empty section: the state's parameters are its masters (Note
// [Parameters from masters] in worker_elastic.cc).
constexpr const char* kMastersAsParameters = "masters_as_parameters";

Status RequireSection(const CheckpointSections& s, const char* name, const std::string& what,
                      const char* hint = "") {
  if (s.count(name)) return Status::Ok();
  return Status::Corruption(what + " has no '" + name + "' section" + hint);
}

// --sync step: the Replica's GradientPipeline exchanges every iteration's
// gradients and steps the optimizer on the masters.
class StepSync final : public SyncStrategy {
 public:
  StepSync(std::unique_ptr<Replica> replica, comm::ExchangeAlgorithm exchange)
      : SyncStrategy(std::move(replica)), pipeline_(this->replica().pipeline()), exchange_(exchange) {}

  Status BeginIteration(int64_t t, bool check_replicas) override { return replica().BeginIteration(t, check_replicas); }
  Status EndBackward(int64_t) override { return replica().EndBackward(); }
  Status Finish(int64_t) override { return replica().Finish(); }
  Result<uint64_t> CheckReplicas(int64_t t) override { return replica().CheckReplicas(t); }
  // Every rank's parameters are the shared version already.
  Status WithSyncedParameters(const std::function<Status()>& fn) override { return fn(); }

  PipelineStats stats() const override { return pipeline_->stats(); }
  comm::ExchangeAlgorithm exchange() const override { return exchange_; }
  std::string Describe() const override { return ""; }
  std::string Progress(double density) const override { return DensityText(density); }
  GradientPipeline* pipeline() override { return pipeline_; }

  Status SaveState(StateScope scope, CheckpointSections* sections) override {
    return SaveStepState(replica(), scope, sections);
  }
  Status RestoreState(const CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                      const std::string& what) override {
    return RestoreStepState(replica(), s, mine, residuals, what);
  }

  void PrepareForJoiners(CheckpointSections* snapshot, std::set<std::string>* skip) override {
    PrepareStepStateForJoiners(replica(), snapshot, skip);
  }

 private:
  GradientPipeline* const pipeline_;  // the replica's
  const comm::ExchangeAlgorithm exchange_;
};

// --sync local: inner steps on every rank, outer rounds through LocalSync.
// The Replica has no pipeline (Note [Replica without a pipeline] in
// replica.cc): it gives the layout, averages the buffers and saves the
// parameters; LocalSync broadcasts rank 0's initial values.
class LocalRounds : public SyncStrategy {
 public:
  LocalRounds(std::unique_ptr<Replica> replica, std::unique_ptr<LocalSync> local, const DistributedOptions& dist,
              OuterStep outer)
      : SyncStrategy(std::move(replica)),
        transport_(&this->replica().transport()),
        local_(std::move(local)),
        dist_(dist),
        outer_(outer) {}

  Status Settle(int64_t t) override { return local_->Settle(t); }
  bool SavesBeforeBegin() const override { return true; }
  Status BeginIteration(int64_t t, bool check_replicas) override { return local_->BeginIteration(t, check_replicas); }
  Status EndBackward(int64_t t) override { return local_->EndBackward(t); }
  Status Finish(int64_t t) override { return local_->Finish(t); }
  Result<uint64_t> CheckReplicas(int64_t t) override { return local_->CheckReplicas(t); }
  // Evaluations see the anchor, the model every rank shares.
  Status WithSyncedParameters(const std::function<Status()>& fn) override { return local_->OnAnchor(fn); }

  PipelineStats stats() const override { return local_->stats(); }
  comm::ExchangeAlgorithm exchange() const override {
    return LocalExchangeOf(dist_, transport_->topology().num_clusters());
  }
  std::string Describe() const override;
  // A window holds whole fragments or none: its density says little.
  std::string Progress(double) const override { return "syncs " + std::to_string(local_->rounds()); }

  Status SaveState(StateScope scope, CheckpointSections* sections) override {
    return SaveLocalState(*local_, replica(), outer_, scope, sections);
  }

  Status RestoreState(const CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                      const std::string& what) override;

  // A joiner's model takes the anchor and its own part starts empty
  // (Note [Local mode across worlds]).
  void PrepareForJoiners(CheckpointSections*, std::set<std::string>* skip) override {
    SkipLocalStateForJoiners(skip);
  }

 protected:
  // Which restored ranks keep their own inner progress (OwnPart).
  virtual OwnPart OwnPartOnRestore() const { return OwnPart::kKeep; }

 private:
  comm::Transport* const transport_;  // the replica's
  std::unique_ptr<LocalSync> local_;  // destroyed before the base's Replica
  const DistributedOptions dist_;
  const OuterStep outer_;
};

std::string LocalRounds::Describe() const {
  char line[256];
  const std::string overlap =
      dist_.local_overlap ? "overlapped, outer steps " + std::to_string(LocalDelayOf(dist_)) + " steps late" : "blocking";
  std::snprintf(line, sizeof(line),
                "local updates: %lld inner steps per round (on the %s) in %lld fragment(s), %s, outer lr %g%s, "
                "outer momentum %g",
                static_cast<long long>(dist_.local_steps), local_->inner_on_device() ? "device" : "host",
                static_cast<long long>(LocalFragmentsOf(dist_)), overlap.c_str(), outer_.lr,
                dist_.outer_anneal && outer_.momentum > 0 ? " (annealed)" : "", outer_.momentum);
  return line;
}

// The shared section from rank 0's file, this rank's own part from its
// file (or rank 0's, for rank 0), or, in an elastic run, from this worker's
// snapshot.
//
// Note [Local mode across worlds]
// The local mode's state splits like the
// step pipeline's. The shared part (anchor, outer momentum, pending outer
// steps, round counters) is the same on every rank and goes to joiners. A
// rank's own part is its inner parameters and optimizer state, the base
// of its round, and its exchange state. A survivor of a membership change
// keeps its inner progress since the last sync point, and its next
// pseudo-gradient (base - master) is averaged over the new world as any
// rank's is. A joiner starts the round at the anchor with fresh inner state
// (LocalSync::RestoreSections without an own part), so rank 0 does not send
// it the model's parameters (its own inner ones): 23 MB less for mlp. The
// exchange state is tied to the rank and world it was saved in: in the
// sharded exchange a rank owns shard `rank` of `world` and keeps that
// shard's residual, and a cluster leader keeps its cluster's. So it is kept
// only when both are unchanged (a resume with the same world, bit-exact as
// before) and dropped otherwise: at density 1, the default, it holds only
// the rounding of the int4 values sent. The outer step must keep its form in
// every generation (a Nesterov step's momentum buffer, or none), so with
// --outer-lr auto an elastic run takes the Nesterov step whatever its
// length (OuterOf with total_steps 0): without --global-batch its steps
// per epoch follow the world size, and a world of one once chose
// differently from the first generation.
Status LocalRounds::RestoreState(const CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                                 const std::string& what) {
  return RestoreLocalState(*local_, *transport_, s, mine, residuals, OwnPartOnRestore(), what);
}

// Note [Site replicas]
// --sync site: a cluster (--cluster) trains as one replica. Its members
// average their gradients every step over the cluster's links
// (ClusterAverage), so with the same parameters, the same mean gradient and
// the same inner optimizer state they take the same inner step: the members
// stay bit-identical, and the local mode's rounds run between clusters. A
// round's pseudo-gradients are then equal inside a cluster, and the
// hierarchical exchange (the default across clusters) sums them at the
// cluster's leader, which alone sends the cluster's round over the slow
// link: the same bytes there per round as the per-worker local mode, from
// half as many replicas on two clusters of two, which drift apart less
// between rounds. What it costs: every step each member sends its fp32
// gradients to every other member of its cluster (cheap on a LAN, not on a
// slow one), and the members' round messages to their leader carry equal
// values. A cluster of one member is a worker of the local mode.
//
// Note [Elastic site replicas]
// A cluster's members must hold the same parameters and inner state, so a
// membership change may not leave a survivor with its inner progress next
// to a joiner at the anchor. In an elastic run every rank of the new
// generation therefore restores the shared part only: it starts the round
// at the anchor with fresh inner state (OwnPart::kDrop), survivors and
// joiners alike, in every cluster. A change costs the inner steps since
// the last round (at most local_steps) and the inner optimizer's moments;
// the anchor, the outer momentum and the round counters carry on. A
// worker that joins or leaves a cluster changes only that cluster's
// membership (ClusterAverage is rebuilt on the new topology), and a
// cluster whose workers are all gone leaves the others training. A resume
// from a checkpoint keeps the own parts where every rank is in the seat it
// was saved in (OwnPart::kKeepSameSeat), bit-exact.
class SiteRounds final : public LocalRounds {
 public:
  SiteRounds(std::unique_ptr<Replica> replica, std::unique_ptr<LocalSync> local, const DistributedOptions& dist,
             OuterStep outer, std::unique_ptr<ClusterAverage> average, bool elastic)
      : LocalRounds(std::move(replica), std::move(local), dist, outer),
        average_(std::move(average)),
        elastic_(elastic) {}

  Status EndBackward(int64_t t) override {
    FRUGAL_RETURN_IF_ERROR(average_->Average(t));
    return LocalRounds::EndBackward(t);
  }
  // In another world a cluster may hold members with and without a saved
  // part: all of them start the round at the anchor, so they stay equal
  // (Note [Elastic site replicas]).
  OwnPart OwnPartOnRestore() const override { return elastic_ ? OwnPart::kDrop : OwnPart::kKeepSameSeat; }
  std::string Describe() const override {
    return "site replicas: " + std::to_string(average_->members()) +
           " worker(s) in this cluster average gradients every step; " + LocalRounds::Describe();
  }

 private:
  std::unique_ptr<ClusterAverage> average_;
  const bool elastic_;
};

}  // namespace

// Rank 0's file holds the whole pipeline state; another rank's only its
// own part; a snapshot both apart (Note [Checkpoints] in worker_state.cc).
Status SaveStepState(Replica& replica, StateScope scope, CheckpointSections* sections) {
  using Parts = GradientPipeline::StateParts;
  if (scope == StateScope::kSnapshot) {
    FRUGAL_ASSIGN_OR_RETURN((*sections)["pipeline"], replica.SavePipelineState(Parts::kShared));
    FRUGAL_ASSIGN_OR_RETURN((*sections)["local"], replica.SavePipelineState(Parts::kLocal));
  } else {
    const bool shared = scope == StateScope::kRank0File;
    FRUGAL_ASSIGN_OR_RETURN((*sections)[shared ? "pipeline" : "local"],
                            replica.SavePipelineState(shared ? Parts::kAll : Parts::kLocal));
  }
  if (scope != StateScope::kOwnFile) (*sections)["parameters"] = replica.SaveParameters();
  return Status::Ok();
}

Status RestoreStepState(Replica& replica, const CheckpointSections& s, const CheckpointSections* mine, bool residuals,
                        const std::string& what) {
  // A joiner's state may carry the masters only (Note [Parameters from masters]).
  const bool masters_as_parameters = !s.count("parameters") && s.count(kMastersAsParameters);
  if (!masters_as_parameters) FRUGAL_RETURN_IF_ERROR(RequireSection(s, "parameters", what));
  FRUGAL_RETURN_IF_ERROR(RequireSection(s, "pipeline", what, " (a --sync local checkpoint?)"));
  const std::vector<uint8_t>& pipeline_state = s.at("pipeline");
  if (masters_as_parameters) {
    FRUGAL_RETURN_IF_ERROR(replica.LoadStateWithMastersAsParameters(pipeline_state, residuals));
  } else {
    FRUGAL_RETURN_IF_ERROR(replica.LoadState(pipeline_state, s.at("parameters"), residuals));
  }
  if (mine == nullptr) return Status::Ok();
  auto it = mine->find("local");
  if (it == mine->end()) return Status::Corruption(what + ": this rank's part has no 'local' section");
  return replica.LoadLocalState(it->second).WithContext(what);
}

Status SaveLocalState(LocalSync& local, Replica& replica, OuterStep outer, StateScope scope,
                      CheckpointSections* sections) {
  const bool shared = scope != StateScope::kOwnFile;
  FRUGAL_RETURN_IF_ERROR(local.SaveSections(shared, sections));
  if (!shared) return Status::Ok();
  (*sections)["parameters"] = replica.SaveParameters();
  ByteWriter w;  // Note [Outer step on resume] in worker_state.cc
  w.F64(outer.lr);
  w.F64(outer.momentum);
  (*sections)["outer_step"] = w.Take();
  return Status::Ok();
}

// The shared section from rank 0's file, this rank's own part from its
// file (or rank 0's, for rank 0), or, in an elastic run, from this worker's
// snapshot (Note [Local mode across worlds]).
Status RestoreLocalState(LocalSync& local, const comm::Transport& transport, const CheckpointSections& s,
                         const CheckpointSections* mine, bool residuals, OwnPart own_part,
                         const std::string& what) {
  const CheckpointSections* from = mine != nullptr ? mine : (residuals ? &s : nullptr);
  const std::vector<uint8_t>* own = nullptr;
  bool same_seat = false;
  if (from != nullptr) {
    auto it = from->find("local_sync_own");
    if (it == from->end()) return Status::Corruption(what + " has no 'local_sync_own' section");
    own = &it->second;
    FRUGAL_ASSIGN_OR_RETURN(const CheckpointMeta saved, ParseCheckpointMeta(*from, what));
    same_seat = saved.world == transport.world_size() && saved.rank == transport.rank();
  }
  if (own_part == OwnPart::kDrop || (own_part == OwnPart::kKeepSameSeat && !same_seat)) own = nullptr;
  return local.RestoreSections(s, own, what, same_seat);
}

void PrepareStepStateForJoiners(Replica& replica, CheckpointSections* snapshot, std::set<std::string>* skip) {
  skip->insert("local");
  if (replica.ParametersAreMasters()) {
    (*snapshot)[kMastersAsParameters] = {};
    skip->insert("parameters");
  }
}

void SkipLocalStateForJoiners(std::set<std::string>* skip) {
  skip->insert("local_sync_own");
  skip->insert("parameters");
}

Result<std::unique_ptr<SyncStrategy>> CreateSyncStrategy(SyncInputs in) {
  const DistributedOptions& dist = in.config.distributed;
  if (dist.sync == SyncMode::kAuto) {
    return Status::InvalidArgument("CreateSyncStrategy needs a resolved --sync (SyncOf), got auto");
  }
  ReplicaOptions ro = MakeReplicaOptions(in.config, in.lr_at);
  ro.broadcast_initial = in.broadcast_initial;
  std::vector<torch::Tensor> tensors;
  for (const auto& [name, tensor] : in.params) tensors.push_back(tensor);
  std::vector<torch::Tensor> model_order = tensors;
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<Replica> replica, Replica::Create(ro, std::move(in.params), in.transport));
  if (dist.sync == SyncMode::kStep) {
    return std::unique_ptr<SyncStrategy>(new StepSync(std::move(replica), dist.exchange));
  }
  RunConfig resolved = in.config;  // the outer step chosen for this run
  resolved.distributed.outer_lr = in.outer.lr;
  resolved.distributed.outer_momentum = in.outer.momentum;
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<LocalSync> local,
                          LocalSync::Create(resolved, in.lr_at, replica->layout(), std::move(tensors), in.transport,
                                            in.broadcast_initial));
  if (dist.sync == SyncMode::kLocal) {
    return std::unique_ptr<SyncStrategy>(new LocalRounds(std::move(replica), std::move(local), dist, in.outer));
  }
  auto average =
      std::make_unique<ClusterAverage>(in.transport, std::move(model_order), TimeoutOf(dist), dist.site_values);
  return std::unique_ptr<SyncStrategy>(
      new SiteRounds(std::move(replica), std::move(local), dist, in.outer, std::move(average), in.config.elastic.elastic));
}

}  // namespace frugal::engine
