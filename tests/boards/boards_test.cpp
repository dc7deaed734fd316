// Boards on their own networks: each device runtime runs in its own network namespace,
// reaching the tracker over a veth link with addresses of its own, as separate machines
// would. Needs root (skipped with the reason otherwise, exit code 77).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

#include "kestrel/rpc/log.h"
#include "kestrel/rpc/tracker_client.h"
#include "kestrel/tuner/records.h"
#include "support/async.h"
#include "support/kestrel_processes.h"
#include "support/netns.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;
using test::NetNs;

namespace {

[[noreturn]] void skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

void require_netns() {
  std::string why;
  if (!NetNs::available(why)) skip(why);
}

// A runtime inside `ns`, reaching the tracker at the host side of its veth link.
std::unique_ptr<Process> start_board(const TempDir& dir, const NetNs& ns, std::vector<std::string> runtime,
                                     std::uint16_t port, const std::string& key, const std::string& name,
                                     const std::string& token) {
  std::vector<std::string> argv = ns.exec_prefix();
  argv.insert(argv.end(), runtime.begin(), runtime.end());
  std::vector<std::string> options = {"--tracker", ns.host_ip() + ":" + std::to_string(port), "--key", key,
                                      "--name", name, "--token-file", token, "--max-backoff-ms", "300"};
  argv.insert(argv.end(), options.begin(), options.end());
  return std::make_unique<Process>(argv, dir.file("board-" + name + ".log"));
}

std::vector<std::string> tune_args(const std::string& db, const std::string& tracker, const std::string& token,
                                   const std::string& key, const std::string& shape, int trials, int devices) {
  return {kKestrel,  "tune",       "--op",     "gemm",      "--shape", shape,  "--trials", std::to_string(trials),
          "--batch", "3",          "--db",     db,          "--repeat", "2",   "--min-repeat-ms", "2",
          "--final-top", "1",      "--tracker", tracker,    "--key",   key,    "--token-file", token,
          "--devices", std::to_string(devices), "--json"};
}

std::size_t record_count(const std::string& db) {
  try {
    return tuner::RecordsDb(db).count();
  } catch (const tuner::RecordsError&) {
    return 0;
  }
}

}  // namespace

TEST_CASE("boards on their own networks run concurrent sessions per key and survive losing one",
          "[boards][netns]") {
  require_netns();
  TempDir dir;
  std::string token = write_token(dir, "token", "boards-pool-secret-0123456789");
  TrackerProcess tracker(dir, {"--host", "0.0.0.0", "--token-file", token});
  NetNs a(1), b(2), c(3);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  auto rpi4_a = start_board(dir, a, {kDevice}, tracker.port, "rpi4", "rpi4-a", token);
  auto rpi4_b = start_board(dir, b, {kDevice}, tracker.port, "rpi4", "rpi4-b", token);
  auto rpi3_a = start_board(dir, c, {kDevice}, tracker.port, "rpi3", "rpi3-a", token);
  nlohmann::json pool;
  bool registered =
      test::wait_for([&] { return device_count(pool = query(dir, tracker, {"--token-file", token})) == 3; }, 20s);
  INFO("boards:\n" << rpi4_a->log() << rpi4_b->log() << rpi3_a->log() << "tracker:\n" << tracker.process->log());
  REQUIRE(registered);
  std::set<std::string> addresses;
  for (const auto& d : pool["devices"]) {
    std::string address = d["address"];
    addresses.insert(address.substr(0, address.find(':')));
  }
  CHECK(addresses == std::set<std::string>{"10.213.1.2", "10.213.2.2", "10.213.3.2"});  // each from its own network

  // One session per key, at the same time, recording into one database.
  std::string db = dir.file("pool.db");
  Process rpi4(tune_args(db, tracker.address(), token, "rpi4", "48x40x32", 18, 2), dir.file("tune-rpi4.log"));
  Process rpi3(tune_args(db, tracker.address(), token, "rpi3", "40x32x24", 9, 1), dir.file("tune-rpi3.log"));
  // Lose one rpi4 board in the middle of its session.
  REQUIRE(test::wait_for([&] { return record_count(db) >= 6 || !rpi4.running(); }, 120s));
  rpi4_a->signal(SIGKILL);

  auto rpi4_code = rpi4.wait_exit(180s);
  auto rpi3_code = rpi3.wait_exit(180s);
  INFO(rpi4.log() << rpi3.log());
  REQUIRE(rpi4_code);
  REQUIRE(rpi3_code);
  CHECK(*rpi4_code == 0);
  CHECK(*rpi3_code == 0);

  tuner::RecordsDb records(db);
  std::size_t rpi4_trials = 0, rpi3_trials = 0;
  std::set<std::string> rpi4_devices;
  for (const auto& best : records.best()) {
    for (const auto& r : records.find(best.op, best.workload, best.target)) {
      CHECK(r.target.rfind("x86_64-linux-gnu", 0) == 0);
      CHECK(r.status != "");  // every candidate ended with a real status
      if (r.device_key == "rpi4") {
        CHECK(r.workload == "K=32,M=48,N=40");
        if (!r.final_measurement) ++rpi4_trials;
        if (!r.device.empty()) rpi4_devices.insert(r.device);
        CHECK((r.device.empty() || r.device == "rpi4-a" || r.device == "rpi4-b"));
      } else {
        CHECK(r.device_key == "rpi3");
        CHECK(r.workload == "K=24,M=40,N=32");
        CHECK((r.device.empty() || r.device == "rpi3-a"));
        if (!r.final_measurement) ++rpi3_trials;
      }
    }
  }
  CHECK(rpi4_trials == 18);
  CHECK(rpi3_trials == 9);
  CHECK(rpi4_devices.contains("rpi4-b"));  // the session finished on the surviving board
}

