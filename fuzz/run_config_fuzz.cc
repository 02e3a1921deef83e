// libFuzzer target: a run's TOML configuration (frugal train/worker --config,
// runs/<run>/config.toml). Input: the TOML text. It goes through toml11 and,
// key by key, through the same steps as the CLI's ApplyConfigFile
// (src/cli/common_options.cc: UTF-8 check, a scalar's text, then the field's parser
// FieldFromText) into an engine::RunConfig, whose fields are then range
// checked (CheckField). Every field that passes must print and parse back
// to the same value (its digest text), or two workers could disagree.
#include <sstream>
#include <toml.hpp>

#include "frugal/common/toml_text.h"
#include "frugal/engine/run_config.h"
#include "fuzz_input.h"

namespace {

using frugal::Field;
using frugal::engine::RunConfig;

// The text the CLI gives a TOML scalar; false for tables and arrays.
bool ScalarText(const toml::value& value, std::string* text) {
  if (value.is_string()) {
    *text = value.as_string().str;
  } else if (value.is_boolean()) {
    *text = value.as_boolean() ? "true" : "false";
  } else if (value.is_integer()) {
    *text = std::to_string(value.as_integer());
  } else if (value.is_floating()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", value.as_floating());
    *text = buf;
  } else {
    return false;
  }
  return true;
}

void Apply(RunConfig* config, const std::string& key, const std::string& text) {
  frugal::engine::VisitFields(*config, [&](const Field& f, auto& value) {
    if (key != f.key) return;
    auto before = value;
    if (!frugal::FieldFromText(f, text, &value).ok()) {
      FRUGAL_FUZZ_CHECK(frugal::FieldDigestText(value) == frugal::FieldDigestText(before));
    }
  });
}

void CheckRoundTrip(RunConfig* config) {
  frugal::engine::VisitFields(*config, [&](const Field& f, auto& value) {
    if (!frugal::CheckField(f, value).ok()) return;
    auto again = value;
    FRUGAL_FUZZ_CHECK(frugal::FieldFromText(f, frugal::FieldToText(value), &again).ok());
    FRUGAL_FUZZ_CHECK(frugal::FieldDigestText(again) == frugal::FieldDigestText(value));
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const std::string text = in.RestAsString();
  // As ApplyConfigFile: text TomlTextProblem refuses never reaches toml11
  // (not UTF-8: toml11 reads out of bounds, a finding of this target; nesting
  // deeper than 64: toml11's recursion overflows the stack, found here and
  // by sim_fuzz).
  if (!frugal::TomlTextProblem(text).empty()) return 0;
  std::istringstream stream(text);
  toml::value root;
  try {
    root = toml::parse(stream, "fuzz.toml");
  } catch (const std::exception&) {
    return 0;  // toml11 reports syntax errors by exception; the CLI turns them into usage errors.
  }
  if (!root.is_table()) return 0;
  RunConfig config;
  for (const auto& [key, value] : root.as_table()) {
    std::string text;
    if (ScalarText(value, &text)) Apply(&config, key, text);
  }
  CheckRoundTrip(&config);
  return 0;
}
