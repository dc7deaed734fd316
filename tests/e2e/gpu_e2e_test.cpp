// Tuning on GPUs as users run it: a real `kestrel tracker`, a real `kestrel-device` that
// registers its GPUs, `kestrel query` showing them, and `kestrel tune` compiling for
// the GPU target and measuring through the device's worker. OpenCL runs on PoCL in CI;
// the CUDA tests run where a GPU exists and are skipped (exit 77) elsewhere.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;

namespace {

nlohmann::json parse_json(const std::string& output) {
  auto brace = output.find('{');
  if (brace == std::string::npos) return nullptr;
  return nlohmann::json::parse(output.substr(brace), nullptr, false);
}

// A device registered on a fresh tracker, and its entry in `kestrel query --json`.
// The device's OpenCL program cache lives in the test's folder: every run builds its
// programs as a fresh device does (PoCL keeps a cache of its own).
struct Pool {
  TempDir dir;
  TrackerProcess tracker{dir};
  std::unique_ptr<test::Process> device;
  nlohmann::json info;
  Pool() {
    ::setenv("KESTREL_OPENCL_CACHE", dir.file("opencl-cache").c_str(), 1);
    device = start_device(dir, tracker, "gpu", "gpu-0");
    nlohmann::json summary;
    REQUIRE(test::wait_for([&] {
      summary = query(dir, tracker);
      return device_count(summary) == 1;
    }));
    info = summary["devices"][0]["info"];
  }
};

// Runs a command to completion within `limit`: the OpenCL driver compiles every new
// program on the device (about a second each on PoCL on a loaded 2-core machine).
int run_slow_command(std::vector<std::string> argv, std::string& output, const std::string& scratch_file,
                     std::chrono::seconds limit = std::chrono::seconds(150)) {
  std::remove(scratch_file.c_str());
  test::Process p(std::move(argv), scratch_file);
  auto code = p.wait_exit(limit);
  output = p.log();
  INFO(output);
  REQUIRE(code);
  return *code;
}

std::vector<std::string> tune_args(const Pool& pool, const std::string& target, const std::string& db) {
  return {kKestrel, "tune", "--tracker", pool.tracker.address(), "--key", "gpu", "--target", target,
          "--op", "gemm", "--shape", "48x40x32", "--trials", "8", "--batch", "4", "--db", db,
          "--repeat", "2", "--min-repeat-ms", "2", "--final-top", "2", "--final-repeat", "2", "--json"};
}

}  // namespace

TEST_CASE("opencl: the device registers its OpenCL device and kestrel query shows it", "[e2e][gpu][opencl]") {
  Pool pool;
  INFO(pool.info.dump(2));
  REQUIRE(pool.info["gpus"].is_array());
  bool found = false;
  for (const auto& gpu : pool.info["gpus"]) {
    if (gpu["backend"] != "opencl") continue;
    found = true;
    CHECK_THAT(gpu["version"].get<std::string>(), Catch::StartsWith("OpenCL C "));
    CHECK(gpu["compute_units"].get<unsigned>() >= 1);
    CHECK(gpu["max_threads_per_group"].get<unsigned>() >= 1);
    CHECK(gpu["memory_bytes"].get<std::uint64_t>() > 0);
  }
  CHECK(found);
  std::string table;
  REQUIRE(test::run_command({kKestrel, "query", "--tracker", pool.tracker.address()}, table, pool.dir.file("q.out")) == 0);
  CHECK_THAT(table, Catch::Contains("BACKEND") && Catch::Contains("opencl"));
}

TEST_CASE("opencl: kestrel tune tunes a small gemm on the device's OpenCL driver", "[e2e][gpu][opencl]") {
  Pool pool;
  std::string db = pool.dir.file("t.db");
  std::string output;
  int code = run_slow_command(tune_args(pool, "opencl", db), output, pool.dir.file("tune.out"));
  INFO(output);
  REQUIRE(code == 0);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK(result["target"] == "opencl");
  CHECK(result["trials"] == 8);
  CHECK(result["stop_reason"] == "trials");
  // Every configuration of the space either runs correctly or is rejected before
  // compiling; none is a wrong answer or a driver failure.
  for (const auto& [status, count] : result["statuses"].items()) {
    INFO(status);
    CHECK((status == "ok" || status == "instantiation error"));
  }
  CHECK(result["statuses"]["ok"].get<int>() >= 4);
  // The two best, re-measured beside the default (one entry when it is one of them).
  std::size_t finalists = 0;
  for (const auto& f : result["final"]) finalists += f["is_default"].get<bool>() ? 0 : 1;
  REQUIRE(result["final"].size() == finalists + 1);
  REQUIRE(finalists >= 1);
  REQUIRE(finalists <= 2);
  CHECK(result["final"][0]["status"] == "ok");
  CHECK(result["final"][0]["gflops"].get<double>() > 0);
  CHECK(result["default_gflops"].get<double>() > 0);
  // GPU knobs, not the CPU ones.
  CHECK_THAT(result["final"][0]["config"].get<std::string>(), Catch::Contains("bm=") && Catch::Contains("stage="));

  std::string best;
  REQUIRE(test::run_command({kKestrel, "best", "--db", db}, best, pool.dir.file("best.out")) == 0);
  CHECK_THAT(best, Catch::Contains("K=32,M=48,N=40") && Catch::Contains("opencl"));
}

