#include "frugal/sim/hardware.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <toml.hpp>

#include "frugal/common/file.h"

namespace frugal::sim {
namespace {

HardwareSpec Gpu(const std::string& name, double fp16, double fp32, double mem_gb, double mem_bw,
                 int gpus_per_node, double intra_gbs, double inter_gbps, double price) {
  HardwareSpec hw;
  hw.name = name;
  hw.device.name = name;
  hw.device.peak_tflops_fp16 = fp16;
  hw.device.peak_tflops_fp32 = fp32;
  hw.device.memory_gb = mem_gb;
  hw.device.memory_bandwidth_gbs = mem_bw;
  hw.gpus_per_node = gpus_per_node;
  hw.intra_link_gbs = intra_gbs;
  hw.inter_node_gbps = inter_gbps;
  hw.price_per_gpu_hour = price;
  return hw;
}

// Note [Built-in efficiency parameters]
// The data-centre efficiency parameters were set a priori, before any
// validation run, from commonly reported figures: large fp16 GEMMs reach
// ~80% of A100 tensor-core peak, NCCL all-reduce reaches ~75% of NVLink and
// ~80% of InfiniBand line rate, bandwidth-bound kernels ~70% of HBM peak.
// They are NOT fitted to the Megatron-LM tables in src/sim/testdata, so the
// MAPE reported in docs/planner.md is out of sample; `frugal plan calibrate`
// fits them when measurements exist. Consumer GPUs get lower link
// efficiencies (PCIe, no NVSwitch).
EfficiencyParams DatacenterEfficiency() {
  EfficiencyParams e;
  e.matmul_max = 0.8;
  e.matmul_half_dim = 64;
  e.memory = 0.7;
  e.intra_link = 0.75;
  e.inter_link = 0.8;
  e.kernel_overhead_us = 4;
  e.reserved_memory_gb = 2;
  return e;
}

std::vector<HardwareSpec> Builtins() {
  std::vector<HardwareSpec> all;
  // Datasheet figures: ../shared/reference/published-figures.md. Inter-node:
  // DGX-style 8 x 200 Gbit/s InfiniBand (A100/H100: 8 x 400 for H100);
  // consumer boxes: 10 Gbit/s Ethernet. Prices: typical on-demand cloud rates.
  all.push_back(Gpu("a100-40g", 312, 19.5, 40, 1555, 8, 300, 1600, 3.0));
  all.push_back(Gpu("a100-80g", 312, 19.5, 80, 2039, 8, 300, 1600, 4.0));
  all.push_back(Gpu("h100", 989, 67, 80, 3350, 8, 450, 3200, 8.0));
  all.push_back(Gpu("v100", 125, 15.7, 32, 900, 8, 150, 800, 2.5));
  all.push_back(Gpu("rtx3090", 71, 35.6, 24, 936, 4, 25, 10, 0.4));
  all.push_back(Gpu("rtx4090", 165, 82.6, 24, 1008, 4, 25, 10, 0.7));
  for (HardwareSpec& hw : all) {
    hw.efficiency = DatacenterEfficiency();
    if (hw.gpus_per_node == 4) {
      hw.efficiency.intra_link = 0.6;
      hw.efficiency.inter_link = 0.7;
      hw.intra_latency_us = 10;
      hw.inter_latency_us = 50;
    }
  }
  // This machine class: a small x86 host without GPU; the "device" is the CPU
  // itself (fp32 only). `frugal profile` is meant to replace these numbers.
  HardwareSpec cpu = Gpu("cpu-local", 0.1, 0.1, 24, 20, 1, 10, 1, 0.05);
  cpu.is_cpu = true;
  cpu.efficiency.matmul_max = 0.5;
  cpu.efficiency.matmul_half_dim = 32;
  cpu.efficiency.memory = 0.6;
  cpu.efficiency.intra_link = 0.5;
  cpu.efficiency.inter_link = 0.9;
  cpu.efficiency.kernel_overhead_us = 20;
  cpu.efficiency.reserved_memory_gb = 1;
  cpu.intra_latency_us = 20;
  cpu.inter_latency_us = 100;
  cpu.host.cpu_sparsify_gbs = 2.0;
  cpu.host.cpu_optimizer_gbs = 1.0;
  cpu.host.pcie_gbs = 10.0;  // A memcpy: the device is the host.
  all.push_back(cpu);
  return all;
}

// The TOML schema: (table, key) -> field. One place, so parse and write agree.
struct Field {
  const char* table;
  const char* key;
  std::function<double&(HardwareSpec&)> ref;
};

std::vector<Field> Schema() {
  return {
      {"device", "peak_tflops_fp16", [](HardwareSpec& h) -> double& { return h.device.peak_tflops_fp16; }},
      {"device", "peak_tflops_fp32", [](HardwareSpec& h) -> double& { return h.device.peak_tflops_fp32; }},
      {"device", "memory_gb", [](HardwareSpec& h) -> double& { return h.device.memory_gb; }},
      {"device", "memory_bandwidth_gbs", [](HardwareSpec& h) -> double& { return h.device.memory_bandwidth_gbs; }},
      {"efficiency", "matmul_max", [](HardwareSpec& h) -> double& { return h.efficiency.matmul_max; }},
      {"efficiency", "matmul_half_dim", [](HardwareSpec& h) -> double& { return h.efficiency.matmul_half_dim; }},
      {"efficiency", "memory", [](HardwareSpec& h) -> double& { return h.efficiency.memory; }},
      {"efficiency", "intra_link", [](HardwareSpec& h) -> double& { return h.efficiency.intra_link; }},
      {"efficiency", "inter_link", [](HardwareSpec& h) -> double& { return h.efficiency.inter_link; }},
      {"efficiency", "kernel_overhead_us", [](HardwareSpec& h) -> double& { return h.efficiency.kernel_overhead_us; }},
      {"efficiency", "reserved_memory_gb", [](HardwareSpec& h) -> double& { return h.efficiency.reserved_memory_gb; }},
      {"node", "intra_link_gbs", [](HardwareSpec& h) -> double& { return h.intra_link_gbs; }},
      {"node", "intra_latency_us", [](HardwareSpec& h) -> double& { return h.intra_latency_us; }},
      {"network", "inter_node_gbps", [](HardwareSpec& h) -> double& { return h.inter_node_gbps; }},
      {"network", "inter_latency_us", [](HardwareSpec& h) -> double& { return h.inter_latency_us; }},
      {"host", "cpu_sparsify_gbs", [](HardwareSpec& h) -> double& { return h.host.cpu_sparsify_gbs; }},
      {"host", "cpu_optimizer_gbs", [](HardwareSpec& h) -> double& { return h.host.cpu_optimizer_gbs; }},
      {"host", "pcie_gbs", [](HardwareSpec& h) -> double& { return h.host.pcie_gbs; }},
      {"cost", "price_per_gpu_hour", [](HardwareSpec& h) -> double& { return h.price_per_gpu_hour; }},
  };
}

std::string FormatNumber(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // Keep TOML floats floats.
  return s;
}

}  // namespace

Result<HardwareSpec> BuiltinHardware(const std::string& name) {
  for (const HardwareSpec& hw : Builtins()) {
    if (hw.name == name) return hw;
  }
  std::string known;
  for (const std::string& n : BuiltinHardwareNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound("unknown hardware '" + name + "'; built-in: " + known + " (or give a .toml file)");
}

std::vector<std::string> BuiltinHardwareNames() {
  std::vector<std::string> names;
  for (const HardwareSpec& hw : Builtins()) names.push_back(hw.name);
  return names;
}

Result<HardwareSpec> ParseHardwareToml(const std::string& text, const std::string& source_name) {
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, source_name);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("hardware description: ") + e.what());
  }
  if (!root.is_table()) return Status::InvalidArgument(source_name + ": not a TOML table");
  HardwareSpec hw;
  const toml::table& top = root.as_table();
  auto it = top.find("base");
  if (it != top.end()) {
    if (!it->second.is_string()) return Status::InvalidArgument(source_name + ": 'base' must be a string");
    FRUGAL_ASSIGN_OR_RETURN(hw, BuiltinHardware(it->second.as_string().str));
  }
  hw.name = source_name;
  const std::vector<Field> schema = Schema();
  for (const auto& [key, value] : top) {
    if (key == "base") continue;
    if (key == "name") {
      if (!value.is_string()) return Status::InvalidArgument(source_name + ": 'name' must be a string");
      hw.name = value.as_string().str;
      continue;
    }
    if (key == "gpus_per_node" || key == "is_cpu") {
      // Accepted at top level for convenience; see below for [node].
    } else if (!value.is_table()) {
      return Status::InvalidArgument(source_name + ": unknown key '" + key + "'");
    }
    if (key == "is_cpu") {
      if (!value.is_boolean()) return Status::InvalidArgument(source_name + ": 'is_cpu' must be true or false");
      hw.is_cpu = value.as_boolean();
      continue;
    }
    if (key == "gpus_per_node") {
      if (!value.is_integer() || value.as_integer() <= 0) {
        return Status::InvalidArgument(source_name + ": 'gpus_per_node' must be a positive integer");
      }
      hw.gpus_per_node = static_cast<int>(value.as_integer());
      continue;
    }
    for (const auto& [sub, v] : value.as_table()) {
      const std::string full = key + "." + sub;
      if (key == "node" && sub == "gpus_per_node") {
        if (!v.is_integer() || v.as_integer() <= 0) {
          return Status::InvalidArgument(source_name + ": '" + full + "' must be a positive integer");
        }
        hw.gpus_per_node = static_cast<int>(v.as_integer());
        continue;
      }
      bool found = false;
      for (const Field& f : schema) {
        if (key != f.table || sub != f.key) continue;
        found = true;
        if (v.is_floating()) {
          f.ref(hw) = v.as_floating();
        } else if (v.is_integer()) {
          f.ref(hw) = static_cast<double>(v.as_integer());
        } else {
          return Status::InvalidArgument(source_name + ": '" + full + "' must be a number");
        }
        if (f.ref(hw) < 0) return Status::InvalidArgument(source_name + ": '" + full + "' must not be negative");
      }
      if (!found) return Status::InvalidArgument(source_name + ": unknown key '" + full + "'");
    }
  }
  if (hw.device.name.empty()) hw.device.name = hw.name;
  if (hw.device.peak_tflops_fp16 <= 0 || hw.device.memory_bandwidth_gbs <= 0 || hw.device.memory_gb <= 0) {
    return Status::InvalidArgument(source_name + ": device.peak_tflops_fp16, device.memory_gb and "
                                   "device.memory_bandwidth_gbs must be positive (or set base = \"a100-80g\")");
  }
  if (hw.efficiency.matmul_max <= 0 || hw.efficiency.matmul_max > 1 || hw.efficiency.memory <= 0 ||
      hw.efficiency.memory > 1 || hw.efficiency.intra_link <= 0 || hw.efficiency.inter_link <= 0) {
    return Status::InvalidArgument(source_name + ": efficiency fractions must be in (0, 1]");
  }
  return hw;
}

Result<HardwareSpec> LoadHardware(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".toml");
  if (!is_path) return BuiltinHardware(name_or_path);
  FRUGAL_ASSIGN_OR_RETURN(std::string text, ReadTextFile(name_or_path, "hardware description"));
  return ParseHardwareToml(text, name_or_path);
}

std::string HardwareToToml(const HardwareSpec& hw) {
  std::ostringstream out;
  out << "# Frugal hardware description (frugal plan). Units in key names.\n";
  out << "name = \"" << hw.name << "\"\n";
  if (hw.is_cpu) out << "is_cpu = true\n";
  HardwareSpec copy = hw;
  std::string table;
  for (const Field& f : Schema()) {
    if (table != f.table) {
      table = f.table;
      out << "\n[" << table << "]\n";
      if (table == "node") out << "gpus_per_node = " << hw.gpus_per_node << "\n";
    }
    out << f.key << " = " << FormatNumber(f.ref(copy)) << "\n";
  }
  return out.str();
}

}  // namespace frugal::sim
