#include "commands.h"

#include <cstdio>

#include "frugal/build_config.h"

namespace frugal::cli {

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kCorruption:
      throw UsageError(status.message());
    default:
      throw RunError(status.ToString());
  }
}

void AddConfigOption(CLI::App* cmd) {
  cmd->set_config("--config", "", "TOML file of options (keys = long option names); flags override it")
      ->check(CLI::ExistingFile);
  cmd->allow_config_extras(CLI::config_extras_mode::error);
}

void AddVersionCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the version and build configuration");
  cmd->callback([] {
    std::printf("frugal %s\n", FRUGAL_VERSION);
#ifdef FRUGAL_WITH_TORCH
    std::printf("libtorch: yes\n");
#else
    std::printf("libtorch: no (built with FRUGAL_WITH_TORCH=OFF)\n");
#endif
  });
}

}  // namespace frugal::cli