TEST_CASE("opencl: a launch is checked against the device's registered work-group limit",
          "[e2e][gpu][opencl]") {
  Pool pool;
  // 32 x 32 = 1024 work-items: within every knob constraint; rejected only where the
  // device's registered limit is lower. Where it is not, it must run correctly.
  std::string output;
  int code = run_slow_command({kKestrel, "profile", "--tracker", pool.tracker.address(), "--key", "gpu", "--target",
                                "opencl", "--op", "gemm", "--shape", "64x64x16", "--config",
                                "bm=32,bn=32,tm=1,tn=1,vec=1,stage=1,bk=4", "--repeat", "1", "--min-repeat-ms", "1",
                                "--json"},
                               output, pool.dir.file("profile.out"));
  INFO(output);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  unsigned limit = 0;
  for (const auto& gpu : pool.info["gpus"]) {
    if (gpu["backend"] == "opencl") limit = gpu["max_threads_per_group"].get<unsigned>();
  }
  if (limit < 1024) {
    CHECK(result["status"] == "instantiation error");
    CHECK_THAT(result["message"].get<std::string>(), Catch::Contains("exceeds the device's limit"));
  } else {
    CHECK(code == 0);
    CHECK(result["status"] == "ok");
  }
}

TEST_CASE("no-cuda: --target cuda on a device without a CUDA GPU says why", "[e2e][gpu]") {
  Pool pool;
  std::string output;
  int code = test::run_command(tune_args(pool, "cuda", pool.dir.file("t.db")), output, pool.dir.file("tune.out"));
  INFO(output);
  CHECK(code != 0);
  CHECK_THAT(output, Catch::Contains("cannot run target cuda") && Catch::Contains("no CUDA"));
}

TEST_CASE("cuda: --target cuda takes the sm_XX of the device's GPU and kestrel tune tunes gemm with CUDA",
          "[e2e][gpu][cuda]") {
  Pool pool;
  std::string output;
  int code = run_slow_command(tune_args(pool, "cuda", pool.dir.file("t.db")), output, pool.dir.file("tune.out"));
  INFO(output);
  REQUIRE(code == 0);
  auto result = parse_json(output);
  REQUIRE(result.is_object());
  CHECK_THAT(result["target"].get<std::string>(), Catch::StartsWith("cuda sm_"));
  for (const auto& [status, count] : result["statuses"].items()) {
    INFO(status);
    CHECK((status == "ok" || status == "instantiation error"));
  }
  CHECK(result["statuses"]["ok"].get<int>() >= 4);
  CHECK(result["final"][0]["gflops"].get<double>() > 0);
  std::string gpu_arch;
  for (const auto& gpu : pool.info["gpus"]) {
    if (gpu["backend"] == "cuda" && gpu["index"] == 0) gpu_arch = gpu["version"].get<std::string>();
  }
  CHECK(result["target"] == "cuda " + gpu_arch);

  // PTX for the same GPU: JIT-compiled by the driver.
  std::string ptx_arch = "compute_" + gpu_arch.substr(3);
  code = run_slow_command({kKestrel, "profile", "--tracker", pool.tracker.address(), "--key", "gpu", "--target",
                            "cuda:" + ptx_arch, "--op", "conv2d", "--shape", "C=16,H=14,W=14,K=32,R=3,S=3,pad=1",
                            "--repeat", "2", "--json"},
                           output, pool.dir.file("profile.out"));
  INFO(output);
  CHECK(code == 0);
  auto profile = parse_json(output);
  REQUIRE(profile.is_object());
  CHECK(profile["status"] == "ok");
}
