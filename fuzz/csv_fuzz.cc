// libFuzzer target: CsvTable, the one CSV reader under every sim and sched
// loader. Input: an options byte, then the text. Every field of an accepted
// table is read as a number and an integer, and its column bound by name.
#include <cmath>

#include "frugal/common/csv.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const uint8_t opts = in.Byte();
  frugal::CsvOptions options;
  options.hash_comments = (opts & 1) != 0;
  if ((opts & 2) != 0) options.header_field = "gpus";
  auto table = frugal::CsvTable::Parse(in.RestAsString(), "fuzz.csv", options);
  if (!table.ok()) {
    FRUGAL_FUZZ_CHECK(table.status().message().rfind("fuzz.csv", 0) == 0);
    return 0;
  }
  const int cols = static_cast<int>(table->header().size());
  for (size_t r = 0; r < table->NumRows(); ++r) {
    for (int c = 0; c < cols; ++c) {
      auto number = table->Number(r, c);
      if (number.ok()) FRUGAL_FUZZ_CHECK(std::isfinite(*number));
      (void)table->Integer(r, c);
    }
    FRUGAL_FUZZ_CHECK(table->Line(r) > table->header_line());
  }
  std::vector<frugal::CsvColumn> known;
  for (const std::string& name : table->header()) known.push_back({name, (opts & 4) != 0});
  known.push_back({"optional-extra", true});
  (void)table->BindColumns(known);
  for (const std::string& name : table->header()) FRUGAL_FUZZ_CHECK(table->FindColumn(name) >= 0);
  return 0;
}
