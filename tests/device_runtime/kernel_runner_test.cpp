// The kernel runner in this process: loading fixture modules (from a file and from an
// in-memory image), the ABI and entry checks, the deterministic inputs, the output check
// and the calibration of calls per round.
#include "kestrel/device_runtime/kernel_runner.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <vector>

#include "kestrel/device_runtime/kernel_services.h"
#include "support/fixtures.h"

using namespace kestrel::device;

namespace {

using kestrel::test::fixture_path;
std::vector<std::uint8_t> fixture_bytes(const std::string& name) { return kestrel::test::read_fixture(name); }

std::optional<CpuKernelModule> load_file(const std::string& name, const std::string& entry, std::string& error) {
  int fd = ::open(fixture_path(name).c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto module = CpuKernelModule::load(fd, name, entry, error);
  ::close(fd);
  return module;
}

// Runs an (a, b) -> out kernel of n elements on the runner's inputs; returns out.
std::vector<float> run_add(const CpuKernelModule& module, std::int64_t n, std::int32_t* rc = nullptr) {
  KernelServices services(2);
  std::vector<FloatBuffer> buffers;
  for (int i = 0; i < 3; ++i) buffers.emplace_back(n);
  fill_uniform(buffers[0].span(), 1);
  fill_uniform(buffers[1].span(), 2);
  fill_nan(buffers[2].span());
  std::vector<kestrel_arg> args;
  for (const auto& b : buffers) args.push_back(kestrel_arg{b.data(), b.size(), 0.0});
  std::int32_t code = module.call(services.table(), args);
  services.reclaim_scratch();
  if (rc) *rc = code;
  return {buffers[2].data(), buffers[2].data() + n};
}

}  // namespace

TEST_CASE("a CPU kernel module loads from a file and from an in-memory image", "[runner]") {
  std::string error;
  auto from_file = load_file("add", "", error);
  REQUIRE(from_file);
  CHECK(error.empty());
  auto image = fixture_bytes("add");
  auto from_image = CpuKernelModule::load(image, "add", "", error);
  REQUIRE(from_image);

  std::int32_t rc = -1;
  auto out = run_add(*from_image, 1000, &rc);
  CHECK(rc == 0);
  std::vector<float> a(1000), b(1000);
  fill_uniform(a, 1);
  fill_uniform(b, 2);
  for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == a[i] + b[i]);
  CHECK(run_add(*from_file, 1000) == out);

  // Moving keeps the module open and empties the source.
  CpuKernelModule moved = std::move(*from_image);
  CHECK(from_image->entry() == nullptr);
  CHECK(run_add(moved, 1000) == out);
  moved = std::move(*from_file);
  CHECK(run_add(moved, 64) == std::vector<float>(out.begin(), out.begin() + 64));
}

TEST_CASE("the runner refuses modules it cannot run, naming the module", "[runner][bad-input]") {
  std::string error;
  CHECK_FALSE(load_file("abi_v1", "", error));
  CHECK(error == "module abi_v1 was built for kernel ABI v1 but this runtime implements v" +
                     std::to_string(KESTREL_KERNEL_ABI_VERSION) + " (rebuild it with this version of Kestrel)");
  CHECK_FALSE(load_file("not_a_kernel", "", error));
  CHECK(error == "module not_a_kernel does not export " KESTREL_KERNEL_ABI_SYMBOL " (not a Kestrel kernel)");
  CHECK_FALSE(load_file("add", "no_such_kernel", error));
  CHECK(error == "module add does not export the kernel 'no_such_kernel'");
  // two_kernels has no default entry.
  CHECK_FALSE(load_file("two_kernels", "", error));
  CHECK(error == "module two_kernels does not export the kernel '" KESTREL_KERNEL_DEFAULT_ENTRY "'");
  std::vector<std::uint8_t> garbage(64, 'x');
  CHECK_FALSE(CpuKernelModule::load(garbage, "garbage", "", error));
  CHECK(error == "cannot load module garbage: it is not an ELF file");
}

