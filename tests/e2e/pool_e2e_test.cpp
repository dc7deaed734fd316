// Multi-process tests on 127.0.0.1 with the real `kestrel tracker`, `kestrel-device`
// and `kestrel query` binaries. The test process itself acts as a client where it
// needs to hold leases (through the same TrackerClient library `kestrel` uses).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/tracker_client.h"
#include "support/async.h"
#include "support/process.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace std::chrono_literals;
using test::Process;
using test::TempDir;
using namespace kestrel::test::e2e;

namespace {

}  // namespace

TEST_CASE("a tracker and three devices under two keys show up in kestrel query", "[e2e]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto a = start_device(dir, tracker, "rpi4", "rpi4-a");
  auto b = start_device(dir, tracker, "rpi4", "rpi4-b");
  auto c = start_device(dir, tracker, "x86", "x86-a");
  nlohmann::json summary;
  REQUIRE(test::wait_for([&] { return device_count(summary = query(dir, tracker)) == 3; }));
  REQUIRE(summary["keys"].size() == 2);
  CHECK(summary["keys"][0]["key"] == "rpi4");
  CHECK(summary["keys"][0]["free"] == 2);
  CHECK(summary["keys"][1]["key"] == "x86");
  CHECK(summary["devices"][0]["info"]["name"] == "rpi4-a");
  CHECK(summary["devices"][0]["state"] == "free");
  CHECK(summary["devices"][0]["name"] == "rpi4-a");
  CHECK(summary["devices"][0]["lease_holder"].is_null());  // free: present, null
  CHECK(summary["devices"][0]["info"]["cores"].get<int>() >= 1);
  CHECK(summary["devices"][2]["info"]["triple"] == "x86_64-linux-gnu");

  std::string table;
  REQUIRE(test::run_command({kKestrel, "query", "--tracker", tracker.address()}, table, dir.file("table.out")) == 0);
  CHECK_THAT(table, Catch::Contains("KEY") && Catch::Contains("rpi4-b") && Catch::Contains("x86-a"));

  // Clean shutdown on SIGTERM.
  tracker.process->signal(SIGTERM);
  auto code = tracker.process->wait_exit(5s);
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK_THAT(tracker.process->log(), Catch::Contains("stopped"));
}

TEST_CASE("a killed device is removed within the bound and its lease fails with device lost", "[e2e]") {
  log::set_level(log::Level::warn);
  TempDir dir;
  // 200 ms heartbeats, 3 misses: a silent device is dropped within 800 ms.
  TrackerProcess tracker(dir, {"--heartbeat-ms", "200", "--heartbeat-misses", "3"});
  const auto bound = 800ms;
  auto victim = start_device(dir, tracker, "k", "victim");
  auto frozen = start_device(dir, tracker, "f", "frozen");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 2; }));

  asio::io_context io;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    rpc::ClientOptions options;
    options.name = "e2e-holder";
    auto client = co_await rpc::TrackerClient::connect(rpc::parse_endpoint(tracker.address()), options);

    // SIGKILL: the kernel closes the socket, the tracker notices at once.
    rpc::Lease lease = co_await client->request("k", {0, 2000ms});
    CHECK(co_await client->ping(lease.id) > 0ns);
    victim->signal(SIGKILL);
    auto start = std::chrono::steady_clock::now();
    try {
      co_await client->receive(lease.id, 5000ms);
      FAIL("lease survived a killed device");
    } catch (const rpc::RpcError& e) {
      CHECK(e.code() == rpc::ErrorCode::device_lost);
      CHECK_THAT(e.what(), Catch::Contains("device 'victim'"));
    }
    CHECK(std::chrono::steady_clock::now() - start <= bound);

    // SIGSTOP: the process is alive and its socket open, but silent; only the
    // heartbeats can tell. It must be dropped within the documented bound.
    rpc::Lease frozen_lease = co_await client->request("f", {0, 2000ms});
    frozen->signal(SIGSTOP);
    start = std::chrono::steady_clock::now();
    try {
      co_await client->receive(frozen_lease.id, 5000ms);
      FAIL("lease survived a frozen device");
    } catch (const rpc::RpcError& e) {
      CHECK(e.code() == rpc::ErrorCode::device_lost);
      CHECK_THAT(e.what(), Catch::Contains("no heartbeat"));
    }
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took <= bound + 150ms);
    client->close();
  });
  frozen->signal(SIGCONT);
  CHECK(test::wait_for([&] {
    auto s = query(dir, tracker);
    for (const auto& d : s["devices"]) {
      if (d["info"]["name"] == "victim") return false;
    }
    return s.is_object();
  }));
  CHECK_THAT(tracker.process->log(), Catch::Contains("no heartbeat for"));
}

