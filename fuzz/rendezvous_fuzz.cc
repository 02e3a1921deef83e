// libFuzzer target: the JSON frames of the rendezvous and of elastic
// membership (src/comm/membership/rendezvous_wire.h, membership_wire.h), which a
// coordinator reads from anyone who reaches its port and a worker reads from
// whatever answers at the coordinator's address. Input: a selector byte and
// a world-size byte, then the frame. Every accepted frame must satisfy the
// parser's contract (ranks in range, strings bounded, tables in rank order)
// and survive a round trip through the writer unchanged.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "membership/membership_wire.h"
#include "membership/rendezvous_wire.h"

namespace {

using nlohmann::json;
using namespace frugal::comm;

bool Bounded(const std::string& s) { return !s.empty() && s.size() <= 256; }

bool SamePeers(const std::vector<PeerInfo>& a, const std::vector<PeerInfo>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rank != b[i].rank || a[i].endpoint != b[i].endpoint || a[i].cluster != b[i].cluster ||
        a[i].public_key != b[i].public_key) {
      return false;
    }
  }
  return true;
}

// The rendezvous server's check, with `taken` drawn from the input.
void RendezvousRegistration(int world, uint8_t taken_bits, const std::string& body) {
  std::vector<bool> taken(world);
  for (int r = 0; r < world; ++r) taken[r] = (taken_bits >> (r % 8)) & 1;
  PeerInfo info;
  std::string why;
  if (!wire::ParseRendezvousRegistration(body, "key", taken, &info, &why)) {
    FRUGAL_FUZZ_CHECK(!why.empty());
    return;
  }
  FRUGAL_FUZZ_CHECK(info.rank >= -1 && info.rank < world);
  FRUGAL_FUZZ_CHECK(info.rank < 0 || !taken[info.rank]);
  FRUGAL_FUZZ_CHECK(Bounded(info.endpoint) && Bounded(info.cluster) && info.public_key == "key");
}

// The worker's parse of the rendezvous table.
void RendezvousTable(const std::string& answer) {
  auto t = wire::ParseWorldTable(answer, "fuzz");
  if (!t.ok()) {
    FRUGAL_FUZZ_CHECK(!t.status().message().empty());
    return;
  }
  FRUGAL_FUZZ_CHECK(!t->peers.empty() && t->rank >= 0 && t->rank < static_cast<int>(t->peers.size()));
  json peers = json::array();
  for (size_t r = 0; r < t->peers.size(); ++r) {
    FRUGAL_FUZZ_CHECK(t->peers[r].rank == static_cast<int>(r));
    peers.push_back(wire::PeerToJson(t->peers[r]));
  }
  json again{{"version", wire::kRendezvousVersion}, {"rank", t->rank}, {"peers", peers}};
  auto t2 = wire::ParseWorldTable(again.dump(), "fuzz");
  FRUGAL_FUZZ_CHECK(t2.ok() && t2->rank == t->rank && SamePeers(t2->peers, t->peers));
}

// The coordinator's check of an elastic (or plain) registration.
void MembershipRegistration(bool plain, const std::string& body) {
  json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return;  // Handle() answers these before parsing.
  std::string why;
  membership_wire::RegistrationRequest r;
  if (!membership_wire::ParseRegistration(req, plain, &r, &why)) {
    FRUGAL_FUZZ_CHECK(!why.empty());
    return;
  }
  FRUGAL_FUZZ_CHECK(r.info.rank >= -1 && r.info.rank <= 65535);
  FRUGAL_FUZZ_CHECK(Bounded(r.info.endpoint) && Bounded(r.info.cluster));
  if (plain) return;
  FRUGAL_FUZZ_CHECK(Bounded(r.id) && r.snapshots.size() <= 64 && r.max_world >= 0);
  for (int64_t s : r.snapshots) FRUGAL_FUZZ_CHECK(s >= 0);
  json again = membership_wire::RegistrationJson(r);
  std::string why2;
  membership_wire::RegistrationRequest r2;
  FRUGAL_FUZZ_CHECK(membership_wire::ParseRegistration(again, false, &r2, &why2));
  FRUGAL_FUZZ_CHECK(r2.id == r.id && r2.join == r.join && r2.snapshots == r.snapshots &&
                    r2.max_world == r.max_world && SamePeers({r2.info}, {r.info}));
}

