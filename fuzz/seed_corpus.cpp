// Writes the fuzz targets' seed corpus: real frames and session messages, built with the
// same builders Kestrel's peers use, in each target's input format (see the targets'
// first comments). `kestrel_fuzz_seeds DIR` writes DIR/<target>/<name>; scripts/fuzz.sh
// seeds regenerates fuzz/corpus/ with it.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "frames.h"
#include "support.h"

using namespace kestrel;
namespace frames = kestrel::fuzz::frames;
using Bytes = std::vector<std::uint8_t>;

namespace {

std::filesystem::path out_dir;

void write(const std::string& target, const std::string& name, const Bytes& bytes) {
  std::filesystem::path dir = out_dir / target;
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / ("seed-" + name), std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

// A frame without its 4-byte length header (the tracker target adds it).
std::span<const std::uint8_t> body(const rpc::FrameBytes& frame) {
  return std::span<const std::uint8_t>(frame).subspan(rpc::kFrameHeaderBytes);
}

Bytes chunks(std::uint8_t first, const std::vector<std::span<const std::uint8_t>>& parts) {
  Bytes out{first};
  for (auto part : parts) fuzz::append_chunk(out, part);
  return out;
}

Bytes concat(const std::vector<Bytes>& parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Every frame kind of tracker.capnp.
std::vector<std::pair<std::string, rpc::FrameBytes>> all_frames() {
  std::vector<std::pair<std::string, rpc::FrameBytes>> out;
  out.emplace_back("hello-client", frames::hello(wire::Role::CLIENT, "kestrel tune"));
  out.emplace_back("hello-device", frames::hello(wire::Role::DEVICE, "kestrel-device rpi4-a"));
  out.emplace_back("challenge", frames::frame([](wire::Frame::Builder f) {
                     auto c = f.initChallenge();
                     c.setProtocolVersion(rpc::protocol_version());
                     rpc::Nonce nonce{};
                     c.setNonce(capnp::Data::Reader(nonce.data(), nonce.size()));
                     c.setAuthRequired(true);
                   }));
  out.emplace_back("auth-proof-empty", frames::auth_proof());
  out.emplace_back("auth-proof-mac", frames::auth_proof(rpc::kMacBytes));
  out.emplace_back("welcome", frames::frame([](wire::Frame::Builder f) {
                     auto w = f.initWelcome();
                     w.setConnectionId(3);
                     w.setHeartbeatIntervalMs(1000);
                     w.setHeartbeatMisses(3);
                   }));
  out.emplace_back("failure", frames::failure(wire::FailureCode::AUTH_FAILED, "wrong token"));
  out.emplace_back("register", frames::register_device("rpi4", "rpi4-a"));
  out.emplace_back("registered", frames::frame([](wire::Frame::Builder f) { f.initRegistered().setDeviceId(1); }));
  out.emplace_back("heartbeat", frames::heartbeat(false, 9));
  out.emplace_back("heartbeat-ack", frames::heartbeat(true, 9));
  out.emplace_back("request-device", frames::request_device(1, "rpi4", 5, 30000));
  out.emplace_back("cancel-request", frames::cancel_request(1));
  out.emplace_back("grant", frames::frame([](wire::Frame::Builder f) {
                     auto g = f.initGrant();
                     g.setRequestId(1);
                     g.setLeaseId(1);
                     g.setDeviceId(1);
                     rpc::to_wire(frames::device_info("rpi4-a"), g.initInfo());
                   }));
  out.emplace_back("request-failed", frames::frame([](wire::Frame::Builder f) {
                     auto r = f.initRequestFailed();
                     r.setRequestId(1);
                     auto x = r.initFailure();
                     x.setCode(wire::FailureCode::TIMEOUT);
                     x.setMessage("no device of key rpi4 within 30000 ms");
                   }));
  out.emplace_back("release", frames::release(1));
  out.emplace_back("lease-started", frames::frame([](wire::Frame::Builder f) {
                     auto l = f.initLeaseStarted();
                     l.setLeaseId(1);
                     l.setHolder("kestrel tune 127.0.0.1:5000");
                   }));
  out.emplace_back("lease-ended", frames::frame([](wire::Frame::Builder f) {
                     auto l = f.initLeaseEnded();
                     l.setLeaseId(1);
                     auto x = l.initFailure();
                     x.setCode(wire::FailureCode::DEVICE_LOST);
                     x.setMessage("device rpi4-a disconnected");
                   }));
  out.emplace_back("summary-request", frames::summary_request(4));
  out.emplace_back("summary", frames::frame([](wire::Frame::Builder f) {
                     auto s = f.initSummary();
                     s.setRequestId(4);
                     s.setTrackerVersion("0.1.0");
                     s.setUptimeMs(1000);
                     auto k = s.initKeys(1)[0];
                     k.setKey("rpi4");
                     k.setFree(1);
                     auto d = s.initDevices(1)[0];
                     d.setDeviceId(1);
                     d.setKey("rpi4");
                     rpc::to_wire(frames::device_info("rpi4-a"), d.initInfo());
                     d.setAddress("127.0.0.1:4000");
                     s.setClients(1);
                   }));
  for (const auto& [name, payload] : frames::session_messages()) {
    out.emplace_back("relay-" + name, frames::relay(1, payload));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kestrel_fuzz_seeds DIR\n";
    return 2;
  }
  out_dir = argv[1];
  const auto session = frames::session_messages();
  auto payload = [&](const std::string& name) -> const rpc::Payload& {
    for (const auto& [n, p] : session) {
      if (n == name) return p;
    }
    throw std::logic_error("no session message " + name);
  };

  // fuzz_http: byte 0 bit 0 = the server wants the token, bit 1 = the HTTPS server, then
  // the request bytes.
  auto http = [](const std::string& name, std::uint8_t first, const std::string& request) {
    Bytes bytes{first};
    bytes.insert(bytes.end(), request.begin(), request.end());
    write("http", name, bytes);
  };
  const std::string form = "token=fuzz-token-0123456789abcdef";
  http("page", 0, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  http("head-asset", 0, "HEAD /assets/dashboard.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  http("pipelined", 0, "GET /api/state HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
       "GET /api/events HTTP/1.0\r\n\r\n");
  http("stream", 0, "GET /api/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n");
  http("unknown-method", 0, "PATCH /api/pool HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
  http("chunked", 0, "POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ntoken\r\n0\r\n\r\n");
  http("no-token", 1, "GET /api/sessions HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
  http("bearer", 1, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer fuzz-token-0123456789abcdef\r\n\r\n");
  http("login", 1, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
       "Content-Length: " + std::to_string(form.size()) + "\r\n\r\n" + form);
  http("https-plain", 2, "GET /api/state HTTP/1.1\r\nHost: x\r\n\r\n");
  // The start of a TLS 1.3 ClientHello record (the fuzzer grows it).
  http("https-hello", 2, std::string("\x16\x03\x01\x00\x30\x01\x00\x00\x2c\x03\x03", 11) + std::string(32, 'r'));
  http("wrong-cookie", 1, "GET /api/pool HTTP/1.1\r\nHost: x\r\nCookie: a=b; kestrel_dashboard=00ff\r\n\r\n");

  // fuzz_frame: whole frames.
  for (const auto& [name, frame] : all_frames()) write("frame", name, frame);

  // fuzz_measure: session payloads, and a worker's result as it writes it.
  for (const auto& [name, p] : session) write("measure", name, p);
  {
    rpc::CandidateResult r;
    r.id = 3;
    r.status = kernel::Status::wrong_answer;
    r.message = "element 7: 1.5 vs 0.25";
    r.number = 4;
    r.round_seconds = {2e-6};
    r.max_error = 1.25;
    write("measure", "worker-result", rpc::encode_result(r));
  }

  // fuzz_session: byte 0 = which lease each message goes to, then the payloads.
  for (const auto& [name, p] : session) write("session", name, chunks(0, {p}));
  write("session", "upload-query-measure",
        chunks(0, {payload("upload-module"), payload("query-modules"), payload("measure-batch"), payload("ping")}));
  write("session", "two-leases",
        chunks(0b0110, {payload("upload-module"), payload("query-modules"), payload("measure-batch-no-reference"),
                        payload("info-request")}));

  // fuzz_handshake: byte 0 bit 0 = the tracker has a token; then the peer's frames.
  for (std::uint8_t token : {0, 1}) {
    std::string suffix = token ? "-token" : "";
    write("handshake", "client" + suffix,
          concat({{token}, frames::hello(wire::Role::CLIENT, "kestrel tune"), frames::auth_proof(token ? 32 : 0)}));
    write("handshake", "device" + suffix,
          concat({{token}, frames::hello(wire::Role::DEVICE, "rpi4-a"), frames::auth_proof(token ? 32 : 0)}));
  }
  write("handshake", "old-version", concat({{0}, frames::hello(wire::Role::CLIENT, "old", 0)}));
  write("handshake", "register-first", concat({{0}, frames::register_device("rpi4", "rpi4-a")}));

  // fuzz_tracker: byte 0 bit 0 = the fuzzed peer is a device; then frame bodies.
  auto request = frames::request_device(1, "fuzz");
  auto relay_ping = frames::relay(1, payload("ping"));
  auto relay_batch = frames::relay(1, payload("measure-batch"));
  auto relay_upload = frames::relay(1, payload("upload-module"));
  auto release = frames::release(1);
  auto cancel = frames::cancel_request(1);
  auto summary = frames::summary_request(2);
  auto ack = frames::heartbeat(true, 1);
  auto request_timeout = frames::request_device(3, "nobody", 1, 50);
  write("tracker", "client-lease-relay-release",
        chunks(0, {body(request), body(relay_ping), body(relay_upload), body(relay_batch), body(release)}));
  write("tracker", "client-cancel-summary", chunks(0, {body(request_timeout), body(cancel), body(summary), body(ack)}));
  write("tracker", "client-relay-unheld-lease", chunks(0, {body(frames::relay(7, payload("ping"))), body(release)}));
  write("tracker", "client-registers", chunks(0, {body(frames::register_device("fuzz", "impostor"))}));
  auto reg = frames::register_device("fuzz", "fuzz-peer-device");
  auto relay_pong = frames::relay(1, payload("pong"));
  auto relay_result = frames::relay(1, payload("measure-result"));
  auto relay_done = frames::relay(1, payload("batch-done"));
  write("tracker", "device-register-relay",
        chunks(1, {body(reg), body(ack), body(relay_pong), body(relay_result), body(relay_done)}));
  write("tracker", "device-requests", chunks(1, {body(reg), body(request), body(release)}));
  write("tracker", "device-register-twice", chunks(1, {body(reg), body(reg)}));
  // Bit 1: the chunks are the handshake itself.
  auto hello_client = frames::hello(wire::Role::CLIENT, "fuzz-peer");
  auto hello_device = frames::hello(wire::Role::DEVICE, "fuzz-peer");
  auto proof = frames::auth_proof();
  write("tracker", "raw-client-handshake", chunks(2, {body(hello_client), body(proof), body(request), body(summary)}));
  write("tracker", "raw-device-handshake", chunks(3, {body(hello_device), body(proof), body(reg)}));
  write("tracker", "raw-register-first", chunks(3, {body(reg), body(hello_device)}));
  std::cout << "seeds written to " << out_dir.string() << "\n";
  return 0;
}
