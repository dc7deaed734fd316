// Boards on their own networks: each device runtime runs in its own network namespace,
// reaching the tracker over a veth link with addresses of its own, as separate machines
// would. Needs root (skipped with the reason otherwise, exit code 77).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "kestrel/base/log.h"
#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
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

// One best() entry per (op, workload, target): best() has one per device class.
std::vector<records::Best> tasks_of(const records::RecordStore& records) {
  std::vector<records::Best> out;
  for (auto& b : records.best()) {
    bool seen = std::any_of(out.begin(), out.end(), [&](const records::Best& o) {
      return o.op == b.op && o.workload == b.workload && o.target == b.target;
    });
    if (!seen) out.push_back(std::move(b));
  }
  return out;
}

std::size_t record_count(const std::string& db) {
  try {
    return records::SqliteRecords(db).count();
  } catch (const records::RecordsError&) {
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

  records::SqliteRecords records(db);
  std::size_t rpi4_trials = 0, rpi3_trials = 0;
  std::set<std::string> rpi4_devices;
  for (const auto& best : tasks_of(records)) {
    for (const auto& r : records.find(best.op, best.workload, best.target)) {
      CHECK(r.target.triple == "x86_64-linux-gnu");
      CHECK(r.status <= kernel::Status::last);  // every candidate ended with a real status
      if (r.device_class.key == "rpi4") {
        CHECK(r.workload == ops::Params{{"K", 32}, {"M", 48}, {"N", 40}});
        if (!r.final_measurement) ++rpi4_trials;
        if (!r.device.empty()) rpi4_devices.insert(r.device);
        CHECK((r.device.empty() || r.device == "rpi4-a" || r.device == "rpi4-b"));
      } else {
        CHECK(r.device_class.key == "rpi3");
        CHECK(r.workload == ops::Params{{"K", 24}, {"M", 40}, {"N", 32}});
        CHECK((r.device.empty() || r.device == "rpi3-a"));
        if (!r.final_measurement) ++rpi3_trials;
      }
    }
  }
  CHECK(rpi4_trials == 18);
  CHECK(rpi3_trials == 9);
  CHECK(rpi4_devices.contains("rpi4-b"));  // the session finished on the surviving board
}

namespace {

// A cross-built board runtime under qemu user-mode emulation.
struct EmulatedBoard {
  std::string triple, qemu, loader, sysroot;
  std::string variant;  // "" (needs the board's libc) or "--static" (needs nothing: Android)

  std::string build_dir() const { return "build-device-" + triple + (variant.empty() ? "" : "-static"); }
  std::string binary() const { return std::string(KESTREL_SOURCE_DIR) + "/" + build_dir() + "/kestrel-device"; }
  // The board's loader and libc must come from one glibc build. With the multiarch libc
  // installed (libc6:arm64 / libc6:armhf, pulled in by scripts/setup-cross.sh) qemu uses
  // it as the board's root; only without it is the cross toolchain's sysroot given with
  // -L. Mixing the sysroot's ld.so with the multiarch libc.so.6 corrupts the loader's
  // lists and the first fork or thread spins forever.
  std::vector<std::string> command() const {
    std::vector<std::string> argv = {"/usr/bin/" + qemu};
    if (::access(loader.c_str(), R_OK) != 0) argv.insert(argv.end(), {"-L", sysroot});
    argv.push_back(binary());
    return argv;
  }
};

const EmulatedBoard kAarch64{"aarch64-linux-gnu", "qemu-aarch64-static", "/lib/ld-linux-aarch64.so.1",
                             "/usr/aarch64-linux-gnu", ""};
const EmulatedBoard kAarch64Static{"aarch64-linux-gnu", "qemu-aarch64-static", "/lib/ld-linux-aarch64.so.1",
                                   "/usr/aarch64-linux-gnu", "--static"};
const EmulatedBoard kArmv7{"armv7a-linux-gnueabihf", "qemu-arm-static", "/lib/ld-linux-armhf.so.3",
                           "/usr/arm-linux-gnueabihf", ""};
// Debian 12 has no libc6:riscv64: the cross toolchain's sysroot is always the board's root.
const EmulatedBoard kRiscv64{"riscv64-linux-gnu", "qemu-riscv64-static", "/lib/ld-linux-riscv64-lp64d.so.1",
                             "/usr/riscv64-linux-gnu", ""};

void require_emulation(const EmulatedBoard& b) {
  if (::access(b.binary().c_str(), X_OK) != 0) {
    skip("no cross-built runtime at " + b.binary() + " (scripts/setup-cross.sh && scripts/build-device.sh " + b.triple +
         (b.variant.empty() ? "" : " " + b.variant) + ")");
  }
  if (::access(("/usr/bin/" + b.qemu).c_str(), X_OK) != 0) skip(b.qemu + " not installed (scripts/setup-cross.sh)");
}

}  // namespace

// The heterogeneous pool of the boards issue: one tracker serving the local x86 device,
// two emulated aarch64 boards (rpi4: one linked against the board's glibc, one fully
// static as for Android) and one emulated armv7 board (rpi3), each board on its own network; a tuning session per key at the same time, into one database. In the
// middle the tracker restarts (boards and sessions reconnect and carry on), then one
// rpi4 board is killed (its session finishes on the other).
TEST_CASE("emulated aarch64 and armv7 boards tune beside the local device through a tracker restart and a lost board",
          "[boards][netns][qemu]") {
  require_netns();
  require_emulation(kAarch64);
  require_emulation(kAarch64Static);
  require_emulation(kArmv7);
  log::set_level(log::Level::warn);
  TempDir dir;
  std::string token = write_token(dir, "token", "emulated-pool-secret-012345");
  const std::vector<std::string> tracker_args = {"--host", "0.0.0.0", "--token-file", token};
  auto tracker = std::make_unique<TrackerProcess>(dir, tracker_args);
  const std::uint16_t port = tracker->port;
  NetNs n1(11), n2(12), n3(13);
  REQUIRE((n1.ok() && n2.ok() && n3.ok()));
  auto rpi4_a = start_board(dir, n1, kAarch64.command(), port, "rpi4", "rpi4-a", token);
  auto rpi4_b = start_board(dir, n2, kAarch64Static.command(), port, "rpi4", "rpi4-b", token);
  auto rpi3_a = start_board(dir, n3, kArmv7.command(), port, "rpi3", "rpi3-a", token);
  auto local = start_device(dir, *tracker, "local", "local-x86", {"--token-file", token});
  auto board_logs = [&] { return rpi4_a->log() + rpi4_b->log() + rpi3_a->log() + local->log(); };

  nlohmann::json pool;
  bool registered =
      test::wait_for([&] { return device_count(pool = query(dir, *tracker, {"--token-file", token})) == 4; }, 60s);
  INFO("devices:\n" << board_logs());
  REQUIRE(registered);
  std::map<std::string, std::string> triple_of, address_of;
  for (const auto& d : pool["devices"]) {
    triple_of[d["info"]["name"]] = d["info"]["triple"];
    std::string address = d["address"];
    address_of[d["info"]["name"]] = address.substr(0, address.find(':'));
  }
  CHECK(triple_of["rpi4-a"] == "aarch64-linux-gnu");
  CHECK(triple_of["rpi4-b"] == "aarch64-linux-gnu");
  CHECK(triple_of["rpi3-a"] == "armv7a-linux-gnueabihf");
  CHECK(triple_of["local-x86"] == "x86_64-linux-gnu");
  CHECK(address_of["rpi4-a"] == "10.213.11.2");
  CHECK(address_of["rpi3-a"] == "10.213.13.2");

  // One session per key, concurrently, into one database; the target comes from each
  // key's devices (--target auto, the default).
  std::string db = dir.file("pool.db");
  struct Session {
    std::string key, shape, workload;
    int trials, devices;
    std::string triple, device_a, device_b;
  };
  const std::vector<Session> sessions = {
      {"rpi4", "48x40x32", "K=32,M=48,N=40", 24, 2, "aarch64-linux-gnu", "rpi4-a", "rpi4-b"},
      {"rpi3", "40x32x24", "K=24,M=40,N=32", 9, 1, "armv7a-linux-gnueabihf", "rpi3-a", ""},
      {"local", "32x32x32", "K=32,M=32,N=32", 9, 1, "x86_64-linux-gnu", "local-x86", ""}};
  std::vector<std::unique_ptr<Process>> tunes;
  for (const auto& s : sessions) {
    auto argv = tune_args(db, tracker->address(), token, s.key, s.shape, s.trials, s.devices);
    argv.insert(argv.end(), {"--reconnect-ms", "60000"});
    tunes.push_back(std::make_unique<Process>(argv, dir.file("tune-" + s.key + ".log")));
  }
  auto all_logs = [&] {
    std::string out = board_logs();
    for (const auto& t : tunes) out += t->log();
    return out;
  };
  auto rpi4_running = [&] { return tunes[0]->running(); };

  // The tracker goes away in the middle of the sessions and comes back on its port.
  REQUIRE(test::wait_for([&] { return record_count(db) >= 6 || !rpi4_running(); }, 120s));
  tracker->process->signal(SIGTERM);
  REQUIRE(tracker->process->wait_exit(5s));
  std::this_thread::sleep_for(1s);
  tracker = std::make_unique<TrackerProcess>(dir, tracker_args, port, "tracker2.log");
  REQUIRE(tracker->port == port);
  CHECK(test::wait_for([&] { return device_count(query(dir, *tracker, {"--token-file", token})) == 4; }, 30s));

  // Then one rpi4 board dies mid-session.
  const std::size_t before_loss = record_count(db);
  REQUIRE(test::wait_for([&] { return record_count(db) >= before_loss + 3 || !rpi4_running(); }, 120s));
  CHECK(rpi4_running());
  rpi4_a->signal(SIGKILL);

  for (std::size_t i = 0; i < tunes.size(); ++i) {
    auto code = tunes[i]->wait_exit(240s);
    INFO(sessions[i].key << " session:\n" << all_logs());
    REQUIRE(code);
    CHECK(*code == 0);
  }

  records::SqliteRecords records(db);
  for (const auto& s : sessions) {
    INFO(s.key);
    std::size_t trials = 0, ok = 0;
    std::map<std::string, std::size_t> ok_on;
    for (const auto& best : tasks_of(records)) {
      for (const auto& r : records.find(best.op, best.workload, best.target)) {
        if (r.device_class.key != s.key) continue;
        CHECK(ops::format_params(r.workload) == s.workload);
        CHECK(r.target.triple == s.triple);  // compiled for the key's boards
        CHECK(r.status <= kernel::Status::last);
        CHECK((r.device.empty() || r.device == s.device_a || r.device == s.device_b));
        if (!r.final_measurement) ++trials;
        if (r.ok()) {
          ++ok;
          ++ok_on[r.device];
        }
      }
    }
    CHECK(trials == static_cast<std::size_t>(s.trials));
    CHECK(ok > 0);  // kernels really ran on the emulated boards
    // The session finished on the surviving board (for rpi4 the fully static runtime,
    // which loads kernel modules with no C library to bind them to).
    if (!s.device_b.empty()) CHECK(ok_on[s.device_b] > 0);
  }
}

// A riscv64 board (issue 29 part 4): the runtime cross-built for riscv64-linux-gnu, under
// qemu on its own network, registers with the triple the host compiles for, and a tuning
// session on its key compiles every candidate for riscv64 and measures kernels on it.
TEST_CASE("an emulated riscv64 board registers under its triple and tunes a gemm", "[boards][netns][qemu]") {
  require_netns();
  require_emulation(kRiscv64);
  log::set_level(log::Level::warn);
  TempDir dir;
  std::string token = write_token(dir, "token", "riscv64-board-secret-0123456");
  TrackerProcess tracker(dir, {"--host", "0.0.0.0", "--token-file", token});
  NetNs ns(14);
  REQUIRE(ns.ok());
  auto board = start_board(dir, ns, kRiscv64.command(), tracker.port, "vf2", "vf2-a", token);

  nlohmann::json pool;
  bool registered =
      test::wait_for([&] { return device_count(pool = query(dir, tracker, {"--token-file", token})) == 1; }, 60s);
  INFO("board:\n" << board->log());
  REQUIRE(registered);
  const auto& device = pool["devices"][0];
  CHECK(device["info"]["name"] == "vf2-a");
  CHECK(device["info"]["triple"] == "riscv64-linux-gnu");
  std::string address = device["address"];
  CHECK(address.substr(0, address.find(':')) == "10.213.14.2");

  std::string db = dir.file("vf2.db");
  Process tune(tune_args(db, tracker.address(), token, "vf2", "40x32x24", 9, 1), dir.file("tune-vf2.log"));
  auto code = tune.wait_exit(240s);
  INFO("tune:\n" << tune.log() << "board:\n" << board->log());
  REQUIRE(code);
  CHECK(*code == 0);

  records::SqliteRecords records(db);
  std::size_t trials = 0, ok = 0;
  for (const auto& best : tasks_of(records)) {
    for (const auto& r : records.find(best.op, best.workload, best.target)) {
      CHECK(r.device_class.key == "vf2");
      CHECK(ops::format_params(r.workload) == "K=24,M=40,N=32");
      CHECK(r.target.triple == "riscv64-linux-gnu");  // compiled for the board
      CHECK((r.device.empty() || r.device == "vf2-a"));
      if (!r.final_measurement) ++trials;
      if (r.ok()) ++ok;
    }
  }
  CHECK(trials == 9);
  CHECK(ok > 0);  // kernels really ran on the emulated riscv64 board
}
