// `frugal job status|resize|stop`: the control surface of a running elastic
// job, requests to its coordinator (comm/membership.h).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "input_checks.h"
#include "frugal/comm/membership/membership.h"

namespace frugal::cli {

namespace {

struct JobFlags {
  std::string coordinator;
  std::string key;
  std::string authorized_keys;
  bool insecure = false;
  bool json = false;
  int workers = 0;
  double timeout_s = 10.0;
};

nlohmann::json Ask(const JobFlags& f, const nlohmann::json& request) {
  comm::ZmqOptions zmq;
  zmq.security = ResolveSecurity(f.key, f.authorized_keys, f.insecure, f.coordinator);
  auto reply = comm::MembershipRequest(f.coordinator, request.dump(),
                                       std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000)), zmq);
  if (!reply.ok()) throw RunError(reply.status().WithContext("frugal job").ToString());
  nlohmann::json rep = nlohmann::json::parse(*reply, nullptr, false);
  if (!rep.is_object()) throw RunError("frugal job: the coordinator sent a reply that is not JSON");
  if (rep.contains("error")) throw RunError("frugal job: " + rep["error"].dump());
  return rep;
}

void PrintStatus(const nlohmann::json& s) {
  std::printf("generation %lld%s, %zu member(s), min workers %lld\n", s.value("generation", 0LL),
              s.value("pending", 0LL) > 0 ? " (a change is pending)" : "", s["members"].size(),
              s.value("min_workers", 0LL));
  std::printf("%-5s %-24s %-10s %-9s %10s %8s\n", "rank", "worker", "cluster", "state", "iteration", "seen");
  for (const auto& m : s["members"]) {
    std::printf("%-5lld %-24s %-10s %-9s %10lld %7.1fs\n", m.value("rank", -1LL),
                m.value("id", std::string()).c_str(), m.value("cluster", std::string()).c_str(),
                m.value("state", std::string()).c_str(), m.value("iteration", -1LL), m.value("seen_s_ago", 0.0));
  }
}

void AddConnectionOptions(CLI::App* cmd, const std::shared_ptr<JobFlags>& f) {
  cmd->add_option("--coordinator", f->coordinator, "The job's elastic coordinator, tcp://HOST:PORT")->required();
  cmd->add_option("--key", f->key, "This process's CurveZMQ key pair");
  cmd->add_option("--authorized-keys", f->authorized_keys, "Public keys of the job (holds the coordinator's)");
  cmd->add_flag("--insecure", f->insecure, "Plain TCP to a non-loopback coordinator");
  cmd->add_option("--timeout-s", f->timeout_s, "How long to wait for the coordinator")->check(Bounded(0.001, 3600));
}

}  // namespace

void AddJobCommand(CLI::App& app) {
  CLI::App* job = app.add_subcommand("job", "Control a running elastic job: status, resize, stop");
  job->require_subcommand(1);
  auto f = std::make_shared<JobFlags>();

  CLI::App* status = job->add_subcommand("status", "Members, generation and progress of the job");
  AddConnectionOptions(status, f);
  status->add_flag("--json", f->json, "Print the coordinator's JSON");
  status->callback([f] {
    nlohmann::json s = Ask(*f, {{"op", "status"}});
    if (f->json) {
      std::printf("%s\n", s.dump(2).c_str());
    } else {
      PrintStatus(s);
    }
  });

  CLI::App* resize = job->add_subcommand("resize", "Shrink the job (the highest ranks leave) or say how to grow it");
  AddConnectionOptions(resize, f);
  resize->add_option("--workers", f->workers, "The number of workers wanted")->required()->check(CLI::Range(1, 65535));
  resize->callback([f] {
    nlohmann::json r = Ask(*f, {{"op", "resize"}, {"workers", f->workers}});
    std::printf("%s\n", r.value("note", std::string("resize requested")).c_str());
  });

  CLI::App* stop = job->add_subcommand("stop", "End the job at its next check gate (the final model is evaluated)");
  AddConnectionOptions(stop, f);
  stop->callback([f] {
    Ask(*f, {{"op", "stop"}});
    std::printf("stop requested\n");
  });
}

}  // namespace frugal::cli
