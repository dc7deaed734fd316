// Security regression tests (issues 15 and 30), through real processes and sockets: hostile
// kernels against the worker sandbox and the runtime-side check (finding 8), a kernel
// hunting for the device token (finding 11), and the per-lease, content-addressed module
// store (finding 7). A real `kestrel tracker`, a real
// `kestrel-device` and real `kestrel profile` clients (or an rpc::DeviceSession).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kestrel/rpc/sha256.h"
#include "kestrel/base/log.h"
#include "kestrel/rpc/device_session.h"
#include "kestrel/rpc/tracker_client.h"
#include "support/async.h"
#include "support/fixtures.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

const std::string kFixtures = KESTREL_FIXTURE_SRC_DIR;

struct Profile {
  int code = -1;
  nlohmann::json json;
  std::string output;
  std::string status() const { return json.is_object() ? json.value("status", std::string("no status")) : "no json"; }
};

// `kestrel profile --kernel FILE --spec add.json --json` on the device with key "cpu".
Profile profile(const TempDir& dir, const TrackerProcess& tracker, const std::string& kernel,
                std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kKestrel, "profile", "--tracker", tracker.address(), "--key", "cpu", "--json",
                                   "--repeat", "2", "--min-repeat-ms", "5", "--timeout-ms", "20000",
                                   "--kernel", kernel, "--spec", dir.file("add.json")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Profile p;
  p.code = test::run_command(argv, p.output, dir.file("profile.out"));
  auto brace = p.output.find('{');
  if (brace != std::string::npos) p.json = nlohmann::json::parse(p.output.substr(brace), nullptr, false);
  return p;
}

// The add spec (c = a + b over 4096 floats, checked against add_ref.c) beside `dir`'s kernels.
void write_spec(const TempDir& dir) {
  std::filesystem::copy_file(kFixtures + "/add_ref.c", dir.file("add_ref.c"),
                             std::filesystem::copy_options::overwrite_existing);
  const std::int64_t n = 4096;
  nlohmann::json spec = {{"args", {{{"elements", n}}, {{"elements", n}}, {{"elements", n}, {"output", true}}}},
                         {"reference", "add_ref.c"},
                         {"flops", n},
                         {"tolerance", 1e-6}};
  std::ofstream(dir.file("add.json")) << spec.dump();
}

// hostile.c with one act (HOSTILE_*), and where it should leave a file (or which file it
// should read), and the first characters of the secret it hunts for.
std::string hostile_kernel(const TempDir& dir, const std::string& mode, const std::string& marker = "",
                           const std::string& needle = "") {
  std::string path = dir.file("hostile_" + mode + ".c");
  std::ofstream out(path);
  out << "#define HOSTILE_MODE HOSTILE_" << mode << "\n";
  if (!marker.empty()) out << "#define HOSTILE_MARKER \"" << marker << "\"\n";
  if (!needle.empty()) out << "#define HOSTILE_NEEDLE \"" << needle << "\"\n";
  out << test::read_text(kFixtures + "/hostile.c");
  return path;
}

std::size_t registrations(Process& device) {
  std::string log = device.log();
  std::size_t count = 0;
  for (auto at = log.find("registered with"); at != std::string::npos; at = log.find("registered with", at + 1)) ++count;
  return count;
}

using rpc::sha256_hex;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A tracker and one CPU device, registered.
struct Rig {
  TempDir dir;
  TrackerProcess tracker{dir};
  std::unique_ptr<Process> device = start_device(dir, tracker, "cpu", "target");
  Rig() {
    write_spec(dir);
    REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  }
  // The device is up, registered once since it started, and measures a good kernel.
  void check_unharmed() {
    INFO(device->log());
    REQUIRE(device->running());
    CHECK(device_count(query(dir, tracker)) == 1);
    CHECK(registrations(*device) == 1);
    Profile good = profile(dir, tracker, hostile_kernel(dir, "NONE"));
    INFO(good.output);
    CHECK(good.status() == "ok");
  }
};

}  // namespace

TEST_CASE("a kernel writing junk to every fd leaves the device registered, 5 runs of 5", "[security][sandbox]") {
  Rig rig;
  const std::string kernel = hostile_kernel(rig.dir, "JUNK_FDS");
  for (int run = 1; run <= 5; ++run) {
    INFO("run " << run);
    Profile p = profile(rig.dir, rig.tracker, kernel);
    INFO(p.output);
    // The junk reached the worker's own result socket at most: the candidate fails.
    CHECK(p.status() == "runtime error");
    REQUIRE(rig.device->running());
    INFO(rig.device->log());
    CHECK(registrations(*rig.device) == 1);
    CHECK(device_count(query(rig.dir, rig.tracker)) == 1);
  }
  rig.check_unharmed();
}

