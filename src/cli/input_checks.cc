#include "input_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "commands.h"

namespace frugal::cli {

CLI::Validator Bounded(double lo, double hi, const std::string& why) {
  char range[96];
  std::snprintf(range, sizeof range, "[%.15g, %.15g]", lo, hi);
  const std::string bound = range;
  return CLI::Validator(
      [lo, hi, why, bound](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end != nullptr && *end == '\0';
        if (parsed && errno == 0 && std::isfinite(v) && v >= lo && v <= hi) return "";
        return "must be a finite number in " + bound + (why.empty() ? "" : " (" + why + ")") + ", got '" + text + "'";
      },
      bound);
}

void CheckWritable(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(flag + " " + path + ": is a directory, not a file");
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throw UsageError(flag + " " + path + ": folder " + parent.string() + " does not exist");
  }
}

namespace {

bool ValidPort(const std::string& port, bool listening) {
  if (listening && port == "*") return true;
  if (port.empty() || port.size() > 5) return false;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
  }
  const long v = std::strtol(port.c_str(), nullptr, 10);
  return v >= 1 && v <= 65535;
}

}  // namespace

std::string EndpointProblem(const std::string& endpoint, bool listening) {
  const std::string expected = listening ? "expected tcp://HOST:PORT or tcp://HOST:* (PORT in [1, 65535])"
                                         : "expected tcp://HOST:PORT (PORT in [1, 65535])";
  const std::string scheme = "tcp://";
  if (endpoint.compare(0, scheme.size(), scheme) != 0) return expected + ", got '" + endpoint + "'";
  const size_t colon = endpoint.rfind(':');
  const std::string host = endpoint.substr(scheme.size(), colon - scheme.size());
  const std::string port = endpoint.substr(colon + 1);
  if (colon < scheme.size() || host.empty() || (!listening && host == "*")) {
    return expected + ", got '" + endpoint + "': no host";
  }
  for (char c : host) {
    if (c == '/' || c == ' ' || c == '\t') return expected + ", got '" + endpoint + "': bad host";
  }
  if (!ValidPort(port, listening)) return expected + ", got '" + endpoint + "': bad port '" + port + "'";
  return "";
}

CLI::Validator TcpEndpoint(bool listening) {
  return CLI::Validator([listening](std::string& text) { return EndpointProblem(text, listening); },
                        listening ? "tcp://HOST:PORT|*" : "tcp://HOST:PORT");
}

void CheckWorkerFlags(const CLI::App* cmd, const std::string& coordinator, const std::string& listen, int rank,
                      int workers) {
  if (coordinator.empty()) throw UsageError("frugal worker needs --coordinator tcp://HOST:PORT");
  std::string problem = EndpointProblem(coordinator, /*listening=*/false);
  if (!problem.empty()) throw UsageError("--coordinator: " + problem);
  problem = EndpointProblem(listen, /*listening=*/true);
  if (!problem.empty()) throw UsageError("--listen: " + problem);
  const CLI::Option* given = cmd->get_option_no_throw("--workers");
  if (rank >= 0 && given != nullptr && given->count() > 0 && rank >= workers) {
    throw UsageError("--rank " + std::to_string(rank) + " is outside the world of --workers " +
                     std::to_string(workers) + " (ranks 0 to " + std::to_string(workers - 1) + ")");
  }
}

}  // namespace frugal::cli
