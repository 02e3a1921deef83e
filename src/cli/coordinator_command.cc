// `frugal coordinator`: the rendezvous point of a multi-host run.
#include "commands.h"
#include "frugal/engine/launcher.h"

namespace frugal::cli {

void AddCoordinatorCommand(CLI::App& app) {
  auto opts = std::make_shared<engine::CoordinatorOptions>();
  auto timeout_s = std::make_shared<double>(600.0);
  CLI::App* cmd = app.add_subcommand("coordinator", "Rendezvous point of a multi-host run (frugal worker --coordinator)");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--listen", opts->listen, "Address to bind, e.g. tcp://10.0.0.1:29500")->required();
  cmd->add_option("--world", opts->world_size, "Number of workers")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--timeout-s", *timeout_s, "How long to wait for all workers")->check(CLI::PositiveNumber);
  cmd->callback([opts, timeout_s] {
    opts->timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000));
    Status s = engine::RunCoordinator(
        *opts, [](const std::string& ep) { std::printf("coordinator listening on %s\n", ep.c_str()); }, true);
    if (s.code() == Status::Code::kIOError) throw UsageError(s.message());
    ThrowIfError(s);
  });
}

}  // namespace frugal::cli
