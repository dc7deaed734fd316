// The exported library on emulated boards (aarch64, armv7): export for the triple, build
// tests/deploy/fixtures/export_board.c with the cross compiler against out/ (static
// libraries only), run it under qemu user-mode emulation and compare its outputs with the
// reference kernels run on this host. Skipped (exit 77) without the cross toolchain,
// qemu or the cross-built runtime (scripts/build-device.sh <triple>).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "deploy/export_util.h"
#include "kestrel/deploy/export.h"

namespace kestrel::deploy {

using model::ModelTask;
using model::Plan;

namespace {

namespace fs = std::filesystem;

// The fixture's board_input: the same floats on both sides.
std::vector<float> board_input(std::int64_t n, std::uint32_t seed) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint32_t x = seed * 2654435761u + 1u;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x >> 8) / 8388608.0f - 1.0f;
  }
  return out;
}

bool on_path(const std::string& tool) {
  return std::system(("command -v " + tool + " > /dev/null 2>&1").c_str()) == 0;
}

// Runs a shell command; its output (stdout and stderr) and exit status.
std::pair<int, std::string> shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "cannot run " + command};
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

void skip(const std::string& why) {
  std::cout << "skipped: " << why << "\n";
  std::exit(77);
}

// One call's lines from the program: "label rc=N which=..." then "v <hex>" per element.
struct Call {
  int rc = -1;
  std::string which;
  std::vector<float> values;
};

std::map<std::string, Call> parse_calls(const std::string& text) {
  std::map<std::string, Call> calls;
  std::istringstream in(text);
  std::string line;
  Call* current = nullptr;
  while (std::getline(in, line)) {
    if (line.starts_with("v ") && current) {
      current->values.push_back(std::strtof(line.c_str() + 2, nullptr));
    } else if (auto rc = line.find(" rc="); rc != std::string::npos) {
      current = &calls[line.substr(0, rc)];
      current->rc = std::atoi(line.c_str() + rc + 4);
      if (auto which = line.find(" which="); which != std::string::npos) current->which = line.substr(which + 7);
    }
  }
  return calls;
}

// A board: its cross compiler, emulator, and where its loader is (multiarch) or its sysroot.
struct Board {
  std::string triple, gcc, qemu, loader, sysroot;
};

