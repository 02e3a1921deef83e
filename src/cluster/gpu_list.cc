// `frugal cluster agent --gpus`: the GPU ids an agent hands its tasks
// (Note [Device slots] in agent.cc).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "frugal/cluster/agent.h"

namespace frugal::cluster {

Result<std::vector<std::string>> ParseGpus(const std::string& text, const std::string& dev_dir) {
  std::string list = text;
  if (text == "auto") {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    list = visible != nullptr ? visible : "";
    if (list.empty()) {
      std::set<int> found;
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
        const std::string name = entry.path().filename().string();
        int n = -1;
        char rest = 0;
        if (std::sscanf(name.c_str(), "nvidia%d%c", &n, &rest) == 1 && n >= 0) found.insert(n);
      }
      for (int n : found) list += (list.empty() ? "" : ",") + std::to_string(n);
    }
    if (list.empty()) {
      return Status::InvalidArgument("--gpus auto found no GPU (no CUDA_VISIBLE_DEVICES, no " + dev_dir +
                                     "/nvidia<N>); list them (--gpus 0,1) or give --slots for CPU slots");
    }
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  size_t from = 0;
  while (true) {
    const size_t comma = list.find(',', from);
    const std::string id = list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    const bool valid = !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':';
    });
    if (!valid) {
      return Status::InvalidArgument("--gpus: '" + id + "' is not a GPU id; give ids as CUDA_VISIBLE_DEVICES "
                                     "takes them, separated by commas (0,1,2,3), or auto");
    }
    if (!seen.insert(id).second) return Status::InvalidArgument("--gpus: GPU " + id + " is listed twice");
    out.push_back(id);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (out.size() > 1024) return Status::InvalidArgument("--gpus: at most 1024 GPUs");
  return out;
}

}  // namespace frugal::cluster
