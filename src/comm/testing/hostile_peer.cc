#include "hostile_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <zmq.hpp>

#include "frugal/common/random.h"
#include "transport/zmq/wire_header.h"

namespace frugal::comm::testing {

void SendRawTcp(const std::string& endpoint, const std::string& bytes, std::chrono::milliseconds before,
                std::chrono::milliseconds after) {
  const size_t colon = endpoint.rfind(':');
  const size_t scheme = endpoint.find("://");
  if (colon == std::string::npos || scheme == std::string::npos) return;
  const std::string host = endpoint.substr(scheme + 3, colon - scheme - 3);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::this_thread::sleep_for(before);
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    std::this_thread::sleep_for(after);
  }
  ::close(fd);
}

// ZMTP 3.0: signature 0xFF, 8 padding bytes, 0x7F; version 3.0; the
// mechanism name NUL-padded to 20 bytes; as-server 0; 31 bytes of filler.
std::string ZmtpGreeting(const std::string& mechanism) {
  std::string g(64, '\0');
  g[0] = static_cast<char>(0xFF);
  g[9] = 0x7F;
  g[10] = 3;
  g.replace(12, std::min<size_t>(mechanism.size(), 20), mechanism.substr(0, 20));
  return g;
}

void Bombard(const std::string& endpoint, uint64_t seed) {
  SplitMix64 rng(seed);
  std::string noise(100 * 1024, '\0');
  for (char& c : noise) c = static_cast<char>(rng.Next());
  SendRawTcp(endpoint, noise);
  // Unversioned ZMTP 1.0 framing: a short first byte makes libzmq parse it.
  noise[0] = 3;
  SendRawTcp(endpoint, noise);
  SendRawTcp(endpoint, "GET / HTTP/1.1\r\nHost: frugal\r\nConnection: close\r\n\r\n");

  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 200);
  raw.connect(endpoint);
  auto send = [&](std::initializer_list<std::string> frames) {
    size_t i = 0;
    for (const std::string& f : frames) {
      raw.send(zmq::buffer(f), ++i < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  send({"x"});
  send({"not a header", "payload"});
  send({"a", "b", "c", "d"});
  auto bad_magic = WireHeader{}.Encode();
  bad_magic[0] ^= 0xff;
  send({std::string(bad_magic.begin(), bad_magic.end()), ""});
  WireHeader other_world;
  other_world.world_size = 1000;
  other_world.src = 1;
  auto h = other_world.Encode();
  send({std::string(h.begin(), h.end()), ""});
}

Result<std::string> SendRendezvousRequest(const std::string& endpoint, const std::string& body,
                                          std::chrono::milliseconds timeout) {
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  dealer.send(zmq::buffer(body), zmq::send_flags::none);
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return Status::Timeout("no answer from " + endpoint);
  zmq::message_t msg;
  if (!dealer.recv(msg, zmq::recv_flags::dontwait)) return Status::Timeout("no answer from " + endpoint);
  return msg.to_string();
}

}  // namespace frugal::comm::testing
