// CURVE security (security.h): key files, an authorised peer joins and an
// unauthorised one is refused at the handshake (it never reaches the
// rendezvous), a plaintext peer cannot talk to a CURVE job.
#include "frugal/comm/transport/security.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "frugal/comm/membership/rendezvous.h"
#include "frugal/comm/algorithms/sparse_exchange.h"
#include "testing/hostile_peer.h"
#include "testing/test_combine.h"
#include "testing/test_world.h"
#include "transport/zmq/wire_header.h"

namespace frugal::comm {
namespace {

using std::chrono::milliseconds;

#define SKIP_WITHOUT_CURVE() \
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)"

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/frugal_security_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

CurveKeyPair NewKeys() {
  auto k = GenerateCurveKeyPair();
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  return k.ok() ? *k : CurveKeyPair{};
}

ZmqOptions Curve(const CurveKeyPair& keys, std::vector<std::string> authorized, std::function<void(const std::string&)> log = nullptr) {
  ZmqOptions zmq = testing::FastZmqOptions();
  zmq.security.mechanism = SecurityOptions::Mechanism::kCurve;
  zmq.security.keys = keys;
  zmq.security.authorized_keys = std::move(authorized);
  zmq.log = std::move(log);
  return zmq;
}

TEST(SecurityTest, KeyFilesRoundTripAndLoosePermissionsAreRefused) {
  SKIP_WITHOUT_CURVE();
  TempDir dir;
  const std::string key = dir.path + "/site.key";
  CurveKeyPair keys = NewKeys();
  ASSERT_TRUE(WriteKeyPairFiles(key, keys, "site-a").ok());
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto read = ReadKeyPairFile(key);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, keys.public_key);
  EXPECT_EQ(read->secret_key, keys.secret_key);
  // Never overwrites a key.
  EXPECT_EQ(WriteKeyPairFiles(key, NewKeys(), "x").code(), Status::Code::kInvalidArgument);

  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  auto loose = ReadKeyPairFile(key);
  ASSERT_FALSE(loose.ok());
  EXPECT_NE(loose.status().message().find("mode 0644"), std::string::npos) << loose.status().ToString();
  EXPECT_NE(loose.status().message().find("chmod 600 " + key), std::string::npos) << loose.status().ToString();
  ASSERT_EQ(::chmod(key.c_str(), 0640), 0);
  EXPECT_FALSE(ReadKeyPairFile(key).ok());

  // The .pub line is an allow-list line; comments and blank lines are fine.
  const std::string list = dir.path + "/authorized_keys";
  std::ofstream(list) << "# sites of the job\n\n" << keys.public_key << " site-a\n";
  ::chmod(list.c_str(), 0644);
  auto allowed = ReadAuthorizedKeysFile(list);
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  EXPECT_EQ(*allowed, std::vector<std::string>{keys.public_key});
  std::ifstream pub(key + ".pub");
  std::string pub_line;
  std::getline(pub, pub_line);
  EXPECT_EQ(pub_line, keys.public_key + " site-a");
  ASSERT_EQ(::chmod(list.c_str(), 0666), 0);
  auto writable = ReadAuthorizedKeysFile(list);
  ASSERT_FALSE(writable.ok());
  EXPECT_NE(writable.status().message().find("can write"), std::string::npos) << writable.status().ToString();
  ::chmod(list.c_str(), 0644);
  std::ofstream(list, std::ios::app) << "not-a-key\n";
  auto bad = ReadAuthorizedKeysFile(list);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(list + ":4"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(ReadKeyPairFile(dir.path + "/missing").status().code(), Status::Code::kNotFound);
}

// Keys A (the coordinator and rank 0) and B (rank 1) are on the list, C is
// not: C is refused at the handshake and logged with its fingerprint; A and
// B form a world and exchange over CURVE.
TEST(SecurityTest, AuthorisedPeersJoinAndAnUnauthorisedOneIsRefused) {
  SKIP_WITHOUT_CURVE();
  CurveKeyPair a = NewKeys(), b = NewKeys(), c = NewKeys();
  const std::vector<std::string> list{a.public_key, b.public_key};
  testing::LogCapture server_log;
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 2, Curve(a, list, server_log.Sink()));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<PeerInfo> table;
  std::thread serve([&] {
    auto t = (*server)->Serve(milliseconds(15000));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    table = *t;
  });
  // The stranger knows the server's key but is not on its list.
  ZmqOptions stranger = Curve(c, {a.public_key});
  auto refused = RegisterWithRendezvous((*server)->endpoint(), PeerInfo{0, "tcp://127.0.0.1:9", "x", ""},
                                        milliseconds(1000), stranger);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kTimeout) << refused.status().ToString();
  EXPECT_GT(server_log.Count("refused a connection from 127.0.0.1: key " + KeyFingerprint(c.public_key)), 0u);

  std::atomic<int> correct{0};
  testing::RunRanks(2, [&](int r) {
    JoinOptions join;
    join.rendezvous = (*server)->endpoint();
    join.rank = r;  // Rank 0 may take the slot the stranger asked for.
    join.timeout = milliseconds(15000);
    join.zmq = Curve(r == 0 ? a : b, list);  // No server key: tries the list.
    auto transport = JoinZmqWorld(join);
    ASSERT_TRUE(transport.ok()) << transport.status().ToString();
    SparseExchange ex(transport->get(), testing::SumU32);
    for (int it = 0; it < 5; ++it) {
      auto out = ex.Run(it, testing::ExchangeInput(it, r));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      correct += *out == testing::ExchangeExpected(it, 2);
    }
  });
  serve.join();
  EXPECT_EQ(correct.load(), 10);
  ASSERT_EQ(table.size(), 2u);
  // The table carries the keys ZAP admitted, not claims.
  EXPECT_EQ(table[0].public_key, a.public_key);
  EXPECT_EQ(table[1].public_key, b.public_key);
}