TEST_CASE("devices come back on their own when the tracker restarts", "[e2e]") {
  TempDir dir;
  auto tracker = std::make_unique<TrackerProcess>(dir);
  std::uint16_t port = tracker->port;
  auto a = start_device(dir, *tracker, "rpi4", "a");
  auto b = start_device(dir, *tracker, "rpi4", "b");
  auto c = start_device(dir, *tracker, "x86", "c");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, *tracker)) == 3; }));

  tracker->process->signal(SIGTERM);
  REQUIRE(tracker->process->wait_exit(5s));
  tracker.reset();
  std::this_thread::sleep_for(500ms);  // devices are now retrying with backoff
  tracker = std::make_unique<TrackerProcess>(dir, std::vector<std::string>{}, port, "tracker2.log");
  REQUIRE(tracker->port == port);
  CHECK(test::wait_for([&] { return device_count(query(dir, *tracker)) == 3; }, 10s));
  CHECK(a->running());
  CHECK_THAT(a->log(), Catch::Contains("reconnecting"));
}

TEST_CASE("priorities are honoured under contention across processes", "[e2e]") {
  log::set_level(log::Level::warn);
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "k", "contended");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  std::vector<std::string> served;
  asio::io_context io;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    auto endpoint = rpc::parse_endpoint(tracker.address());
    auto connect = [&](const std::string& name) {
      rpc::ClientOptions options;
      options.name = name;
      return rpc::TrackerClient::connect(endpoint, options);
    };
    auto holder = co_await connect("holder");
    rpc::Lease first = co_await holder->request("k");
    std::vector<std::pair<std::string, int>> waiting = {{"batch", -5}, {"normal", 0}, {"urgent", 100}, {"normal-2", 0}};
    std::vector<std::shared_ptr<rpc::TrackerClient>> clients;
    int done = 0;
    for (auto& [name, priority] : waiting) {
      auto c = co_await connect(name);
      clients.push_back(c);
      kestrel::RequestId id = c->submit("k", {priority, 0ms});
      // The summary is answered after the request on the same connection is queued.
      co_await c->summary();
      asio::co_spawn(io, [&, c, id, who = name]() -> rpc::awaitable<void> {
        rpc::Lease lease = co_await c->wait_grant(id);
        served.push_back(who);
        co_await c->ping(lease.id);
        co_await c->release(lease.id);
        ++done;
      }, asio::detached);
    }
    auto s = co_await holder->summary();
    CHECK(s.keys.at(0).queued == 4);
    co_await holder->release(first.id);
    CHECK(co_await test::eventually([&] { return done == 4; }, 10s));
    holder->close();
    for (auto& c : clients) c->close();
  });
  CHECK(served == std::vector<std::string>{"urgent", "normal", "normal-2", "batch"});
}

TEST_CASE("tokens: wrong or missing tokens are refused with clear errors", "[e2e][auth]") {
  TempDir dir;
  std::string good = write_token(dir, "token", "e2e-pool-secret-0123456789");
  std::string bad = write_token(dir, "bad-token", "some-other-secret-abcdefgh");
  TrackerProcess tracker(dir, {"--host", "127.0.0.1", "--token-file", good});
  auto trusted = start_device(dir, tracker, "k", "trusted", {"--token-file", good});
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker, {"--token-file", good})) == 1; }));

  // Refused; without --tls-ca the device cannot tell the refusal from a forged one, so it
  // says so and keeps trying (docs/security.md).
  auto rogue = start_device(dir, tracker, "k", "rogue", {"--token-file", bad});
  CHECK(test::wait_for([&] { return rogue->log().find("retrying (rejection 2)") != std::string::npos; }, 10s));
  CHECK(rogue->running());
  CHECK_THAT(rogue->log(), Catch::Contains("wrong token"));

  std::string output;
  CHECK(test::run_command({kKestrel, "query", "--tracker", tracker.address()}, output, dir.file("q1")) == 1);
  CHECK_THAT(output, Catch::Contains("--token-file"));
  CHECK(device_count(query(dir, tracker, {"--token-file", good})) == 1);
  CHECK_THAT(tracker.process->log(), Catch::Contains("rejected connection"));
}

TEST_CASE("garbage on the tracker port is logged and refused; the pool keeps working", "[e2e][bad-input]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "k", "steady");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  {
    asio::io_context io;
    rpc::tcp::socket socket(io);
    socket.connect({asio::ip::address_v4::loopback(), tracker.port});
    std::string http = "GET / HTTP/1.1\r\nHost: tracker\r\n\r\n";
    asio::write(socket, asio::buffer(http));
    std::array<char, 256> buffer;
    std::error_code ec;
    while (!ec) socket.read_some(asio::buffer(buffer), ec);  // the tracker closes it
  }
  CHECK(test::wait_for([&] { return tracker.process->log().find("oversized frame") != std::string::npos; }));
  CHECK(tracker.process->running());
  CHECK(device_count(query(dir, tracker)) == 1);
}