TEST_CASE("emulated aarch64 and armv7 boards register over their own links and answer sessions",
          "[boards][netns][qemu]") {
  require_netns();
  std::string root = KESTREL_SOURCE_DIR;
  struct Board {
    std::string triple, emulator, sysroot, key;
  };
  std::vector<Board> boards = {{"aarch64-linux-gnu", "qemu-aarch64-static", "/usr/aarch64-linux-gnu", "rpi4"},
                               {"armv7a-linux-gnueabihf", "qemu-arm-static", "/usr/arm-linux-gnueabihf", "rpi3"}};
  for (const auto& b : boards) {
    std::string binary = root + "/build-device-" + b.triple + "/kestrel-device";
    if (::access(binary.c_str(), X_OK) != 0) {
      skip("no cross-built runtime at " + binary + " (scripts/setup-cross.sh && scripts/build-device.sh " + b.triple +
           ")");
    }
    if (std::system(("command -v " + b.emulator + " > /dev/null").c_str()) != 0) skip(b.emulator + " not installed");
  }
  log::set_level(log::Level::warn);
  TempDir dir;
  std::string token = write_token(dir, "token", "emulated-pool-secret-012345");
  TrackerProcess tracker(dir, {"--host", "0.0.0.0", "--token-file", token});
  NetNs n1(11), n2(12);
  REQUIRE((n1.ok() && n2.ok()));
  std::vector<std::unique_ptr<Process>> running;
  running.push_back(start_board(dir, n1,
                                {"/usr/bin/" + boards[0].emulator, "-L", boards[0].sysroot,
                                 root + "/build-device-" + boards[0].triple + "/kestrel-device"},
                                tracker.port, boards[0].key, "emulated-a64", token));
  running.push_back(start_board(dir, n2,
                                {"/usr/bin/" + boards[1].emulator, "-L", boards[1].sysroot,
                                 root + "/build-device-" + boards[1].triple + "/kestrel-device"},
                                tracker.port, boards[1].key, "emulated-v7", token));
  nlohmann::json pool;
  INFO(running[0]->log() << running[1]->log());
  REQUIRE(test::wait_for([&] { return device_count(pool = query(dir, tracker, {"--token-file", token})) == 2; }, 60s));
  std::map<std::string, std::string> triple_of;
  for (const auto& d : pool["devices"]) triple_of[d["key"]] = d["info"]["triple"];
  CHECK(triple_of["rpi4"] == "aarch64-linux-gnu");
  CHECK(triple_of["rpi3"] == "armv7a-linux-gnueabihf");

  asio::io_context io;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    rpc::ClientOptions options;
    options.name = "boards-test";
    options.token = rpc::Token::from_file(token);
    auto client = co_await rpc::TrackerClient::connect(rpc::parse_endpoint(tracker.address()), options);
    for (const std::string key : {"rpi4", "rpi3"}) {
      rpc::Lease lease = co_await client->request(key, {0, 10'000ms});
      CHECK(co_await client->ping(lease.id, 20'000ms) > 0ns);
      rpc::DeviceInfo info = co_await client->device_info(lease.id, 20'000ms);
      CHECK(info.arch == (key == "rpi4" ? "aarch64" : "armv7l"));
      co_await client->release(lease.id);
    }
    client->close();
  }, {}, 120s);
}