// A plaintext peer speaks to a CURVE world: its well-formed header (which
// plain TCP would deliver) never arrives, its registration never counts, and
// the world carries on.
TEST(SecurityTest, PlaintextPeerCannotTalkToACurveJob) {
  SKIP_WITHOUT_CURVE();
  CurveKeyPair keys = NewKeys();
  testing::LogCapture log;
  testing::World w = testing::MakeWorld(testing::Backend::kZmq, {"a", "a"}, Curve(keys, {}, log.Sink()));
  ASSERT_EQ(w.ranks.size(), 2u);
  {
    zmq::context_t ctx;
    zmq::socket_t plain(ctx, zmq::socket_type::dealer);
    plain.set(zmq::sockopt::linger, 0);
    plain.connect(testing::EndpointOf(w, 1));
    WireHeader h;
    h.src = 0;
    h.world_size = 2;
    h.tag = 99;
    h.length = 1;
    auto bytes = h.Encode();
    plain.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::sndmore);
    plain.send(zmq::str_buffer("x"), zmq::send_flags::none);
    testing::Bombard(testing::EndpointOf(w, 1), 7);
    auto forged = w.ranks[1]->Recv(0, 99, milliseconds(500));
    EXPECT_EQ(forged.status().code(), Status::Code::kTimeout) << forged.status().ToString();
  }
  ASSERT_TRUE(w.ranks[0]->Send(1, 1, Bytes{42}).ok());
  auto m = w.ranks[1]->Recv(0, 1, milliseconds(5000));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->payload, Bytes{42});

  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 1, Curve(keys, {}));
  ASSERT_TRUE(server.ok());
  std::thread serve([&] {
    auto t = (*server)->Serve(milliseconds(1500));
    EXPECT_EQ(t.status().code(), Status::Code::kTimeout) << "a plaintext registration counted";
  });
  auto plain = RegisterWithRendezvous((*server)->endpoint(), PeerInfo{0, "tcp://127.0.0.1:9", "x", ""},
                                      milliseconds(800), testing::FastZmqOptions());
  EXPECT_EQ(plain.status().code(), Status::Code::kTimeout) << plain.status().ToString();
  serve.join();
}