TEST_CASE("command-line errors are clear", "[e2e][cli]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "tracker", "--host", "0.0.0.0", "--port", "0"}, output, dir.file("o1")) == 2);
  CHECK_THAT(output, Catch::Contains("without a token"));
  CHECK(test::run_command({kKestrel, "tracker", "--port", "http"}, output, dir.file("o2")) == 2);
  CHECK_THAT(output, Catch::Contains("expects an integer"));
  CHECK(test::run_command({kKestrel, "frobnicate"}, output, dir.file("o3")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown command 'frobnicate'"));
  CHECK(test::run_command({kDevice, "--key", "k"}, output, dir.file("o4")) == 2);
  CHECK_THAT(output, Catch::Contains("--tracker HOST:PORT is required"));
  CHECK(test::run_command({kDevice, "--tracker", "nohost", "--key", "k"}, output, dir.file("o5")) == 2);
  CHECK_THAT(output, Catch::Contains("expected HOST:PORT"));
  CHECK(test::run_command({kKestrel, "query", "--tracker", "127.0.0.1:1"}, output, dir.file("o6")) == 1);
  CHECK_THAT(output, Catch::Contains("cannot connect to tracker 127.0.0.1:1"));
  CHECK(test::run_command({kKestrel, "tracker", "--help"}, output, dir.file("o7")) == 0);
  CHECK_THAT(output, Catch::Contains("heartbeat-ms * (heartbeat-misses + 1)"));
  CHECK(test::run_command({kDevice, "--print-info"}, output, dir.file("o8")) == 0);
  CHECK_THAT(output, Catch::Contains("triple:") && Catch::Contains("cores:"));
}

TEST_CASE("typos get a suggestion, options given twice are refused, both binaries have --version", "[e2e][cli]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "tuen"}, output, dir.file("o1")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown command 'tuen' (did you mean 'tune'?)"));
  CHECK(test::run_command({kKestrel, "tune", "--trails", "5", "--shape", "8x8x8"}, output, dir.file("o2")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown option '--trails' (did you mean '--trials'?)"));
  CHECK(test::run_command({kKestrel, "profile", "--op", "gem", "--shape", "8x8x8"}, output, dir.file("o3")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown op 'gem' (did you mean 'gemm'?"));
  CHECK(test::run_command({kKestrel, "tune", "--trials", "5", "--trials", "6", "--shape", "8x8x8"}, output,
                          dir.file("o4")) == 2);
  CHECK_THAT(output, Catch::Contains("option '--trials' given twice"));
  CHECK(test::run_command({kDevice, "--trcker", "127.0.0.1:1", "--key", "k"}, output, dir.file("o5")) == 2);
  CHECK_THAT(output, Catch::Contains("unknown option '--trcker' (did you mean '--tracker'?)"));
  CHECK(test::run_command({kDevice, "--key", "a", "--key", "b"}, output, dir.file("o6")) == 2);
  CHECK_THAT(output, Catch::Contains("option '--key' given twice"));
  CHECK(test::run_command({kKestrel, "--version"}, output, dir.file("o7")) == 0);
  CHECK_THAT(output, Catch::StartsWith("kestrel ") && Catch::Contains("protocol"));
  CHECK(test::run_command({kKestrel, "tune", "--version"}, output, dir.file("o8")) == 0);
  CHECK_THAT(output, Catch::StartsWith("kestrel tune "));
  CHECK(test::run_command({kDevice, "--version"}, output, dir.file("o9")) == 0);
  CHECK_THAT(output, Catch::StartsWith("kestrel-device "));
  // Every option of a command is declared once: --help of each command succeeds.
  for (const char* command : {"tracker", "query", "ops", "profile", "tune", "best", "records", "bench"}) {
    INFO(command);
    CHECK(test::run_command({kKestrel, command, "--help"}, output, dir.file(std::string("h-") + command)) == 0);
  }
}

TEST_CASE("kestrel ops lists each op once, with the knob space of each backend variant", "[e2e][cli]") {
  TempDir dir;
  std::string output;
  REQUIRE(test::run_command({kKestrel, "ops"}, output, dir.file("o1")) == 0);
  auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto at = output.find(needle); at != std::string::npos; at = output.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("\ngemm: ") + (output.rfind("gemm: ", 0) == 0 ? 1 : 0) == 1);
  CHECK(count("\nconv2d: ") == 1);
  REQUIRE(test::run_command({kKestrel, "ops", "--op", "gemm", "--shape", "64x64x64"}, output, dir.file("o2")) == 0);
  CHECK_THAT(output, Catch::Contains("knobs (cpu)") && Catch::Contains("knobs (cuda, opencl)"));
}
