#include "frugal/comm/transport/inproc_transport.h"

#include <mutex>

#include "transport/mailbox.h"

namespace frugal::comm {

struct InProcHub::State {
  State(Topology t, const Clock& c) : topology(std::move(t)), clock(c) {
    for (int r = 0; r < topology.world_size(); ++r) {
      mailboxes.push_back(std::make_unique<Mailbox>(r, topology, clock));
    }
    attached.resize(topology.world_size(), false);
  }

  const Topology topology;
  const Clock& clock;
  std::vector<std::unique_ptr<Mailbox>> mailboxes;  // Fixed after construction.
  std::mutex mu;
  std::vector<bool> attached;  // GUARDED_BY(mu)
};

namespace {

class InProcTransport final : public Transport {
 public:
  InProcTransport(int rank, std::shared_ptr<InProcHub::State> state)
      : Transport(rank, state->topology, state->clock), state_(std::move(state)) {}

  ~InProcTransport() override {
    for (int r = 0; r < world_size(); ++r) {
      if (r != rank()) state_->mailboxes[r]->MarkClosed(rank(), "closed its transport");
    }
  }

  Status Send(int dst, Tag tag, SharedBytes payload) override {
    FRUGAL_RETURN_IF_ERROR(CheckPeer(dst, "Send"));
    Mailbox& box = *state_->mailboxes[dst];
    if (std::string why = state_->mailboxes[rank()]->ClosedReason(dst); dst != rank() && !why.empty()) {
      return Status::Unavailable("cannot send tag " + std::to_string(tag) + " to " +
                                 topology().DescribeRank(dst) + ": it " + why);
    }
    Bytes copy = payload ? *payload : Bytes();
    CountSent(dst, copy.size());
    box.Deliver(rank(), tag, std::move(copy));
    return Status::Ok();
  }

  Result<Message> Recv(int src, Tag tag, std::chrono::milliseconds timeout) override {
    FRUGAL_RETURN_IF_ERROR(CheckPeer(src, "Recv"));
    FRUGAL_ASSIGN_OR_RETURN(Bytes payload, state_->mailboxes[rank()]->Take(src, tag, timeout));
    CountReceived(src, payload.size());
    return Message{src, tag, std::move(payload)};
  }

  void Abort(Status why) override { state_->mailboxes[rank()]->Fail(std::move(why)); }

 private:
  std::shared_ptr<InProcHub::State> state_;
};

}  // namespace

InProcHub::InProcHub(Topology topology, const Clock& clock)
    : state_(std::make_shared<State>(std::move(topology), clock)) {}
InProcHub::~InProcHub() = default;

const Topology& InProcHub::topology() const { return state_->topology; }

Result<std::unique_ptr<Transport>> InProcHub::CreateTransport(int rank) {
  if (rank < 0 || rank >= state_->topology.world_size()) {
    return Status::InvalidArgument("InProcHub: rank " + std::to_string(rank) + " is outside the world of " +
                                   std::to_string(state_->topology.world_size()) + " ranks");
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->attached[rank]) {
    return Status::InvalidArgument("InProcHub: rank " + std::to_string(rank) + " already has a transport");
  }
  state_->attached[rank] = true;
  return std::unique_ptr<Transport>(new InProcTransport(rank, state_));
}

}  // namespace frugal::comm