void run_on_board(const Board& board) {
  const fs::path runtime = fs::path(KESTREL_SOURCE_DIR) / ("build-device-" + board.triple) / "device_runtime";
  if (!on_path(board.gcc)) skip(board.gcc + " is not installed (scripts/setup-cross.sh)");
  if (!on_path(board.qemu)) skip(board.qemu + " is not installed (scripts/setup-cross.sh)");
  if (!fs::exists(runtime / "libkestrel_rt.a"))
    skip("no " + board.triple + " libkestrel_rt.a in " + runtime.string() + " (scripts/build-device.sh " +
         board.triple + ")");

  test::Scratch scratch;
  const host::Target target = host::parse_target(board.triple);
  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& gemm = registry.get("gemm", ops::Backend::cpu);
  const ops::Op& softmax = registry.get("softmax", ops::Backend::cpu);
  const ops::Params tuned_params{{"M", 33}, {"N", 40}, {"K", 24}};

  auto records = records::open_records((scratch.path() / "tune.db").string());
  records::Record r;
  r.op = "gemm";
  r.workload = tuned_params;
  r.target = *ops::TargetId::parse(board.triple + " (a board cpu)");  // measured on a board with a CPU name
  r.device_class = {"board", "Board CPU", board.triple + "|Board CPU|4"};
  r.config = gemm.default_config(tuned_params, target.traits);
  r.round_seconds = {1e-3};
  r.cost = 1e-3;
  r.gflops = 2.5;
  records->add(r);

  Plan fixed;
  ModelTask t1;
  t1.op = &gemm;
  t1.params = tuned_params;
  ModelTask t2;
  t2.op = &softmax;
  t2.params = {{"rows", 9}, {"cols", 70}};
  ModelTask t3;
  t3.op = &gemm;
  t3.params = {{"M", 16}, {"N", 48}, {"K", 40}};
  t3.dynamic = {{"M", "seq", 1}};
  fixed.tasks = {t1, t2, t3};
  ExportOptions options;
  options.target = target;
  options.out_dir = (scratch.path() / "out").string();
  options.plans = {fixed};
  options.runtime_dir = runtime.string();
  host::Compiler compiler;
  const ExportReport report = export_library(*records, compiler, options);
  REQUIRE(report.runtime_copied);

  const fs::path out = options.out_dir;
  // Freestanding: nothing left for the board's loader to find (no libm, no libgcc helpers).
  const auto [listed, undefined] = shell("nm -u '" + (out / "libkestrel_kernels.so").string() + "'");
  CHECK(listed == 0);
  CHECK(undefined.empty());
  const fs::path program = scratch.path() / "board";
  const auto [built, build_log] =
      shell(board.gcc + " -std=c11 -O1 -Wall -Werror -I'" + out.string() + "' '" KESTREL_SOURCE_DIR
            "/tests/deploy/fixtures/export_board.c' '" + (out / "libkestrel_kernels.a").string() + "' '" +
            (out / "libkestrel_rt.a").string() + "' -lstdc++ -lpthread -ldl -lm -o '" + program.string() + "'");
  INFO(build_log);
  REQUIRE(built == 0);
  // The board's loader and libc must come from one glibc build: the multiarch libc6:arm64
  // when installed (qemu then finds it as the board's root), else the cross sysroot with -L
  // (mixing the two makes the first thread spin forever; see tests/boards).
  const std::string sysroot = ::access(board.loader.c_str(), R_OK) == 0 ? "" : "-L " + board.sysroot + " ";
  const auto [ran, output] = shell("timeout 300 " + board.qemu + " " + sysroot + "'" + program.string() + "'");
  INFO(output.substr(0, 2000));
  REQUIRE(ran == 0);  // 124: the program hung (timeout)
  const std::map<std::string, Call> calls = parse_calls(output);

  auto check_gemm = [&](const std::string& label, std::int64_t m, std::int64_t n, std::int64_t k) {
    INFO(label);
    REQUIRE(calls.count(label));
    const Call& call = calls.at(label);
    REQUIRE(call.rc == 0);
    const ops::Params p{{"M", m}, {"N", n}, {"K", k}};
    const auto want = test::reference_outputs(compiler, gemm, p, {board_input(m * k, 1), board_input(k * n, 2)});
    CHECK(test::outputs_match(gemm, p, {call.values}, want));
  };
  check_gemm("gemm", 33, 40, 24);
  CHECK(calls.at("gemm").which == "tuned " + ops::format_config(r.config));
  check_gemm("gemm-bucket", 21, 48, 40);
  CHECK(calls.at("gemm-bucket").which.starts_with("bucket seq=16 default "));
  {
    REQUIRE(calls.count("softmax"));
    const Call& call = calls.at("softmax");
    REQUIRE(call.rc == 0);
    CHECK(call.which.starts_with("default "));
    const ops::Params p{{"rows", 9}, {"cols", 70}};
    const auto want = test::reference_outputs(compiler, softmax, p, {board_input(9 * 70, 3)});
    CHECK(test::outputs_match(softmax, p, {call.values}, want));
  }
  REQUIRE(calls.count("gemm-missing"));
  CHECK(calls.at("gemm-missing").rc == -1);
  CHECK(calls.at("gemm-missing").which == "(none)");
}

TEST_CASE("an aarch64 export runs on the emulated board from a C program linked with its static libraries") {
  run_on_board({"aarch64-linux-gnu", "aarch64-linux-gnu-gcc", "qemu-aarch64-static", "/lib/ld-linux-aarch64.so.1",
                "/usr/aarch64-linux-gnu"});
}

// 32-bit ARM: kernels with run-time sizes divide 64-bit integers, which the library's own
// __aeabi_ldivmod serves (the gemm bucket call below).
TEST_CASE("an armv7 export runs on the emulated board from a C program linked with its static libraries") {
  run_on_board({"armv7a-linux-gnueabihf", "arm-linux-gnueabihf-gcc", "qemu-arm-static", "/lib/ld-linux-armhf.so.3",
                "/usr/arm-linux-gnueabihf"});
}

}  // namespace
}  // namespace kestrel::deploy
