// frugal: command-line front end. See commands.h for the conventions.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "frugal/common/allocator.h"

int main(int argc, char** argv) {
  // Before anything allocates: every subcommand benefits, the training ones most.
  (void)frugal::RetainHeapBetweenSteps();
  CLI::App app{"Frugal: fast, cheap deep-learning training on slow networks and shared clusters"};
  app.require_subcommand(1);
  app.fallthrough(false);
  frugal::cli::AddVersionCommand(app);
#ifdef FRUGAL_WITH_TORCH
  frugal::cli::AddTrainCommand(app);
  frugal::cli::AddProfileCommand(app);
#endif
  frugal::cli::AddCoordinatorCommand(app);
  frugal::cli::AddJobCommand(app);
  frugal::cli::AddKeysCommand(app);
  frugal::cli::AddRunCommand(app);
#ifdef FRUGAL_HAVE_SIM
  frugal::cli::AddPlanCommand(app);
#endif
#ifdef FRUGAL_HAVE_SCHED
  frugal::cli::AddClusterCommand(app);
#endif
  // CLI11 reports an unknown first word as "a subcommand is required"; name it.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->check_name(argv[1]);
    }
    if (!known) {
      std::fprintf(stderr, "frugal: error: unknown command '%s'\nRun with --help for usage.\n", argv[1]);
      return 2;
    }
  }
  // ... and an unknown option before the command as "a subcommand is required" too.
  if (argc > 1 && argv[1][0] == '-') {
    const std::string flag = std::string(argv[1]).substr(0, std::string(argv[1]).find('='));
    if (app.get_option_no_throw(flag) == nullptr) {
      std::fprintf(stderr, "frugal: error: unknown option '%s' (options go after the command: frugal COMMAND %s)\n"
                   "Run with --help for usage.\n", flag.c_str(), flag.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Includes errors thrown while reading a --config file.
    std::fprintf(stderr, "frugal: error: %s\n", e.what());
    std::fprintf(stderr, "Run with --help for usage.\n");
    return 2;
  } catch (const frugal::cli::UsageError& e) {
    std::fprintf(stderr, "frugal: error: %s\n", e.what());
    return 2;
  } catch (const frugal::cli::RunError& e) {
    std::fprintf(stderr, "frugal: failed: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
