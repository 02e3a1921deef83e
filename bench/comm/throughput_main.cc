// frugal_comm_throughput: raw ZeroMQ transport throughput between two ranks
// on loopback, plain TCP and CURVE in the same run (docs/design/security.md).
//   frugal_comm_throughput [--mib-per-message 4] [--messages 200] [--rounds 3]
// Prints MB/s per mechanism (median of the rounds, alternating) and the
// ratio. Exit 1 if a transfer fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "frugal/comm/transport/security.h"
#include "frugal/comm/transport/zmq_transport.h"

namespace {

using namespace frugal::comm;  // NOLINT: a program's main file.

// MB/s of `messages` sends of `bytes` each from rank 0 to rank 1, from the
// first Send until rank 1 has received the last.
double MeasureOnce(const ZmqOptions& zmq, size_t bytes, int messages) {
  std::vector<std::unique_ptr<ZmqListener>> listeners;
  std::vector<PeerInfo> peers;
  for (int r = 0; r < 2; ++r) {
    auto l = ZmqListener::Bind("tcp://127.0.0.1:*", zmq);
    if (!l.ok()) {
      std::fprintf(stderr, "%s\n", l.status().ToString().c_str());
      std::exit(1);
    }
    peers.push_back(PeerInfo{r, (*l)->endpoint(), "a", zmq.security.keys.public_key});
    listeners.push_back(std::move(l).value());
  }
  std::vector<std::unique_ptr<Transport>> t;
  for (int r = 0; r < 2; ++r) t.push_back(std::move(ConnectZmqTransport(std::move(listeners[r]), r, peers)).value());
  // Warm-up: the connection (and CURVE handshake) is not measured.
  if (!t[0]->Send(1, 0, Bytes(1)).ok() || !t[1]->Recv(0, 0, std::chrono::seconds(10)).ok()) std::exit(1);
  auto payload = std::make_shared<const Bytes>(bytes, 7);
  const auto start = std::chrono::steady_clock::now();
  std::thread receiver([&] {
    for (int i = 1; i <= messages; ++i) {
      if (!t[1]->Recv(0, i, std::chrono::seconds(60)).ok()) std::exit(1);
    }
  });
  for (int i = 1; i <= messages; ++i) {
    if (!t[0]->Send(1, i, payload).ok()) std::exit(1);
  }
  receiver.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(bytes) * messages / s / 1e6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double mib = 4;
  int messages = 200, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--mib-per-message") mib = std::atof(argv[i + 1]);
    else if (flag == "--messages") messages = std::atoi(argv[i + 1]);
    else if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  const size_t bytes = static_cast<size_t>(mib * (1 << 20));
  ZmqOptions plain;
  ZmqOptions curve;
  if (!CurveAvailable()) {
    std::fprintf(stderr, "libzmq without CURVE: nothing to compare\n");
    return 1;
  }
  curve.security.mechanism = SecurityOptions::Mechanism::kCurve;
  curve.security.keys = GenerateCurveKeyPair().value();
  std::vector<double> plain_mbs, curve_mbs;
  for (int r = 0; r < rounds; ++r) {
    plain_mbs.push_back(MeasureOnce(plain, bytes, messages));
    curve_mbs.push_back(MeasureOnce(curve, bytes, messages));
  }
  const double p = Median(plain_mbs), c = Median(curve_mbs);
  std::printf("%d x %.2f MiB over loopback, median of %d rounds\nplain TCP %.0f MB/s\nCURVE     %.0f MB/s\n"
              "CURVE / plain = %.3f\n",
              messages, mib, rounds, p, c, c / p);
  return 0;
}
