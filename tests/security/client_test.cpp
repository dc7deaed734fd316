// Security regression tests (issue 15), through real processes and sockets: the client
// side. A disk that fills up in the middle of a tuning session (finding 9), SIGTERM to a
// session in the middle of a long batch, and the read-only commands on a database in a
// read-only directory (finding 10). The disk and the directory are made in a mount
// namespace of their own (`unshare -rm`: a user namespace too, so root is not needed): a
// tmpfs of 160 KiB, and a read-only bind mount (root ignores permission bits, not a
// read-only mount).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kestrel/records/records.h"
#include "kestrel/records/sqlite_records.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

// Mount namespaces are what these tests are made of: without them (no user namespaces on
// this kernel, no unshare) they cannot run, and say so (ctest: skipped).
void require_mount_namespaces() {
  if (std::system("unshare -rm true > /dev/null 2>&1") != 0) {
    WARN("skipped: cannot create a user and mount namespace here (unshare -rm true failed)");
    std::_Exit(77);
  }
}

// Kills the whole process group of a process started with new_group, whatever it left
// running (a shell's children), when the test ends.
struct GroupGuard {
  Process& process;
  ~GroupGuard() {
    if (process.running()) process.signal_group(SIGKILL);
    process.wait_exit(5s);
  }
};

// A tuning session on the tracker's key `key`: a small gemm, many trials (the disk fills
// long before they are done), batches of 4 after the default.
std::vector<std::string> tune_args(const TrackerProcess& tracker, const std::string& key, const std::string& db) {
  return {"tune",       "--tracker", tracker.address(), "--key",   key,       "--op",       "gemm",
          "--shape",    "48x40x32",  "--trials",        "300",     "--batch", "4",          "--db",
          db,           "--repeat",  "2",               "--min-repeat-ms", "2", "--final-top", "0",
          "--vendors",  "none",      "--seed",          "3",       "--wait-ms", "10000"};
}

// The tracker's view of one device: "free", "busy", or "" when it is not registered.
std::string device_state(const TempDir& dir, const TrackerProcess& tracker, const std::string& name) {
  nlohmann::json summary = query(dir, tracker);
  if (!summary.is_object()) return "";
  for (const auto& d : summary["devices"]) {
    if (d["info"]["name"] == name) return d["state"].get<std::string>();
  }
  return "";
}

std::size_t records_in(const std::string& db) {
  if (::access(db.c_str(), F_OK) != 0) return 0;
  try {
    return records::open_records(db, records::OpenMode::existing)->count();
  } catch (const records::RecordsError&) {
    return 0;
  }
}

