// Compile on the host, measure on a device, through real `kestrel tracker` and
// `kestrel-device` processes: ops pass the reference check; bad kernels get their
// status while the device keeps serving; a lost device's candidates move elsewhere.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kestrel/host/compiler.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/base/log.h"
#include "support/async.h"
#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

const std::string kFixtures = KESTREL_FIXTURE_SRC_DIR;

// `kestrel profile ... --json` against a tracker; the parsed output and exit code.
struct Profile {
  int code = -1;
  nlohmann::json json;
  std::string output;
};

Profile profile(const TempDir& dir, const TrackerProcess& tracker, const std::string& key,
                std::vector<std::string> extra) {
  std::vector<std::string> argv = {kKestrel, "profile", "--tracker", tracker.address(), "--key", key, "--json",
                                   "--repeat", "3", "--min-repeat-ms", "10"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Profile p;
  p.code = test::run_command(argv, p.output, dir.file("profile.out"));
  auto brace = p.output.find('{');
  if (brace != std::string::npos) p.json = nlohmann::json::parse(p.output.substr(brace), nullptr, false);
  return p;
}

// Copies a fixture kernel next to a spec for `kestrel profile --kernel`.
std::string user_kernel(const TempDir& dir, const std::string& fixture, std::int64_t n = 4096) {
  std::filesystem::copy_file(kFixtures + "/" + fixture + ".c", dir.file(fixture + ".c"),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(kFixtures + "/add_ref.c", dir.file("add_ref.c"),
                             std::filesystem::copy_options::overwrite_existing);
  nlohmann::json spec = {{"args", {{{"elements", n}}, {{"elements", n}}, {{"elements", n}, {"output", true}}}},
                         {"reference", "add_ref.c"},
                         {"flops", n},
                         {"tolerance", 1e-6}};
  std::ofstream(dir.file("add.json")) << spec.dump();
  return dir.file(fixture + ".c");
}

double median_s(const Profile& p) { return p.json.value("median_s", 0.0); }

}  // namespace

TEST_CASE("gemm and conv2d measured on a real device pass the reference check", "[e2e][measure]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "cpu", "bench-box");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));

  Profile gemm = profile(dir, tracker, "cpu", {"--op", "gemm", "--shape", "M=100,N=70,K=33"});
  INFO(gemm.output);
  REQUIRE(gemm.code == 0);
  CHECK(gemm.json["status"] == "ok");
  CHECK(gemm.json["device"] == "bench-box");
  CHECK(gemm.json["target"].get<std::string>().rfind("x86_64-linux-gnu", 0) == 0);
  CHECK(gemm.json["gflops"].get<double>() > 0);
  CHECK(gemm.json["round_seconds"].size() == 3);

  Profile conv = profile(dir, tracker, "cpu",
                         {"--op", "conv2d", "--shape", "N=1,C=8,H=15,W=17,K=12,R=3,S=3,pad=1,stride=2"});
  INFO(conv.output);
  REQUIRE(conv.code == 0);
  CHECK(conv.json["status"] == "ok");
  CHECK(conv.json["max_error"].get<double>() < 1e-3);
}

TEST_CASE("bad kernels each get their status and the device keeps serving", "[e2e][measure][bad-input]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "cpu", "sturdy");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  std::string spec = dir.file("add.json");

  auto run_kernel = [&](const std::string& fixture, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--kernel", user_kernel(dir, fixture), "--spec", spec};
    args.insert(args.end(), extra.begin(), extra.end());
    return profile(dir, tracker, "cpu", args);
  };
  auto good = [&] {
    Profile p = run_kernel("add");
    INFO(p.output);
    CHECK(p.json["status"] == "ok");
  };

  good();
  {
    std::ofstream(dir.file("broken.c")) << "#include \"kestrel/kernel/abi.h\"\nKESTREL_KERNEL(s, a, n) { return nope; }\n";
    Profile p = profile(dir, tracker, "cpu", {"--kernel", dir.file("broken.c"), "--spec", spec});
    INFO(p.output);
    CHECK(p.code == 1);
    CHECK(p.json["status"] == "host compile error");
    CHECK_THAT(p.json["message"].get<std::string>(), Catch::Contains("broken.c:2"));
  }
  {
    Profile p = run_kernel("segfault");
    CHECK(p.json["status"] == "runtime error");
    CHECK_THAT(p.json["message"].get<std::string>(), Catch::Contains("SIGSEGV"));
  }
  good();
  {
    Profile p = run_kernel("hang", {"--timeout-ms", "800"});
    CHECK(p.json["status"] == "run timeout");
  }
  good();
  {
    Profile p = run_kernel("garbage");
    CHECK(p.json["status"] == "wrong answer");
    CHECK(p.json["max_error"].get<double>() > 0.01);
  }
  {
    Profile p = profile(dir, tracker, "cpu", {"--op", "gemm", "--shape", "64x64x64", "--config", "mr=16,nr=64,vec=1"});
    CHECK(p.json["status"] == "instantiation error");
    CHECK_THAT(p.json["message"].get<std::string>(), Catch::Contains("accumulators"));
  }
  {
    Profile p = profile(dir, tracker, "cpu", {"--op", "gemm", "--shape", "64x64x64", "--target", "aarch64-linux-gnu"});
    CHECK(p.json["status"] == "device load error");
    CHECK_THAT(p.json["message"].get<std::string>(), Catch::Contains("built for aarch64"));
  }
  {
    std::string output;
    CHECK(test::run_command({kKestrel, "profile", "--tracker", tracker.address(), "--key", "cpu", "--op", "matmul",
                             "--shape", "1x1x1"},
                            output, dir.file("o")) == 2);
    CHECK_THAT(output, Catch::Contains("unknown op 'matmul'"));
    CHECK(test::run_command({kKestrel, "profile", "--tracker", tracker.address(), "--key", "cpu", "--op", "gemm",
                             "--shape", "8x8x8", "--target", "mips-linux-gnu"},
                            output, dir.file("o")) == 2);
    CHECK_THAT(output, Catch::Contains("unsupported target"));
  }
  good();
  // The same runtime process served everything.
  CHECK(device->running());
  CHECK_THAT(device->log(), Catch::Contains("registered with"));
  auto summary = query(dir, tracker);
  REQUIRE(summary["devices"].size() == 1);
  CHECK(summary["devices"][0]["info"]["name"] == "sturdy");
}

TEST_CASE("a deliberately slow gemm configuration measures slower than the default", "[e2e][measure]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "cpu", "timer");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }));
  std::vector<std::string> shape = {"--op", "gemm", "--shape", "256x256x256", "--threads", "1"};
  Profile fast = profile(dir, tracker, "cpu", shape);
  shape.insert(shape.end(), {"--config", "mr=1,nr=1,vec=1,unroll=1,mc=8,nc=16,kc=16,pack_b=0"});
  Profile slow = profile(dir, tracker, "cpu", shape);
  INFO(fast.output << slow.output);
  REQUIRE(fast.json["status"] == "ok");
  REQUIRE(slow.json["status"] == "ok");
  CHECK(median_s(slow) > 2 * median_s(fast));
}

TEST_CASE("candidates of a device lost mid-batch are measured on another device", "[e2e][measure]") {
  log::set_level(log::Level::warn);
  TempDir dir;
  TrackerProcess tracker(dir);
  std::map<std::string, std::unique_ptr<Process>> devices;
  devices["first"] = start_device(dir, tracker, "pool", "first");
  devices["second"] = start_device(dir, tracker, "pool", "second");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 2; }));

  // A correct but slow kernel (~10 ms per call on 100k elements), compiled in-process.
  host::Compiler compiler({1});
  auto load = [&](const std::string& name) {
    std::ifstream in(kFixtures + "/" + name + ".c");
    std::stringstream text;
    text << in.rdbuf();
    ops::KernelSource source;
    source.file_name = name + ".c";
    source.text = text.str();
    host::CompileResult r = compiler.compile({source, host::parse_target("x86_64-linux-gnu")});
    REQUIRE(r.ok);
    return host::Module{r.hash, std::make_shared<std::vector<std::uint8_t>>(r.shared_object)};
  };
  host::Workload workload;
  const std::int64_t n = 100'000;
  workload.args = {{n, false}, {n, false}, {n, true}};
  workload.reference = load("add_ref");
  workload.tolerance = 1e-6;
  host::Module slow = load("slow_add");
  std::vector<host::Candidate> candidates;
  for (std::uint64_t id = 1; id <= 8; ++id) candidates.push_back({id, slow, ""});
  rpc::MeasureSettings options;
  options.number = 1;
  options.repeat = 3;
  options.threads = 1;

  std::vector<host::Measurement> results;
  std::string victim;
  asio::io_context io;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    rpc::ClientOptions client_options;
    client_options.name = "e2e-measure";
    auto client = co_await rpc::TrackerClient::connect(rpc::parse_endpoint(tracker.address()), client_options);
    host::MeasureClientOptions pool_options;
    pool_options.key = "pool";
    pool_options.devices = 2;
    pool_options.request_timeout = 5000ms;
    host::MeasureClient measurer(client, pool_options);
    co_await measurer.open();
    REQUIRE(co_await test::eventually([&] { return measurer.leases().size() == 2; }));
    results = co_await measurer.measure(workload, candidates, options, [&](const host::Measurement& m) {
      if (victim.empty()) {
        victim = m.device == "first" ? "second" : "first";  // kill the other one, mid-batch
        devices[victim]->signal(SIGKILL);
      }
    });
    co_await measurer.close();
    client->close();
  }, {}, 60s);

  REQUIRE(results.size() == 8);
  std::string survivor = victim == "first" ? "second" : "first";
  int moved = 0;
  for (const auto& r : results) {
    INFO("candidate " << r.id << " on " << r.device << ": " << host::to_string(r.status) << " " << r.message);
    CHECK(r.status == host::Status::ok);
    if (r.attempts == 2) {
      ++moved;
      CHECK(r.device == survivor);
    }
  }
  CHECK(moved >= 1);
}