TEST_CASE("a kernel that zeroes its outputs and every copy of the answer it can reach is a wrong answer",
          "[security][sandbox]") {
  Rig rig;
  for (int run = 0; run < 2; ++run) {
    Profile p = profile(rig.dir, rig.tracker, hostile_kernel(rig.dir, "FORGE"));
    INFO(p.output);
    CHECK(p.status() == "wrong answer");
    CHECK(p.json.value("max_error", 0.0) > 0.01);
  }
  rig.check_unharmed();
}

TEST_CASE("kernels that open sockets, fork, exec, write files, map 1 TiB or signal the runtime fail and leave the "
          "device unharmed",
          "[security][sandbox]") {
  Rig rig;
  const std::string marker = rig.dir.file("pwned");
  for (std::string mode : {"SOCKET", "FORK", "EXEC", "WRITE_FILE", "MEMORY", "KILL_PARENT"}) {
    INFO(mode);
    Profile p = profile(rig.dir, rig.tracker, hostile_kernel(rig.dir, mode, marker));
    INFO(p.output);
    // The act's system call failed (the kernel says so with its code 7): neither done nor
    // a worker that died or was replaced doing it.
    CHECK(p.status() == "runtime error");
    CHECK(p.json.value("message", std::string()) == "kernel returned error code 7");
    CHECK_FALSE(exists(marker));
    std::remove(marker.c_str());
    REQUIRE(rig.device->running());
    CHECK(registrations(*rig.device) == 1);
  }
  // The device said at start which protections its workers get.
  CHECK_THAT(rig.device->log(), Catch::Contains("worker sandbox: inherited fds closed, rlimits, no_new_privs"));
  rig.check_unharmed();
}

TEST_CASE("what a kernel says reaches the client bounded and printable", "[security][sandbox]") {
  Rig rig;
  Profile p = profile(rig.dir, rig.tracker, hostile_kernel(rig.dir, "LOUD"));
  INFO(p.output);
  CHECK(p.status() == "runtime error");
  const std::string message = p.json.value("message", std::string());
  CHECK_THAT(message, Catch::StartsWith("the vendor library ") && Catch::Contains("red"));
  CHECK(message.size() <= 8195);  // 8 KiB and "..."
  CHECK_THAT(message, Catch::EndsWith("..."));
  CHECK(std::none_of(message.begin(), message.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && c != '\n' && c != '\t') || byte >= 0x7f;  // no escapes, no control bytes
  }));
  rig.check_unharmed();
}

TEST_CASE("a kernel holding only a client's lease cannot find the device token in its memory, the runtime's "
          "environment and command line, or the token file",
          "[security][sandbox]") {
  // The device as root (its workers drop to nobody) and as an unprivileged user (its
  // workers keep that user: the token file is theirs too), with the token also in the
  // runtime's environment, as an operator's service file might put it.
  const bool root = ::geteuid() == 0;
  std::vector<std::string> users = {"device user"};
  if (root && exists("/usr/bin/setpriv")) users.push_back("nobody");
  for (const std::string& user : users) {
    INFO("device runs as " << (user == "nobody" ? "nobody" : root ? "root" : "this test's user"));
    TempDir dir;
    ::chmod(dir.path().c_str(), 0711);  // the unprivileged device reaches its files
    write_spec(dir);
    const std::string needle = "kq7Zr2Xw";
    const std::string secret = needle + "Tm4pB9vLcH3sYd8NfQ1gJ6kR0eUa5WzE";
    const std::string device_token = write_token(dir, "device.token", secret);
    const std::string client_token = write_token(dir, "client.token", "client-token-for-tests-0123456789");
    if (user == "nobody") REQUIRE(::chown(device_token.c_str(), 65534, 65534) == 0);
    TrackerProcess tracker(dir, {"--host", "127.0.0.1", "--device-token-file", device_token, "--client-token-file",
                                 client_token});
    std::vector<std::string> argv = {"/usr/bin/env", "KESTREL_OPERATOR_COPY=" + secret};
    if (user == "nobody") {
      argv.insert(argv.end(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"});
    }
    const std::vector<std::string> device_args = {kDevice, "--tracker", tracker.address(), "--key", "cpu", "--name",
                                                  "holder", "--max-backoff-ms", "300", "--token-file", device_token};
    argv.insert(argv.end(), device_args.begin(), device_args.end());
    Process device(argv, dir.file("device.log"));
    const std::vector<std::string> as_client = {"--token-file", client_token};
    REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker, as_client)) == 1; }));

    Profile p = profile(dir, tracker, hostile_kernel(dir, "STEAL_TOKEN", device_token, needle), as_client);
    INFO(p.output);
    INFO(device.log());
    const std::string message = p.json.value("message", std::string());
    // The kernel ran and said what it found, through the error path the runtime passes on.
    CHECK(p.status() == "runtime error");
    CHECK_THAT(message, Catch::Contains("stolen: mem="));
    CHECK_THAT(message, Catch::Contains(" file="));
    // ... which never holds the secret, in part or whole.
    CHECK(message.find(secret.substr(needle.size(), 12)) == std::string::npos);
    CHECK(p.output.find(secret.substr(needle.size(), 12)) == std::string::npos);
    // The runtime keeps serving: a good kernel measures, the device registered once.
    REQUIRE(device.running());
    CHECK(registrations(device) == 1);
    Profile good = profile(dir, tracker, hostile_kernel(dir, "NONE"), as_client);
    INFO(good.output);
    CHECK(good.status() == "ok");
  }
}