records::Record a_record(const std::string& config, double cost) {
  records::Record r;
  r.op = "gemm";
  r.workload = {{"K", 32}, {"M", 48}, {"N", 40}};
  r.target = *kestrel::ops::TargetId::parse("x86_64-linux-gnu");
  r.device_class = {"readonly-key", "test cpu", "x86_64-linux-gnu|test cpu|2"};
  r.device = "d1";
  r.config = ops::parse_pairs(config);
  r.status = kernel::Status::ok;
  r.round_seconds = {cost, cost};
  r.cost = cost;
  r.gflops = 2.0 * 48 * 40 * 32 / cost / 1e9;
  r.session = "s1";
  r.time_unix_ms = 1700000000000;
  return r;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

TEST_CASE("a disk that fills up mid-session ends kestrel tune with a clear error, frees its device and keeps "
          "every committed record",
          "[security][client]") {
  require_mount_namespaces();
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "full-disk", "fd1");
  REQUIRE(test::wait_for([&] { return device_state(dir, tracker, "fd1") == "free"; }));

  // kestrel tune records into a 160 KiB tmpfs of its own; when it has exited, the shell
  // copies what the tmpfs holds (the database and its write-ahead log) out of it.
  std::string disk = dir.file("disk");
  std::string saved = dir.file("saved");
  REQUIRE(::mkdir(disk.c_str(), 0755) == 0);
  REQUIRE(::mkdir(saved.c_str(), 0755) == 0);
  std::string command = "mount -t tmpfs -o size=160k kestrel-full " + shell_quote(disk) + " || exit 99; " +
                        shell_quote(kKestrel);
  for (const auto& a : tune_args(tracker, "full-disk", disk + "/t.db")) command += " " + shell_quote(a);
  command += "; rc=$?; cp " + shell_quote(disk) + "/t.db* " + shell_quote(saved) + "/; exit $rc";
  auto started = std::chrono::steady_clock::now();
  Process tune({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", command}, dir.file("tune.log"), /*new_group=*/true);
  GroupGuard guard{tune};

  // Before the fix the session hung here for good (the failed write was dropped and the
  // measurement loop polled every 2 ms), its device leased.
  auto code = tune.wait_exit(120s);
  auto took = std::chrono::steady_clock::now() - started;
  INFO(tune.log());
  REQUIRE(code);
  CHECK(*code != 99);  // the tmpfs was mounted
  CHECK(*code != 0);
  CHECK_THAT(tune.log(), Catch::Contains("kestrel tune: records database") &&
                             Catch::Contains("database or disk is full"));
  CHECK(took < 100s);

  // The device is free for the next client at once.
  CHECK(test::wait_for([&] { return device_state(dir, tracker, "fd1") == "free"; }, 5s));

  // Every record committed before the disk filled is there and readable.
  std::string db = saved + "/t.db";
  std::size_t kept = records_in(db);
  CHECK(kept >= 2);
  auto records = records::open_records(db, records::OpenMode::existing);
  std::size_t ok = 0;
  for (const auto& b : records->best()) ok += b.trials;
  CHECK(ok == kept);  // every record parses and belongs to the one task
}

TEST_CASE("the first SIGTERM ends a tuning session in the middle of a long batch at once and frees its device",
          "[security][client]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "term", "t1");
  REQUIRE(test::wait_for([&] { return device_state(dir, tracker, "t1") == "free"; }));

  // Each candidate takes about 4 s on the device (8 rounds of 500 ms): after the default
  // (a batch of its own), a batch of 16 takes a minute.
  std::string db = dir.file("term.db");
  std::vector<std::string> argv = {kKestrel, "tune",     "--tracker",  tracker.address(), "--key", "term", "--op",
                                   "gemm",   "--shape",  "64x64x64",   "--trials",        "64",    "--batch", "16",
                                   "--db",   db,         "--repeat",   "8",               "--min-repeat-ms", "500",
                                   "--timeout-ms", "60000", "--final-top", "0", "--vendors", "none", "--seed", "5"};
  Process tune(argv, dir.file("tune.log"));
  REQUIRE(test::wait_for([&] { return records_in(db) >= 1 || !tune.running(); }, 90s));
  INFO(tune.log());
  REQUIRE(tune.running());
  std::this_thread::sleep_for(1500ms);  // the batch of 16 is compiled and running
  REQUIRE(device_state(dir, tracker, "t1") == "busy");
  std::size_t before = records_in(db);

  tune.signal(SIGTERM);
  auto sent = std::chrono::steady_clock::now();
  // Before the fix the first SIGTERM only asked to stop after the batch in flight.
  auto code = tune.wait_exit(15s);
  auto took = std::chrono::steady_clock::now() - sent;
  REQUIRE(code);
  CHECK(*code == 143);
  CHECK(took < 10s);
  CHECK_THAT(tune.log(), Catch::Contains("terminated by SIGTERM") && Catch::Contains(db));
  CHECK(test::wait_for([&] { return device_state(dir, tracker, "t1") == "free"; }, 5s));
  // Nothing committed was lost, and the abandoned batch's candidates were not recorded as
  // lost with their device (a rerun measures them).
  CHECK(records_in(db) >= before);
  auto records = records::open_records(db, records::OpenMode::existing);
  for (const auto& r : records->all()) CHECK(r.status != kernel::Status::device_lost);
}

TEST_CASE("kestrel best and kestrel records export read a database in a read-only directory",
          "[security][client]") {
  require_mount_namespaces();
  TempDir dir;
  std::string ro = dir.file("ro");
  REQUIRE(::mkdir(ro.c_str(), 0755) == 0);
  std::string db = ro + "/t.db";
  {
    records::SqliteRecords records(db);  // WAL mode, as kestrel tune writes it
    records.add(a_record("mr=4,nr=8", 2e-5));
    records.add(a_record("mr=2,nr=16", 3e-5));
  }
  REQUIRE(::access((db + "-wal").c_str(), F_OK) != 0);  // closed cleanly: the log is gone

  // The directory is mounted read-only (EROFS even for root) in a namespace of its own.
  auto in_read_only_dir = [&](const std::vector<std::string>& args, const std::string& log) {
    std::string command = "mount --bind " + shell_quote(ro) + " " + shell_quote(ro) + " && mount -o remount,ro,bind " +
                          shell_quote(ro) + " " + shell_quote(ro) + " || exit 99; touch " + shell_quote(ro + "/probe") +
                          " 2>/dev/null && exit 98; exec " + shell_quote(kKestrel);
    for (const auto& a : args) command += " " + shell_quote(a);
    std::string output;
    int code = test::run_command({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", command}, output, dir.file(log));
    return std::make_pair(code, output);
  };

  auto [best_code, best] = in_read_only_dir({"best", "--db", db, "--json"}, "best.out");
  INFO(best);
  REQUIRE(best_code == 0);
  auto parsed = nlohmann::json::parse(best.substr(std::min(best.find('['), best.size())), nullptr, false);
  REQUIRE(parsed.is_array());
  REQUIRE(parsed.size() == 1);
  CHECK(parsed[0]["config"] == "mr=4,nr=8");
  CHECK(parsed[0]["trials"] == 2);

  auto [export_code, exported] = in_read_only_dir({"records", "export", "--db", db}, "export.out");
  INFO(exported);
  REQUIRE(export_code == 0);
  std::size_t lines = 0;
  for (char c : exported) lines += c == '\n' ? 1 : 0;
  CHECK(lines == 2);
  CHECK_THAT(exported, Catch::Contains("\"config\":\"mr=2,nr=16\""));

  // Nothing was created beside the database, and it still opens for writing.
  CHECK(::access((db + "-wal").c_str(), F_OK) != 0);
  CHECK(::access((db + "-shm").c_str(), F_OK) != 0);
  CHECK(records::SqliteRecords(db).count() == 2);
}
