// libFuzzer target: the cluster API's request decoding, everything the
// server reads from a client's body before the manager sees it (ParseJson,
// then SubmissionFromJson for POST /api/jobs, selector 0, or ReportFromJson
// for POST /api/agent/heartbeat, selector 1), and the agents' side of the
// exchange (ReplyFromJson, selector 2). Input: a selector byte, then the
// body. A rejected body has a one-line reason (the API sends it as
// {"error": ...}); an accepted one survives ToJson and decoding again
// unchanged.
#include "fuzz_input.h"
#include "json_codec.h"

namespace {

using frugal::Result;
using frugal::Status;
using nlohmann::json;

bool OneLine(const Status& st) { return !st.message().empty() && st.message().find('\n') == std::string::npos; }

// Decodes, and for an accepted value checks the round trip through ToJson.
template <typename T>
void Decode(const json& body, Result<T> (*decode)(const json&)) {
  Result<T> value = decode(body);
  if (!value.ok()) {
    FRUGAL_FUZZ_CHECK(OneLine(value.status()));
    return;
  }
  const json encoded = frugal::cluster::ToJson(*value);
  Result<T> again = decode(encoded);
  FRUGAL_FUZZ_CHECK(again.ok());
  FRUGAL_FUZZ_CHECK(frugal::cluster::ToJson(*again) == encoded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const uint8_t which = in.Byte();
  Result<json> body = frugal::cluster::ParseJson(in.RestAsString());
  if (!body.ok()) {
    FRUGAL_FUZZ_CHECK(OneLine(body.status()));
    return 0;
  }
  switch (which % 3) {
    case 0: {
      Decode(*body, &frugal::cluster::SubmissionFromJson);
      Result<frugal::cluster::JobSubmission> s = frugal::cluster::SubmissionFromJson(*body);
      if (s.ok()) FRUGAL_FUZZ_CHECK(s->profile.size() <= 256);
      break;
    }
    case 1: Decode(*body, &frugal::cluster::ReportFromJson); break;
    default: Decode(*body, &frugal::cluster::ReplyFromJson); break;
  }
  return 0;
}