TEST_CASE("a module under a hash that is not its content is refused, and lease B cannot run lease A's modules",
          "[security][modules]") {
  log::set_level(log::Level::warn);
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "cpu", "store");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  const std::vector<std::uint8_t> ref = test::read_fixture("add_ref");
  const std::vector<std::uint8_t> add = test::read_fixture("add");
  const std::string ref_hash = sha256_hex(ref);
  const std::string add_hash = sha256_hex(add);

  asio::io_context io;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    rpc::ClientOptions options;
    options.name = "lease-a";
    auto a = co_await rpc::TrackerClient::connect(rpc::parse_endpoint(tracker.address()), options);
    rpc::RequestOptions request{0, 5000ms};
    rpc::Lease lease_a = co_await a->request("cpu", request);
    {
      rpc::DeviceSession session(a, lease_a, 20s);
      // add.so's bytes under add_ref.so's name: what a poisoner would plant.
      std::vector<rpc::ModuleImage> planted = {{ref_hash, add}};
      std::vector<std::string> refused = co_await session.upload(planted);
      REQUIRE(refused.size() == 1);
      CHECK_THAT(refused[0], Catch::Contains("not the SHA-256"));
      const std::vector<std::string> ref_only = {ref_hash};
      std::vector<bool> present = co_await session.query_modules(ref_only);
      CHECK(present == std::vector<bool>{false});

      std::vector<rpc::ModuleImage> honest = {{ref_hash, ref}, {add_hash, add}};
      refused = co_await session.upload(honest);
      CHECK(refused == std::vector<std::string>{"", ""});
      rpc::BatchRequest batch = test::add_batch_request(4096, ref_hash);
      batch.candidates = {{1, add_hash, ""}};
      std::vector<rpc::CandidateResult> results;
      const std::function<void(rpc::CandidateResult)> collect = [&](rpc::CandidateResult r) {
        results.push_back(std::move(r));
      };
      co_await session.measure(batch, collect);
      REQUIRE(results.size() == 1);
      CHECK(results[0].status == kernel::Status::ok);
    }
    co_await a->release(lease_a.id);
    a->close();

    options.name = "lease-b";
    auto b = co_await rpc::TrackerClient::connect(rpc::parse_endpoint(tracker.address()), options);
    rpc::Lease lease_b = co_await b->request("cpu", request);
    {
      rpc::DeviceSession session(b, lease_b, 20s);
      const std::vector<std::string> both = {ref_hash, add_hash};
      std::vector<bool> present = co_await session.query_modules(both);
      CHECK(present == std::vector<bool>{false, false});
      rpc::BatchRequest batch = test::add_batch_request(4096, "");
      batch.candidates = {{2, add_hash, ""}};
      std::vector<rpc::CandidateResult> results;
      const std::function<void(rpc::CandidateResult)> collect = [&](rpc::CandidateResult r) {
        results.push_back(std::move(r));
      };
      co_await session.measure(batch, collect);
      REQUIRE(results.size() == 1);
      CHECK(results[0].status == kernel::Status::device_load_error);
      CHECK_THAT(results[0].message, Catch::Contains("not on this device"));
      rpc::BatchRequest checked = test::add_batch_request(4096, ref_hash);
      checked.candidates = {{3, add_hash, ""}};
      results.clear();
      rpc::BatchDone done = co_await session.measure(checked, collect);
      CHECK(done.refused);
    }
    co_await b->release(lease_b.id);
    b->close();
  }, {}, 60s);
  CHECK(device->running());
}