// Strangers that libzmq refuses before the ZAP handler sees a key (a
// plaintext peer, a CURVE client with a wrong server key) are logged with
// their address and the reason (zmq/handshake_monitor.h).
TEST(SecurityTest, HandshakesRefusedBeforeTheKeyCheckAreLogged) {
  SKIP_WITHOUT_CURVE();
  CurveKeyPair keys = NewKeys();
  testing::LogCapture log;
  auto server = RendezvousServer::Bind("tcp://127.0.0.1:*", 1, Curve(keys, {}, log.Sink()));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto wait_for = [&](const std::string& needle) {
    for (int i = 0; i < 100 && log.Count(needle) == 0; ++i) std::this_thread::sleep_for(milliseconds(50));
    return log.Count(needle);
  };
  zmq::context_t ctx;
  {
    // A plaintext (NULL-mechanism) peer. It greets only after 300 ms, so the
    // monitor has read the connection's ACCEPTED event and its address
    // before the listener drops it (Note [Refused handshakes]; a ZeroMQ
    // client greets at once, and under a sanitizer the listener could drop
    // it before the monitor asked getpeername).
    testing::SendRawTcp((*server)->endpoint(), testing::ZmtpGreeting("NULL"), milliseconds(300), milliseconds(300));
    EXPECT_GT(wait_for("before the key check: wrong security mechanism"), 0u);
    EXPECT_GT(log.Count("refused a connection from 127.0.0.1:"), 0u);
  }
  {
    CurveKeyPair mine = NewKeys();
    zmq::socket_t wrong(ctx, zmq::socket_type::dealer);
    wrong.set(zmq::sockopt::linger, 0);
    wrong.set(zmq::sockopt::curve_serverkey, NewKeys().public_key);
    wrong.set(zmq::sockopt::curve_publickey, mine.public_key);
    wrong.set(zmq::sockopt::curve_secretkey, mine.secret_key);
    wrong.connect((*server)->endpoint());
    wrong.send(zmq::str_buffer("{}"), zmq::send_flags::dontwait);
    EXPECT_GT(wait_for("before the key check: CURVE handshake does not decrypt"), 0u);
  }
  // A CURVE HELLO whose box does not open (RFC 26: 200 bytes of command, a
  // box of filler bytes here) is named with the peer's address. Like the plaintext peer
  // above it is sent 300 ms after connecting; a ZeroMQ client greets at once
  // and under a sanitizer may be dropped before the monitor asks
  // getpeername ("unknown address").
  {
    const size_t before = log.Count("does not decrypt");
    std::string hello = std::string("\x04\xC8") + "\x05HELLO" + std::string("\x01\x00", 2);
    hello += std::string(72 + 32 + 8 + 80, '\x01');
    testing::SendRawTcp((*server)->endpoint(), testing::ZmtpGreeting("CURVE") + hello, milliseconds(300),
                        milliseconds(300));
    for (int i = 0; i < 100 && log.Count("does not decrypt") == before; ++i) {
      std::this_thread::sleep_for(milliseconds(50));
    }
    EXPECT_GT(log.Count("does not decrypt"), before) << "the HELLO was not refused as a decryption failure";
  }
  bool named = false;
  for (const std::string& l : log.lines()) {
    named |= l.find("from 127.0.0.1:") != std::string::npos && l.find("does not decrypt") != std::string::npos;
  }
  EXPECT_TRUE(named) << "no refusal names its peer";
  // A flood is rate limited: at most the burst (10) lines per 10 s window,
  // so at most two windows' worth here.
  for (int i = 0; i < 30; ++i) {
    zmq::socket_t plain(ctx, zmq::socket_type::dealer);
    plain.set(zmq::sockopt::linger, 0);
    plain.connect((*server)->endpoint());
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LE(log.Count("before the key check"), 20u);
}

TEST(SecurityTest, BadOptionsAreRefused) {
  ZmqOptions zmq;
  zmq.security.mechanism = SecurityOptions::Mechanism::kCurve;
  auto l = ZmqListener::Bind("tcp://127.0.0.1:*", zmq);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("key pair"), std::string::npos) << l.status().ToString();
  if (!CurveAvailable()) return;
  zmq.security.keys = NewKeys();
  zmq.security.authorized_keys = {"short"};
  EXPECT_EQ(RendezvousServer::Bind("tcp://127.0.0.1:*", 1, zmq).status().code(), Status::Code::kInvalidArgument);
}

TEST(SecurityTest, SettingsResolveAsTheCliFlagsDo) {
  EXPECT_TRUE(IsLoopbackAddress("tcp://127.0.0.1:5000"));
  EXPECT_TRUE(IsLoopbackAddress("tcp://localhost:5000"));
  EXPECT_TRUE(IsLoopbackAddress("ipc:///tmp/x"));
  EXPECT_FALSE(IsLoopbackAddress("tcp://10.0.0.1:5000"));
  EXPECT_FALSE(IsLoopbackAddress("tcp://localhostile.example:5000"));

  auto plain = ResolveSecuritySettings("", "", false, "tcp://127.0.0.1:5000");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->mechanism, SecurityOptions::Mechanism::kNone);
  auto insecure = ResolveSecuritySettings("", "", true, "tcp://10.0.0.1:5000");
  ASSERT_TRUE(insecure.ok());
  EXPECT_EQ(insecure->mechanism, SecurityOptions::Mechanism::kNone);

  auto refused = ResolveSecuritySettings("", "", false, "tcp://10.0.0.1:5000");
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("a multi-host run needs keys"), std::string::npos);
  EXPECT_NE(ResolveSecuritySettings("a.key", "", false, "tcp://10.0.0.1:5000").status().message().find("go together"),
            std::string::npos);
  EXPECT_NE(ResolveSecuritySettings("a.key", "ak", true, "tcp://10.0.0.1:5000").status().message().find(
                "cannot be combined"),
            std::string::npos);

  if (!CurveAvailable()) return;
  TempDir dir;
  const std::string key = dir.path + "/site.key";
  ASSERT_TRUE(WriteKeyPairFiles(key, NewKeys(), "site").ok());
  auto curve = ResolveSecuritySettings(key, key + ".pub", false, "tcp://10.0.0.1:5000");
  ASSERT_TRUE(curve.ok()) << curve.status().ToString();
  EXPECT_EQ(curve->mechanism, SecurityOptions::Mechanism::kCurve);
  EXPECT_EQ(curve->authorized_keys.size(), 1u);
  EXPECT_EQ(ResolveSecuritySettings(dir.path + "/missing.key", key + ".pub", false, "tcp://10.0.0.1:5000")
                .status()
                .code(),
            Status::Code::kNotFound);
}

}  // namespace
}  // namespace frugal::comm
