#include "commands.h"

#include <cstdio>

#include <cstdlib>
#include <exception>

#include <sstream>

#include <toml.hpp>

#include "frugal/build_config.h"
#include "frugal/common/file.h"
#include "frugal/common/toml_text.h"

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

namespace {

std::string SnakeToKebab(std::string s) {
  for (char& c : s) c = c == '_' ? '-' : c;
  return s;
}

std::string KebabToSnake(std::string s) {
  for (char& c : s) c = c == '-' ? '_' : c;
  return s;
}

bool LooksLikeTomlScalar(const std::string& v) {
  if (v == "true" || v == "false") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end != nullptr && *end == '\0';
}

// Options that are not run settings and are never read from or written to a config.
bool IsMetaOption(const CLI::Option* opt) {
  const std::string& name = opt->get_single_name();
  return name == "help" || name == "config" || name == "print-config" || name == "local-clusters" || name == "local-slowdowns" || name == "resume" ||
         opt->get_lnames().empty();
}

// Reads the TOML file and gives every option not set on the command line the
// file's value. Keys may be snake_case or kebab-case; unknown keys are errors.
void ApplyConfigFile(CLI::App* cmd, const std::string& path) {
  toml::value root;
  // toml11 3.7 misbehaves on some malformed input (TomlTextProblem): check first.
  Result<std::string> text = ReadTextFile(path, "config");
  ThrowIfError(text.status());
  const std::string problem = TomlTextProblem(*text);
  if (!problem.empty()) throw UsageError("config " + path + ":" + problem);
  try {
    std::istringstream in(*text);
    root = toml::parse(in, path);
  } catch (const std::exception& e) {
    // toml11 messages span several lines; keep the first, which names the problem and file.
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    throw UsageError("config " + path + ": " + msg);
  }
  if (!root.is_table()) throw UsageError("config " + path + ": not a TOML table");
  for (const auto& [key, value] : root.as_table()) {
    CLI::Option* opt = nullptr;
    try {
      opt = cmd->get_option("--" + SnakeToKebab(key));
    } catch (const CLI::OptionNotFound&) {
    }
    if (opt == nullptr || IsMetaOption(opt)) {
      throw UsageError("config " + path + ": unknown option '" + key + "' for 'frugal " + cmd->get_name() + "'");
    }
    if (opt->count() > 0) continue;  // the command line wins
    std::string text;
    if (value.is_string()) {
      text = value.as_string().str;
    } else if (value.is_boolean()) {
      text = value.as_boolean() ? "true" : "false";
    } else if (value.is_integer()) {
      text = std::to_string(value.as_integer());
    } else if (value.is_floating()) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", value.as_floating());
      text = buf;
    } else {
      throw UsageError("config " + path + ": option '" + key + "' must be a string, number or boolean");
    }
    try {
      opt->add_result(text);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw UsageError("config " + path + ": option '" + key + "': " + e.what());
    }
  }
}

}  // namespace

void AddConfigOption(CLI::App* cmd) {
  cmd->add_option("--config", "TOML file of options (keys = long option names); flags override it")
      ->check(CLI::ExistingFile)
      ->group("Config");
  cmd->add_flag("--print-config", "Print the resolved options as TOML and exit")->group("Config");
}

std::string ResolvedConfig(const CLI::App* cmd) {
  std::string out;
  for (const CLI::Option* opt : cmd->get_options()) {
    if (IsMetaOption(opt)) continue;
    std::string value = opt->count() > 0 ? opt->results().back() : opt->get_default_str();
    if (opt->get_expected_max() == 0 && value.empty()) value = "false";  // flag not given
    if (!LooksLikeTomlScalar(value)) value = "\"" + value + "\"";
    out += KebabToSnake(opt->get_single_name()) + " = " + value + "\n";
  }
  return out;
}

bool ApplyConfigAndMaybePrint(CLI::App* cmd, const std::function<std::string()>& resolved) {
  CLI::Option* config = cmd->get_option("--config");
  if (config->count() > 0) ApplyConfigFile(cmd, config->as<std::string>());
  if (cmd->get_option("--print-config")->count() == 0) return false;
  std::printf("%s", (resolved ? resolved() : ResolvedConfig(cmd)).c_str());
  return true;
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
