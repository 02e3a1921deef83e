#include "frugal/sim/validation.h"

#include <gtest/gtest.h>

#include "frugal/build_config.h"

namespace frugal::sim {
namespace {

const char kHeader[] =
    "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
    "data parallelism,pipeline parallelism,iteration time (ms)\n";

std::string TestData(const std::string& name) { return std::string(FRUGAL_SOURCE_DIR) + "/src/sim/testdata/" + name; }

TEST(MeasurementsCsvTest, ParsesHeaderBomCommentsAndOptionalColumns) {
  const std::string text = std::string("\xEF\xBB\xBF") + "# a comment, with commas\n" +
                           "Parameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
                           "sequence length,tensor parallelism,data parallelism,pipeline parallelism,schedule,"
                           "iteration time (ms)\r\n"
                           "22,8,4,1,6144,64,48,2048,8,1,1,1f1b,1420\r\n"
                           "175,64,64,1,12288,96,96,2048,8,1,8,interleaved:3,18130\n";
  Result<std::vector<MeasuredRow>> rows = ParseMeasurementsCsv(text, "t.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].line, 3);
  EXPECT_EQ((*rows)[1].pipeline_parallel, 8);
  EXPECT_EQ((*rows)[1].schedule, PipelineSchedule::kInterleaved1F1B);
  EXPECT_EQ((*rows)[1].chunks, 3);
  EXPECT_DOUBLE_EQ((*rows)[1].iteration_ms, 18130);
  EXPECT_DOUBLE_EQ((*rows)[0].params_billion, 22);
}

void ExpectError(const std::string& text, const std::string& fragment) {
  Result<std::vector<MeasuredRow>> rows = ParseMeasurementsCsv(text, "m.csv");
  ASSERT_FALSE(rows.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(rows.status().code(), Status::Code::kCorruption);
  EXPECT_NE(rows.status().message().find(fragment), std::string::npos) << rows.status().message();
}

TEST(MeasurementsCsvTest, ErrorsNameFileAndLine) {
  ExpectError(std::string(kHeader) + "8,4,1,6144,64,48,2048,8,1,1,1420\n8,4,x,6144,64,48,2048,8,1,1,1420\n",
              "m.csv:3: 'micro batch' must be a positive number, got 'x'");
  ExpectError(std::string(kHeader) + "8,4,1,6144,64,48,2048,8,1,1\n", "m.csv:2: expected 11 fields, found 10");
  ExpectError(std::string(kHeader) + "16,4,1,6144,64,48,2048,8,1,1,1420\n", "m.csv:2: # GPUs 16 != TP x DP x PP = 8");
  ExpectError(std::string(kHeader) + "8,4,1.5,6144,64,48,2048,8,1,1,1420\n", "m.csv:2: 'micro batch' must be an integer");
  ExpectError(std::string(kHeader) + "8,4,1,6144,64,48,2048,8,1,1,-3\n", "m.csv:2: 'iteration time (ms)'");
  ExpectError("# GPUs,global batch\n", "m.csv:1: missing column 'micro batch'");
  ExpectError("# GPUs,global batch,colour\n", "m.csv:1: unknown column 'colour'");
  ExpectError("hello\n", "m.csv:1: expected the header line");
  ExpectError(kHeader, "no measurement rows");
}

TEST(ValidationTest, LoadMissingFileIsNotFound) {
  EXPECT_EQ(LoadMeasurementsCsv("/nonexistent/x.csv").status().code(), Status::Code::kNotFound);
}

// The accuracy goal (10% MAPE), with the built-in a100-80g description only.
TEST(ValidationTest, PublishedMegatronTablesWithinTenPercent) {
  Result<HardwareSpec> hw = BuiltinHardware("a100-80g");
  ASSERT_TRUE(hw.ok());
  struct Case {
    const char* file;
    Recompute recompute;
    bool sequence_parallel;
    bool any_batch_softmax;  // Megatron-LM 2021 (Note [Unfused softmax]).
  };
  for (const Case& c : {Case{"narayanan2021_table1.csv", Recompute::kFull, false, true},
                        Case{"korthikanti2022_table5_full.csv", Recompute::kFull, false, false},
                        Case{"korthikanti2022_table5_selective.csv", Recompute::kSelective, true, false}}) {
    Result<std::vector<MeasuredRow>> rows = LoadMeasurementsCsv(TestData(c.file));
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ValidationOptions opt;
    opt.recompute = c.recompute;
    opt.sequence_parallel = c.sequence_parallel;
    opt.fused_softmax_any_batch = c.any_batch_softmax;
    Result<ValidationReport> report = Validate(*rows, *hw, opt);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_LE(report->mape_pct, 10.0) << c.file;
    for (const RowResult& r : report->rows) {
      EXPECT_FALSE(r.oom) << c.file << " line " << r.row.line;
      EXPECT_LT(std::abs(r.error_pct), 20.0) << c.file << " line " << r.row.line;
    }
  }
}

TEST(ValidationTest, CalibrationRecoversFromBadParameters) {
  Result<std::vector<MeasuredRow>> rows = LoadMeasurementsCsv(TestData("korthikanti2022_table5_full.csv"));
  ASSERT_TRUE(rows.ok());
  rows->resize(2);  // 22B and 175B: enough to pin two parameters, and fast.
  Result<HardwareSpec> hw = BuiltinHardware("a100-80g");
  hw->efficiency.matmul_max = 0.4;  // Far too pessimistic.
  CalibrationOptions copt;
  copt.parameters = {"matmul_max", "intra_link"};
  copt.max_evaluations = 40;
  Result<CalibrationResult> r = Calibrate(*rows, *hw, ValidationOptions{}, copt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->mape_before_pct, 30.0);
  EXPECT_LT(r->mape_after_pct, 10.0);
  EXPECT_GT(r->hardware.efficiency.matmul_max, 0.6);
  EXPECT_LE(r->evaluations, 40 + 3);
  CalibrationOptions bad;
  bad.parameters = {"colour"};
  EXPECT_EQ(Calibrate(*rows, *hw, ValidationOptions{}, bad).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace frugal::sim