// The worker's parse of a generation's table.
void MembershipTable(const std::string& answer) {
  auto g = membership_wire::ParseTable(answer, "fuzz");
  if (!g.ok()) {
    FRUGAL_FUZZ_CHECK(!g.status().message().empty());
    return;
  }
  const int world = static_cast<int>(g->peers.size());
  FRUGAL_FUZZ_CHECK(world > 0 && g->rank >= 0 && g->rank < world && g->number >= 1 && g->restore >= -1);
  for (int r = 0; r < world; ++r) FRUGAL_FUZZ_CHECK(g->peers[r].rank == r);
  for (int j : g->joined) FRUGAL_FUZZ_CHECK(j >= 0 && j < world);
  auto again = membership_wire::ParseTable(membership_wire::TableJson(*g).dump(), "fuzz");
  FRUGAL_FUZZ_CHECK(again.ok() && again->number == g->number && again->rank == g->rank &&
                    again->restore == g->restore && again->joined == g->joined && SamePeers(again->peers, g->peers));
}

// The coordinator's check of a heartbeat (Note [Coordinator restart]).
void MembershipHeartbeat(const std::string& body) {
  json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return;  // Handle() answers these before parsing.
  std::string why;
  membership_wire::Heartbeat h;
  if (!membership_wire::ParseHeartbeat(req, &h, &why)) {
    FRUGAL_FUZZ_CHECK(!why.empty());
    return;
  }
  FRUGAL_FUZZ_CHECK(Bounded(h.id) && h.generation >= 0 && h.iteration >= -1 && h.world >= 0 && h.world <= 65536);
  if (h.info.rank >= 0) {
    FRUGAL_FUZZ_CHECK(h.generation >= 1 && Bounded(h.info.endpoint) && Bounded(h.info.cluster));
    FRUGAL_FUZZ_CHECK(h.info.rank <= 65535 && (h.world == 0 || h.info.rank < h.world));
  }
  membership_wire::Heartbeat h2;
  std::string why2;
  FRUGAL_FUZZ_CHECK(membership_wire::ParseHeartbeat(membership_wire::HeartbeatJson(h), &h2, &why2));
  FRUGAL_FUZZ_CHECK(h2.id == h.id && h2.generation == h.generation && h2.iteration == h.iteration &&
                    h2.world == h.world && SamePeers({h2.info}, {h.info}));
}

// The shared field readers, on any JSON value.
void Fields(int world, const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  auto v = wire::IntField(j, "n", -1, world, "fuzz");
  if (v.ok()) FRUGAL_FUZZ_CHECK(*v >= -1 && *v <= world);
  auto p = wire::PeerFromJson(j, world, "fuzz");
  if (p.ok()) FRUGAL_FUZZ_CHECK(p->rank >= 0 && p->rank < world);
  if (j.is_object() && j.contains("endpoint") && j["endpoint"].is_string() && j.contains("host") &&
      j["host"].is_string()) {
    auto a = wire::Advertised(j["endpoint"].get<std::string>(), j["host"].get<std::string>());
    if (a.ok()) FRUGAL_FUZZ_CHECK(a->find(j["host"].get<std::string>()) != std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Input in(data, size);
  const uint8_t which = in.Byte();
  const uint8_t param = in.Byte();
  const int world = 1 + param % 16;
  const std::string body = in.RestAsString();
  switch (which % 7) {
    case 0: RendezvousRegistration(world, static_cast<uint8_t>(param >> 4), body); break;
    case 1: RendezvousTable(body); break;
    case 2: MembershipRegistration(false, body); break;
    case 3: MembershipRegistration(true, body); break;
    case 4: MembershipTable(body); break;
    case 6: MembershipHeartbeat(body); break;
    default: Fields(world, body); break;
  }
  return 0;
}
