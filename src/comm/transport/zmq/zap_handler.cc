#include "zap_handler.h"

#include <cerrno>
#include <zmq_addon.hpp>

#include "zmq_socket_setup.h"

namespace frugal::comm {

Result<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context, const SecurityOptions& security,
                                                      LogSink log) {
  std::set<std::string> allowed;
  for (const std::string& k : security.authorized_keys) allowed.insert(Z85ToKey(k));
  allowed.insert(Z85ToKey(security.keys.public_key));
  allowed.erase("");
  zmq::socket_t socket;
  try {
    socket = zmq::socket_t(context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return ZmqError("starting the ZAP authentication handler", e);
  }
  return std::unique_ptr<ZapHandler>(new ZapHandler(std::move(socket), std::move(allowed), std::move(log)));
}

ZapHandler::ZapHandler(zmq::socket_t socket, std::set<std::string> allowed, LogSink log)
    : socket_(std::move(socket)), allowed_(std::move(allowed)), sink_(log), log_(std::move(log)) {
  thread_ = std::thread([this] { Loop(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

Status ZapHandler::MonitorListener(zmq::context_t& context, zmq::socket_t& listener) {
  FRUGAL_ASSIGN_OR_RETURN(auto monitor, HandshakeMonitor::Start(context, listener, sink_));
  monitors_.push_back(std::move(monitor));
  return Status::Ok();
}

// Polls with a short timeout so that destruction never waits long; ZAP
// requests are rare (one per connection attempt).
void ZapHandler::Loop() {
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (PollRetrying(&item, 1, std::chrono::milliseconds(50)) == 0) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) continue;
      Answer(request);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) break;
      log_.Report(std::string("ZAP handler: ") + e.what());
    }
  }
  socket_.close();
}

// Request: version, request id, domain, address, routing id, mechanism,
// credentials... Reply: version, request id, status code, status text,
// user id, metadata.
void ZapHandler::Answer(std::vector<zmq::message_t>& request) {
  auto reply = [&](const std::string& code, const std::string& text, const std::string& user) {
    std::vector<zmq::message_t> out;
    out.emplace_back(std::string("1.0"));
    out.emplace_back(request.size() > 1 ? request[1].to_string() : std::string());
    out.emplace_back(code);
    out.emplace_back(text);
    out.emplace_back(user);
    out.emplace_back();
    zmq::send_multipart(socket_, out);
  };
  if (request.size() < 6 || request[0].to_string() != "1.0") {
    reply("500", "malformed ZAP request", "");
    return;
  }
  const std::string address = request[3].to_string();
  const std::string mechanism = request[5].to_string();
  if (mechanism != "CURVE" || request.size() < 7 || request[6].size() != 32) {
    ++rejected_;
    log_.Report("refused a connection from " + address + ": mechanism " + mechanism + " (this job requires CURVE)");
    reply("400", "CURVE required", "");
    return;
  }
  const std::string key = request[6].to_string();
  const std::string z85 = KeyToZ85(key);
  if (allowed_.count(key) == 0) {
    ++rejected_;
    log_.Report("refused a connection from " + address + ": key " + KeyFingerprint(z85) +
                "... is not on the authorised keys list");
    reply("400", "key not authorised", "");
    return;
  }
  reply("200", "OK", z85);
}

}  // namespace frugal::comm
