#include "frugal/sim/hardware.h"

#include <gtest/gtest.h>

namespace frugal::sim {
namespace {

TEST(HardwareTest, BuiltinsCarryDatasheetFigures) {
  for (const char* name : {"a100-40g", "a100-80g", "h100", "v100", "rtx3090", "rtx4090", "cpu-local"}) {
    Result<HardwareSpec> hw = BuiltinHardware(name);
    ASSERT_TRUE(hw.ok()) << name;
    EXPECT_GT(hw->device.peak_tflops_fp16, 0) << name;
  }
  EXPECT_DOUBLE_EQ(BuiltinHardware("h100")->device.peak_tflops_fp16, 989);
  EXPECT_DOUBLE_EQ(BuiltinHardware("a100-80g")->device.memory_bandwidth_gbs, 2039);
  EXPECT_TRUE(BuiltinHardware("cpu-local")->is_cpu);
  EXPECT_EQ(BuiltinHardware("tpu").status().code(), Status::Code::kNotFound);
}

TEST(HardwareTest, TomlRoundTrip) {
  HardwareSpec hw = *BuiltinHardware("rtx4090");
  hw.efficiency.matmul_max = 0.61;
  hw.gpus_per_node = 2;
  hw.price_per_gpu_hour = 0.35;
  Result<HardwareSpec> back = ParseHardwareToml(HardwareToToml(hw), "x.toml");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "rtx4090");
  EXPECT_DOUBLE_EQ(back->efficiency.matmul_max, 0.61);
  EXPECT_EQ(back->gpus_per_node, 2);
  EXPECT_DOUBLE_EQ(back->price_per_gpu_hour, 0.35);
  EXPECT_DOUBLE_EQ(back->device.peak_tflops_fp16, 165);
}

TEST(HardwareTest, BaseAndOverrides) {
  Result<HardwareSpec> hw = ParseHardwareToml(
      "base = \"a100-80g\"\nname = \"slow-ib\"\n[network]\ninter_node_gbps = 200\n[node]\ngpus_per_node = 4\n", "s.toml");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->name, "slow-ib");
  EXPECT_DOUBLE_EQ(hw->inter_node_gbps, 200);
  EXPECT_EQ(hw->gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(hw->device.memory_gb, 80);
}

// Found by fuzz/run_config_fuzz.cc: toml11 3.7 read out of bounds (ASan:
// heap-buffer-overflow) reporting a malformed UTF-8 sequence inside a
// 'literal string'. Such text is refused before toml11 sees it.
TEST(HardwareTest, TextThatIsNotUtf8IsAnError) {
  Result<HardwareSpec> hw = ParseHardwareToml("base = \"v100\"\nname = 'c\x8d utert'\n", "u.toml");
  ASSERT_FALSE(hw.ok());
  EXPECT_EQ(hw.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(hw.status().message(), "u.toml:2: not UTF-8 text (byte 23)");
}

TEST(HardwareTest, ErrorsNameTheKey) {
  Result<HardwareSpec> unknown = ParseHardwareToml("base = \"v100\"\n[device]\nflops = 3\n", "u.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("device.flops"), std::string::npos);
  Result<HardwareSpec> type = ParseHardwareToml("base = \"v100\"\n[device]\nmemory_gb = \"lots\"\n", "t.toml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("device.memory_gb"), std::string::npos);
  Result<HardwareSpec> syntax = ParseHardwareToml("[device\n", "bad.toml");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("bad.toml"), std::string::npos);
  EXPECT_FALSE(ParseHardwareToml("name = \"empty\"\n", "e.toml").ok());  // No device figures.
  EXPECT_EQ(LoadHardware("/nonexistent/hw.toml").status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace frugal::sim