TEST_CASE("the runner picks a kernel of a module by its entry name", "[runner][abi]") {
  std::string error;
  auto sum = load_file("two_kernels", "add_sum", error);
  auto off = load_file("two_kernels", "add_off_by_one", error);
  REQUIRE(sum);
  REQUIRE(off);
  auto good = run_add(*sum, 100);
  auto bad = run_add(*off, 100);
  for (std::size_t i = 0; i < good.size(); ++i) REQUIRE(bad[i] == good[i] + 1.0f);
}

TEST_CASE("the runner's inputs are deterministic, uniform from -1 up to 1 and differ by seed", "[runner]") {
  std::vector<float> a(10'000), b(10'000), c(10'000);
  fill_uniform(a, 7);
  fill_uniform(b, 7);
  fill_uniform(c, 8);
  CHECK(a == b);
  CHECK(a != c);
  double sum = 0;
  for (float v : a) {
    REQUIRE(v >= -1.0f);
    REQUIRE(v < 1.0f);
    sum += v;
  }
  CHECK(std::fabs(sum / static_cast<double>(a.size())) < 0.05);
  FloatBuffer buffer(33);
  CHECK(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64 == 0);
  CHECK(FloatBuffer::bytes_for(33) == 192);
  CHECK(FloatBuffer::bytes_for(0) == 64);
  fill_nan(buffer.span());
  CHECK(std::isnan(buffer.data()[32]));
}

TEST_CASE("the output check applies the relative tolerance and names the first bad element", "[runner]") {
  std::vector<float> want = {1.0f, -2.0f, 100.0f, 0.0f};
  OutputCheck exact(1e-4);
  exact.add(2, want, want);
  CHECK(exact.ok());
  CHECK(exact.message().empty());
  CHECK(exact.max_error() == 0);

  // 100 + 0.005 is within 1e-4 * (1 + 100); 0 + 0.5 is not.
  std::vector<float> got = {1.0f, -2.0f, 100.005f, 0.5f};
  OutputCheck check(1e-4);
  check.add(3, want, want);
  check.add(5, got, want);
  CHECK_FALSE(check.ok());
  CHECK(check.max_error() == Approx(0.5));
  CHECK(check.message() == "max error 0.5 exceeds tolerance 0.0001; first: element 3 of argument 5 is 0.5, expected 0");

  std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 100.0f, 0.0f};
  OutputCheck unwritten(1e-4);
  unwritten.add(0, nan, want);
  CHECK(std::isinf(unwritten.max_error()));
  CHECK(unwritten.message() == "max error inf exceeds tolerance 0.0001; first: element 1 of argument 0 is nan, expected -2");

  OutputCheck sizes(1e-4);
  sizes.add(1, std::vector<float>(3), want);
  CHECK(sizes.message() == "max error inf exceeds tolerance 0.0001; first: argument 1 has 3 elements, expected 4");
}

TEST_CASE("calls per round grow until a round lasts the minimum", "[runner]") {
  // A fake clock: every call takes 1 ms, except that the first looks 10x faster.
  std::vector<std::uint32_t> asked;
  auto round = [&](std::uint32_t calls) {
    asked.push_back(calls);
    return asked.size() == 1 ? calls * 1e-4 : calls * 1e-3;
  };
  std::uint32_t number = calibrate_number(0.05, round);
  // The single call suggests 500 calls; 500 ms is enough.
  CHECK(asked.front() == 1);
  CHECK(number == 500);

  asked.clear();
  auto slow_start = [&](std::uint32_t calls) {
    asked.push_back(calls);
    return asked.size() == 1 ? calls * 1e-3 : calls * 1e-4;  // later calls are 10x faster
  };
  number = calibrate_number(0.05, slow_start);
  CHECK(asked.size() >= 3);
  CHECK(number * 1e-4 >= 0.05);
  CHECK(calibrate_number(0, round) == 1);
}
