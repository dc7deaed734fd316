// Security regression tests (issue 15), through real processes and sockets.
// Transport (findings 5 and 6, roles): an on-path proxy can neither inject nor replay
// frames (TLS; frame MACs without TLS), a TLS-terminating proxy cannot complete the
// token handshake, role tokens, TLS mismatches and certificate pinning, and a pre-auth
// flood of large frame headers.
#include <catch2/catch.hpp>


#include <sys/socket.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

#include "kestrel/rpc/sha256.h"
#include "kestrel/rpc/framing.h"
#include "kestrel/rpc/messages.h"
#include "kestrel/rpc/session.h"
#include "kestrel/rpc/tls.h"
#include "kestrel/rpc/tracker_client.h"
#include "support/kestrel_processes.h"

namespace kestrel::test {
namespace {

using namespace std::chrono_literals;
using e2e::kDevice;
using e2e::kKestrel;
using e2e::TrackerProcess;

constexpr std::uint64_t kInjectedLease = 4242;

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What an attacker on the path would inject: upload a real kernel module under its
// content hash for a lease that was never started, then measure it.
std::vector<std::uint8_t> injected_frames() {
  auto image = read_bytes(std::string(KESTREL_FIXTURE_DIR) + "/fixture_add.so");
  REQUIRE(!image.empty());
  const std::string hash = rpc::sha256_hex(image);
  std::vector<std::uint8_t> out;
  {
    capnp::MallocMessageBuilder builder;
    auto upload = builder.initRoot<wire::SessionMessage>().initUploadModule();
    upload.setSeq(1);
    upload.setHash(hash);
    upload.setImage(capnp::Data::Reader(image.data(), image.size()));
    auto frame = rpc::relay_frame(LeaseId(kInjectedLease), rpc::encode_session(builder));
    out.insert(out.end(), frame.begin(), frame.end());
  }
  {
    capnp::MallocMessageBuilder builder;
    auto batch = builder.initRoot<wire::SessionMessage>().initMeasureBatch();
    batch.setSeq(2);
    auto args = batch.initArgs(3);
    for (unsigned i = 0; i < 3; ++i) {
      args[i].setElements(64);
      args[i].setIsOutput(i == 2);
    }
    batch.setReferenceHash(hash);
    batch.setTolerance(1e-3);
    batch.initSettings().setRepeat(1);
    auto candidate = batch.initCandidates(1)[0];
    candidate.setId(1);
    candidate.setModuleHash(hash);
    auto frame = rpc::relay_frame(LeaseId(kInjectedLease), rpc::encode_session(builder));
    out.insert(out.end(), frame.begin(), frame.end());
  }
  return out;
}

// A forwarding proxy on loopback between devices and a tracker. On its first
// connection it injects `injected` towards the device once armed; on its second it
// replays the last tracker->device bytes it forwarded. Later connections are forwarded
// untouched. It forwards whole frames when it can parse them (plain TCP; `macs`: frames
// after the second carry a 32-byte MAC), else TLS records as they come.
class Proxy {
 public:
  Proxy(std::uint16_t tracker_port, bool plain, bool macs, std::vector<std::uint8_t> injected)
      : tracker_port_(tracker_port), plain_(plain), macs_(macs), injected_(std::move(injected)),
        acceptor_(io_, {asio::ip::address_v4::loopback(), 0}) {
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~Proxy() {
    stopping_ = true;
    std::error_code ec;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes the blocking accept
    acceptor_.close(ec);
    {
      std::lock_guard lock(mutex_);
      for (auto& s : sockets_) s->shutdown(rpc::tcp::socket::shutdown_both, ec);
    }
    thread_.join();
    for (auto& t : workers_) t.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  // Allows the attack on the next connection (the first call: injection on the first
  // connection, the second: replay on the second).
  void arm() { ++armed_; }
  int attacks() const { return attacks_; }

 private:
  void accept_loop() {
    for (int index = 0; !stopping_; ++index) {
      auto device = std::make_shared<rpc::tcp::socket>(io_);
      std::error_code ec;
      acceptor_.accept(*device, ec);
      if (ec) return;
      auto tracker = std::make_shared<rpc::tcp::socket>(io_);
      tracker->connect({asio::ip::address_v4::loopback(), tracker_port_}, ec);
      if (ec) return;
      {
        std::lock_guard lock(mutex_);
        sockets_.push_back(device);
        sockets_.push_back(tracker);
      }
      workers_.emplace_back([device, tracker] { pump(*device, *tracker); });
      workers_.emplace_back([this, device, tracker, index] { to_device(*tracker, *device, index); });
    }
  }
  static void pump(rpc::tcp::socket& from, rpc::tcp::socket& to) {
    std::array<std::uint8_t, 16384> buffer{};
    std::error_code ec;
    while (true) {
      std::size_t n = from.read_some(asio::buffer(buffer), ec);
      if (ec || asio::write(to, asio::buffer(buffer.data(), n), ec) != n || ec) break;
    }
    from.shutdown(rpc::tcp::socket::shutdown_both, ec);
    to.shutdown(rpc::tcp::socket::shutdown_both, ec);
  }
  // One unit of the tracker->device stream: a whole frame (plain) or what one read
  // returned (TLS). Empty at the end.
  std::vector<std::uint8_t> next_unit(rpc::tcp::socket& from, int frame_index) {
    std::error_code ec;
    if (!plain_) {
      std::vector<std::uint8_t> unit(16384);
      std::size_t n = from.read_some(asio::buffer(unit), ec);
      unit.resize(ec ? 0 : n);
      return unit;
    }
    std::vector<std::uint8_t> unit(4);
    if (asio::read(from, asio::buffer(unit), ec) != 4) return {};
    std::uint32_t length = unit[0] | unit[1] << 8 | unit[2] << 16 | static_cast<std::uint32_t>(unit[3]) << 24;
    std::size_t rest = length + (macs_ && frame_index >= 2 ? 32 : 0);
    unit.resize(4 + rest);
    if (asio::read(from, asio::buffer(unit.data() + 4, rest), ec) != rest) return {};
    return unit;
  }
  void to_device(rpc::tcp::socket& tracker, rpc::tcp::socket& device, int index) {
    std::error_code ec;
    for (int frame = 0;; ++frame) {
      auto unit = next_unit(tracker, frame);
      if (unit.empty() || asio::write(device, asio::buffer(unit), ec) != unit.size()) break;
      if (index < armed_ && index < 2 && !attacked_[index]) {
        attacked_[index] = true;
        const auto& extra = index == 0 ? injected_ : unit;
        asio::write(device, asio::buffer(extra), ec);
        ++attacks_;
      }
    }
    tracker.shutdown(rpc::tcp::socket::shutdown_both, ec);
    device.shutdown(rpc::tcp::socket::shutdown_both, ec);
  }

  std::uint16_t tracker_port_;
  bool plain_, macs_;
  std::vector<std::uint8_t> injected_;
  asio::io_context io_;
  rpc::tcp::acceptor acceptor_;
  std::thread thread_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<rpc::tcp::socket>> sockets_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> armed_{0};
  std::atomic<int> attacks_{0};
  std::array<bool, 2> attacked_{};
};

// Runs the two attacks (inject, then replay on the reconnected connection) against a
// device behind the proxy and checks that the device ran nothing and said why.
void check_proxy_attacks(const std::vector<std::string>& security_flags, bool plain, const std::string& reason) {
  TempDir dir;
  std::string token = e2e::write_token(dir, "token", "transport-test-secret-0123456789");
  std::vector<std::string> flags = {"--token-file", token};
  flags.insert(flags.end(), security_flags.begin(), security_flags.end());
  std::vector<std::string> tracker_flags = {"--host", "127.0.0.1", "--heartbeat-ms", "200"};
  tracker_flags.insert(tracker_flags.end(), flags.begin(), flags.end());
  TrackerProcess tracker(dir, tracker_flags);
  Proxy proxy(tracker.port, plain, plain, injected_frames());
  std::vector<std::string> device_argv = {kDevice, "--tracker", proxy.address(), "--key", "k", "--name", "victim",
                                          "--max-backoff-ms", "300"};
  device_argv.insert(device_argv.end(), flags.begin(), flags.end());
  Process device(device_argv, dir.file("device.log"));
  auto registrations = [&] { return count_of(device.log(), "registered with"); };
  REQUIRE(wait_for([&] { return registrations() >= 1; }));
  // Attack 1 (injection) drops the first connection, attack 2 (replay) the second;
  // the device registers again each time.
  proxy.arm();
  CHECK(wait_for([&] { return registrations() >= 2; }, 15s));
  proxy.arm();
  CHECK(wait_for([&] { return registrations() >= 3; }, 15s));
  INFO(device.log());
  INFO(tracker.process->log());
  CHECK(proxy.attacks() == 2);
  CHECK(count_of(device.log(), reason) >= 2);
  CHECK(device.log().find("lease " + std::to_string(kInjectedLease)) == std::string::npos);
  CHECK(device.running());
}

}  // namespace

TEST_CASE("an on-path proxy can neither inject nor replay frames on a TLS connection", "[security][transport]") {
  // A TLS record the proxy made up or replayed fails TLS's own integrity check.
  check_proxy_attacks({}, false, "from tracker: i/o error");
}

TEST_CASE("without TLS, frame MACs refuse frames an on-path proxy injects or replays", "[security][transport]") {
  check_proxy_attacks({"--no-tls"}, true, "frame authentication failed");
}

namespace {

// A proxy that terminates TLS on each side (its own certificate towards the device,
// a TLS client towards the tracker) and relays the frames in between, as an attacker
// would against peers that do not pin the tracker's certificate.
class TlsTerminatingProxy {
 public:
  explicit TlsTerminatingProxy(std::uint16_t tracker_port)
      : tracker_port_(tracker_port),
        acceptor_(io_, {asio::ip::address_v4::loopback(), 0}),
        server_(rpc::TlsContext::server("", "")),
        client_(rpc::TlsContext::client("")) {
    asio::co_spawn(io_, accept_loop(), [](std::exception_ptr) {});
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TlsTerminatingProxy() {
    io_.stop();
    thread_.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  int relayed() const { return relayed_; }

 private:
  rpc::awaitable<void> accept_loop() {
    while (true) {
      auto [ec, socket] = co_await acceptor_.async_accept(rpc::use_nothrow);
      if (ec) co_return;
      asio::co_spawn(io_, serve(std::move(socket)), [](std::exception_ptr) {});
    }
  }
  rpc::awaitable<void> serve(rpc::tcp::socket socket) {
    auto down = co_await rpc::accept_transport(std::move(socket), server_, {}, 5s);
    auto upstream = co_await rpc::connect_to("127.0.0.1", tracker_port_, 5s);
    auto up = co_await rpc::connect_transport(std::move(upstream), client_, {}, 5s, "tracker");
    asio::co_spawn(io_, pump(up, down), [](std::exception_ptr) {});
    co_await pump(down, up);
  }
  rpc::awaitable<void> pump(std::shared_ptr<rpc::Connection> from, std::shared_ptr<rpc::Connection> to) {
    while (true) {
      rpc::ReadResult r = co_await from->read();
      if (r.error != rpc::FrameError::none) break;
      ++relayed_;
      to->send(rpc::encode_raw(r.frame->bytes()));
    }
    to->close_after_flush();
  }

  std::uint16_t tracker_port_;
  asio::io_context io_;
  rpc::tcp::acceptor acceptor_;
  std::shared_ptr<const rpc::TlsContext> server_, client_;
  std::thread thread_;
  std::atomic<int> relayed_{0};
};

std::size_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

}  // namespace

TEST_CASE("a proxy terminating TLS on each side cannot complete the token handshake", "[security][transport]") {
  TempDir dir;
  std::string token = e2e::write_token(dir, "token", "transport-test-secret-0123456789");
  TrackerProcess tracker(dir, {"--host", "127.0.0.1", "--token-file", token});
  TlsTerminatingProxy proxy(tracker.port);
  Process device({kDevice, "--tracker", proxy.address(), "--key", "k", "--name", "fooled", "--token-file", token},
                 dir.file("device.log"));
  // The rejection the proxy relays is not authenticated (no --tls-ca): the device logs it
  // and keeps trying, and never registers.
  CHECK(wait_for([&] { return device.log().find("retrying (rejection 2)") != std::string::npos; }, 15s));
  INFO(device.log());
  INFO(tracker.process->log());
  CHECK(proxy.relayed() >= 3);  // hello, challenge and authProof went through the proxy
  CHECK(device.running());
  CHECK_THAT(device.log(), Catch::Contains("wrong token") && Catch::Contains("not authenticated"));
  CHECK_THAT(tracker.process->log(), Catch::Contains("on this TLS session"));
  CHECK(e2e::device_count(e2e::query(dir, tracker, {"--token-file", token})) == 0);
}

TEST_CASE("a client token cannot register a device and a device token cannot lease", "[security][transport]") {
  TempDir dir;
  std::string device_token = e2e::write_token(dir, "device-token", "device-role-secret-0123456789");
  std::string client_token = e2e::write_token(dir, "client-token", "client-role-secret-0123456789");
  TrackerProcess tracker(dir, {"--host", "127.0.0.1", "--device-token-file", device_token, "--client-token-file",
                               client_token});
  auto good = e2e::start_device(dir, tracker, "k", "good", {"--token-file", device_token});
  REQUIRE(wait_for([&] { return e2e::device_count(e2e::query(dir, tracker, {"--token-file", client_token})) == 1; }));

  auto impostor = e2e::start_device(dir, tracker, "k", "impostor", {"--token-file", client_token});
  // Refused, and (no --tls-ca) it cannot tell the refusal from a forged one: it retries.
  CHECK(wait_for([&] { return impostor->log().find("retrying (rejection 2)") != std::string::npos; }, 10s));
  CHECK(impostor->running());
  CHECK_THAT(impostor->log(), Catch::Contains("a client token cannot register a device"));

  std::string output;
  CHECK(run_command({kKestrel, "query", "--tracker", tracker.address(), "--token-file", device_token}, output,
                    dir.file("q.out")) == 1);
  CHECK_THAT(output, Catch::Contains("a device token cannot lease"));
  CHECK(run_command({kKestrel, "profile", "--tracker", tracker.address(), "--key", "k", "--token-file", device_token,
                     "--op", "gemm", "--shape", "8x8x8", "--wait-ms", "3000"},
                    output, dir.file("p.out")) != 0);
  CHECK_THAT(output, Catch::Contains("a device token cannot lease"));
  auto summary = e2e::query(dir, tracker, {"--token-file", client_token});
  REQUIRE(e2e::device_count(summary) == 1);
  CHECK(summary.dump().find("\"good\"") != std::string::npos);
  CHECK(summary.dump().find("impostor") == std::string::npos);
  // Half a configuration is refused before anything listens.
  CHECK(run_command({kKestrel, "tracker", "--port", "0", "--device-token-file", device_token}, output,
                    dir.file("t.out")) == 2);
  CHECK_THAT(output, Catch::Contains("would leave the other role unauthenticated"));
}

TEST_CASE("TLS mismatches say what to change, and --tls-ca pins the tracker's certificate", "[security][transport]") {
  TempDir dir;
  std::string token = e2e::write_token(dir, "token", "transport-test-secret-0123456789");
  for (const char* name : {"tracker", "other"}) {
    std::string out;
    REQUIRE(run_command({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                         "-nodes", "-days", "30", "-subj", "/CN=kestrel-tracker", "-keyout",
                         dir.file(std::string(name) + ".key"), "-out", dir.file(std::string(name) + ".pem")},
                        out, dir.file("openssl.out")) == 0);
  }
  TrackerProcess tracker(dir, {"--host", "127.0.0.1", "--token-file", token, "--tls-cert", dir.file("tracker.pem"),
                               "--tls-key", dir.file("tracker.key")});
  std::string output;
  CHECK(run_command({kKestrel, "query", "--tracker", tracker.address(), "--token-file", token, "--no-tls"}, output,
                    dir.file("q1")) == 1);
  CHECK_THAT(output, Catch::Contains("the tracker requires TLS: drop --no-tls"));

  auto pinned = e2e::start_device(dir, tracker, "k", "pinned", {"--token-file", token, "--tls-ca", dir.file("tracker.pem")});
  REQUIRE(wait_for([&] { return e2e::device_count(e2e::query(dir, tracker, {"--token-file", token})) == 1; }));
  // A certificate --tls-ca does not vouch for may be a party on the path: the device
  // refuses to talk to it and keeps trying (it would exit for good only on a rejection
  // the tracker it trusts sent).
  auto misled = e2e::start_device(dir, tracker, "k", "misled", {"--token-file", token, "--tls-ca", dir.file("other.pem")});
  CHECK(wait_for([&] { return misled->log().find("retrying (rejection 2)") != std::string::npos; }, 10s));
  CHECK(misled->running());
  CHECK_THAT(misled->log(), Catch::Contains("presented a certificate that --tls-ca does not vouch for"));
  // A wrong token through TLS that --tls-ca checked: that rejection is the tracker's own,
  // and it ends the device with status 3.
  std::string wrong = e2e::write_token(dir, "wrong-token", "not-the-tracker-secret-0123456789");
  auto rejected = e2e::start_device(dir, tracker, "k", "rejected", {"--token-file", wrong, "--tls-ca", dir.file("tracker.pem")});
  auto code = rejected->wait_exit(10s);
  REQUIRE(code);
  CHECK(*code == 3);
  CHECK_THAT(rejected->log(), Catch::Contains("wrong token"));
  CHECK(rejected->log().find("not authenticated") == std::string::npos);

  TrackerProcess plain(dir, {"--host", "127.0.0.1", "--token-file", token, "--no-tls"}, 0, "plain.log");
  CHECK(run_command({kKestrel, "query", "--tracker", plain.address(), "--token-file", token}, output, dir.file("q2")) == 1);
  CHECK_THAT(output, Catch::Contains("pass --no-tls here too"));
  CHECK(wait_for([&] { return plain.process->log().find("the peer speaks TLS but this tracker runs with --no-tls") !=
                              std::string::npos; }));
}

TEST_CASE("a pre-auth flood of large frame headers leaves the tracker small and a client gets a device within 1 s",
          "[security][transport]") {
  TempDir dir;
  TrackerProcess tracker(dir, {"--host", "127.0.0.1"});
  auto device = e2e::start_device(dir, tracker, "k", "busy");
  REQUIRE(wait_for([&] { return e2e::device_count(e2e::query(dir, tracker)) == 1; }));
  const std::size_t idle_rss = rss_kib(tracker.process->pid());

  asio::io_context io;
  std::vector<rpc::tcp::socket> flood;
  std::vector<std::uint8_t> bytes(4 + 512, 0);
  const std::uint32_t announced = 64u << 20;
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<std::uint8_t>(announced >> (8 * i));
  for (int i = 0; i < 128; ++i) {
    flood.emplace_back(io);
    flood.back().connect({asio::ip::address_v4::loopback(), tracker.port});
    asio::write(flood.back(), asio::buffer(bytes));
  }
  std::this_thread::sleep_for(500ms);
  const std::size_t rss = rss_kib(tracker.process->pid());
  INFO("tracker RSS " << rss << " KiB under the flood, " << idle_rss << " KiB before");
  CHECK(rss > 0);
  CHECK(rss < 200 * 1024);
  CHECK(rss - std::min(rss, idle_rss) < 32 * 1024);  // 128 announced 64 MiB frames cost next to nothing

  std::chrono::steady_clock::duration took{};
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        auto start = std::chrono::steady_clock::now();
        rpc::Endpoint endpoint{"127.0.0.1", tracker.port};
        rpc::ClientOptions options;
        auto client = co_await rpc::TrackerClient::connect(endpoint, options);
        rpc::RequestOptions request;
        request.timeout = 5s;
        auto lease = co_await client->request("k", request);
        took = std::chrono::steady_clock::now() - start;
        co_await client->release(lease.id);
        client->close();
      },
      [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  INFO("time to a device " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  CHECK(took < 1s);
  CHECK(rss_kib(tracker.process->pid()) < 200 * 1024);
  CHECK_THAT(tracker.process->log(), Catch::Contains("before authentication"));
}

}  // namespace kestrel::test
