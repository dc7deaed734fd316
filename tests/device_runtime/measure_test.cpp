// The sandboxed measurement path with real shared objects: good, slow, crashing,
// hanging, garbage-writing, error-returning, non-ABI and wrong-architecture modules.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "kestrel/kernel/abi.h"
#include "kestrel/device_runtime/measure.h"
#include "kestrel/device_runtime/module_store.h"
#include "kestrel/base/log.h"
#include "support/async.h"
#include "support/fixtures.h"

using namespace kestrel;
using namespace kestrel::device;
using namespace std::chrono_literals;

namespace {

// A fixture module as a batch candidate: the request and the module's memfd.
struct FixtureCandidate {
  rpc::CandidateRequest request;
  int fd = -1;
};

void add_candidates(BatchSpec& spec, std::initializer_list<FixtureCandidate> candidates) {
  for (const auto& c : candidates) spec.add(c.request, c.fd);
}

using test::read_bytes;

std::string fake_hash(int n) {
  std::string hex = "0123456789abcdef";
  std::string h(64, '0');
  h[63] = hex[n % 16];
  h[62] = hex[(n / 16) % 16];
  return h;
}

// The fixture modules, stored under hashes named after them.
struct Fixtures {
  ModuleStore store;
  std::map<std::string, std::string> hash;
  Fixtures() {
    int n = 1;
    for (std::string name : {"add", "add_ref", "slow_add", "segfault", "hang", "garbage", "partial", "error_code",
                             "not_a_kernel", "abi_v1", "two_kernels", "abi_v2", "vendor_missing", "vendor_libm"}) {
      std::string h = fake_hash(n++);
      REQUIRE(store.put(h, read_bytes(std::string(KESTREL_FIXTURE_DIR) + "/fixture_" + name + ".so")).empty());
      hash[name] = h;
    }
#ifdef KESTREL_FIXTURE_AARCH64
    std::string h = fake_hash(n++);
    REQUIRE(store.put(h, read_bytes(KESTREL_FIXTURE_AARCH64)).empty());
    hash["aarch64"] = h;
#endif
  }
  FixtureCandidate candidate(std::uint64_t id, const std::string& name) {
    return {{id, hash.at(name), ""}, store.fd(hash.at(name))};
  }
};

BatchSpec add_batch(Fixtures& f, std::int64_t n = 10'000) {
  BatchSpec spec;
  spec.request.args = {{n, false}, {n, false}, {n, true}};
  spec.request.reference_hash = f.hash.at("add_ref");
  spec.reference_fd = f.store.fd(spec.request.reference_hash);
  spec.request.tolerance = 1e-6;
  spec.request.settings.repeat = 3;
  spec.request.settings.min_repeat_ms = 5;
  spec.request.settings.timeout_ms = 1500;
  spec.request.settings.threads = 2;
  return spec;
}

struct Outcome {
  std::vector<rpc::CandidateResult> results;
  std::optional<std::string> done;
};

Outcome run_batch(BatchSpec spec) {
  asio::io_context io;
  Outcome out;
  test::run_async(io, [&]() -> rpc::awaitable<void> {
    auto runner = BatchRunner::start(
        io.get_executor(), std::move(spec), [&](const rpc::CandidateResult& r) { out.results.push_back(r); },
        [&](const std::string& message) { out.done = message; });
    bool finished = co_await test::eventually([&] { return out.done.has_value(); }, 60s);
    REQUIRE(finished);
  });
  return out;
}

// Every bad kernel gets its status and the batch carries on (each crash or hang: a fresh worker).
void check_bad_kernels() {
  Fixtures f;
  BatchSpec spec = add_batch(f);
  add_candidates(spec, {f.candidate(1, "add"),      f.candidate(2, "segfault"),     f.candidate(3, "add"),
                     f.candidate(4, "hang"),     f.candidate(5, "garbage"),      f.candidate(6, "partial"),
                     f.candidate(7, "error_code"), f.candidate(8, "not_a_kernel"), f.candidate(9, "add")});
  add_candidates(spec, {{{10, fake_hash(200), ""}, -1}});  // never uploaded
#ifdef KESTREL_FIXTURE_AARCH64
  add_candidates(spec, {f.candidate(11, "aarch64")});
#endif
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  CHECK(out.done->empty());
  REQUIRE(out.results.size() == spec.request.candidates.size());
  std::map<std::uint64_t, rpc::CandidateResult> by_id;
  for (const auto& r : out.results) by_id[r.id] = r;

  for (std::uint64_t good : {1, 3, 9}) {
    INFO("candidate " << good << ": " << by_id[good].message);
    CHECK(by_id[good].status == Status::ok);
    CHECK(by_id[good].round_seconds.size() == 3);
    CHECK(by_id[good].number >= 1);
    CHECK(by_id[good].max_error == 0.0);
    for (double s : by_id[good].round_seconds) CHECK(s > 0);
  }
  CHECK(by_id[2].status == Status::runtime_error);
  CHECK_THAT(by_id[2].message, Catch::Contains("SIGSEGV"));
  CHECK(by_id[4].status == Status::run_timeout);
  CHECK_THAT(by_id[4].message, Catch::Contains("1500 ms"));
  CHECK(by_id[5].status == Status::wrong_answer);
  CHECK_THAT(by_id[5].message, Catch::Contains("max error"));
  CHECK(by_id[5].max_error > 0.01);
  CHECK(by_id[6].status == Status::wrong_answer);
  CHECK_THAT(by_id[6].message, Catch::Contains("element 9999"));
  CHECK(by_id[7].status == Status::runtime_error);
  CHECK_THAT(by_id[7].message, Catch::Contains("error code 7"));
  CHECK(by_id[8].status == Status::device_load_error);
  CHECK_THAT(by_id[8].message, Catch::Contains("not a Kestrel kernel"));
  CHECK(by_id[10].status == Status::device_load_error);
  CHECK_THAT(by_id[10].message, Catch::Contains("not on this device"));
#ifdef KESTREL_FIXTURE_AARCH64
  CHECK(by_id[11].status == Status::device_load_error);
  CHECK_THAT(by_id[11].message, Catch::Contains("built for aarch64 but this device is x86_64"));
#endif
}

// Vendor libraries are found by the worker (libm: also below Landlock's rules), a missing
// one is named, the batch goes on.
void check_vendor_kernels() {
  Fixtures f;
  BatchSpec spec = add_batch(f);
  add_candidates(spec, {f.candidate(1, "abi_v2"), f.candidate(2, "vendor_missing"), f.candidate(3, "vendor_libm"),
                        f.candidate(4, "add")});
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  REQUIRE(out.results.size() == 4);
  CHECK(out.results[0].status == Status::ok);
  CHECK(out.results[1].status == Status::runtime_error);
  CHECK(out.results[1].message ==
        "the vendor library libkestrel_no_such_library.so.1 is not on this device "
        "(libkestrel_no_such_library.so.1: cannot open shared object file: No such file or directory)");
  CHECK(out.results[2].status == Status::ok);  // checked against the reference: libm was called
  CHECK(out.results[2].round_seconds.size() == 3);
  CHECK(out.results[3].status == Status::ok);  // the batch goes on
}

// kestrel-device of this build, the worker image it registers (beside the fixtures' folder).
const std::string kDeviceImage = std::string(KESTREL_FIXTURE_DIR) + "/../../tools/kestrel-device";

bool have_device_image() { return ::access(kDeviceImage.c_str(), X_OK) == 0; }

// Registers `path` as the worker image for one scope.
struct WorkerImageScope {
  explicit WorkerImageScope(const std::string& path) { set_worker_image(path); }
  ~WorkerImageScope() { set_worker_image(""); }
};

}  // namespace

TEST_CASE("every bad kernel gets its status and the batch carries on", "[measure][bad-input]") {
  log::set_level(log::Level::warn);
  check_bad_kernels();
}

TEST_CASE("workers exec'd from the registered image (kestrel-device --kestrel-worker) measure, crash, hang and "
          "find vendor libraries as forked ones do",
          "[measure][bad-input][worker-image]") {
  log::set_level(log::Level::warn);
  if (!have_device_image()) {
    WARN("no " << kDeviceImage << ": build kestrel-device");
    return;
  }
  WorkerImageScope image(kDeviceImage);
  check_bad_kernels();
  check_vendor_kernels();
}

TEST_CASE("a worker image that cannot be exec'd leaves workers forks, and the batch runs", "[measure][worker-image]") {
  log::set_level(log::Level::warn);
  WorkerImageScope image("/nonexistent/kestrel-device");
  Fixtures f;
  BatchSpec spec = add_batch(f);
  add_candidates(spec, {f.candidate(1, "add"), f.candidate(2, "segfault"), f.candidate(3, "add")});
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  CHECK(out.done->empty());
  REQUIRE(out.results.size() == 3);
  CHECK(out.results[0].status == Status::ok);
  CHECK(out.results[1].status == Status::runtime_error);
  CHECK(out.results[2].status == Status::ok);
}

// Not run by ctest: what exec'ing the image costs per worker start. 20 crashing
// candidates (20 workers) and 20 good ones (one worker), forked and exec'd, 5 times each.
TEST_CASE("worker start: fork versus exec of the worker image", "[.][bench][worker-image]") {
  log::set_level(log::Level::error);
  REQUIRE(have_device_image());
  Fixtures f;
  auto time_batch = [&](const std::string& name) {
    BatchSpec spec = add_batch(f, 1024);
    spec.request.settings.repeat = 1;
    spec.request.settings.number = 1;
    spec.request.settings.min_repeat_ms = 0;
    for (std::uint64_t id = 1; id <= 20; ++id) spec.add({id, f.hash.at(name), ""}, f.store.fd(f.hash.at(name)));
    const auto start = std::chrono::steady_clock::now();
    Outcome out = run_batch(spec);
    REQUIRE(out.results.size() == 20);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  for (std::string name : {"segfault", "add"}) {
    for (bool exec : {false, true}) {
      WorkerImageScope image(exec ? kDeviceImage : "");
      std::vector<double> ms;
      for (int run = 0; run < 6; ++run) ms.push_back(time_batch(name));
      ms.erase(ms.begin());  // warm-up
      std::sort(ms.begin(), ms.end());
      std::printf("20 x %-8s %-5s: median %.1f ms (min %.1f, max %.1f) per batch\n", name.c_str(),
                  exec ? "exec" : "fork", ms[ms.size() / 2], ms.front(), ms.back());
    }
  }
}

TEST_CASE("a deliberately slow kernel measures slower than a good one", "[measure]") {
  Fixtures f;
  BatchSpec spec = add_batch(f, 100'000);
  spec.request.settings.repeat = 5;
  spec.request.settings.min_repeat_ms = 20;
  spec.request.settings.threads = 1;
  add_candidates(spec, {f.candidate(1, "add"), f.candidate(2, "slow_add")});
  Outcome out = run_batch(spec);
  REQUIRE(out.results.size() == 2);
  REQUIRE(out.results[0].status == Status::ok);
  REQUIRE(out.results[1].status == Status::ok);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double fast = median(out.results[0].round_seconds);
  double slow = median(out.results[1].round_seconds);
  INFO("fast " << fast * 1e6 << " us, slow " << slow * 1e6 << " us");
  CHECK(slow > 10 * fast);
  // number grew so that a round of the fast kernel (tens of microseconds per call)
  // lasts min_repeat_ms (20 ms): hundreds of calls, never just one.
  CHECK(out.results[0].number >= 50);
  CHECK(out.results[1].number < out.results[0].number);
}

TEST_CASE("fixed number, cooldown and cache flush are honoured", "[measure]") {
  Fixtures f;
  BatchSpec spec = add_batch(f, 1000);
  spec.request.settings.number = 7;
  spec.request.settings.repeat = 4;
  spec.request.settings.cooldown_ms = 20;
  spec.request.settings.flush_cache = true;
  add_candidates(spec, {f.candidate(1, "add")});
  auto start = std::chrono::steady_clock::now();
  Outcome out = run_batch(spec);
  REQUIRE(out.results.size() == 1);
  CHECK(out.results[0].status == Status::ok);
  CHECK(out.results[0].number == 7);
  CHECK(out.results[0].round_seconds.size() == 4);
  CHECK(std::chrono::steady_clock::now() - start >= 60ms);  // three cooldowns
}

TEST_CASE("a reference that cannot run fails the whole batch clearly", "[measure][bad-input]") {
  Fixtures f;
  BatchSpec spec = add_batch(f);
  spec.request.reference_hash = f.hash.at("segfault");
  spec.reference_fd = f.store.fd(spec.request.reference_hash);
  add_candidates(spec, {f.candidate(1, "add"), f.candidate(2, "add")});
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  CHECK_THAT(*out.done, Catch::Contains("SIGSEGV"));
  REQUIRE(out.results.size() == 2);
  for (const auto& r : out.results) CHECK(r.status == Status::runtime_error);
}

TEST_CASE("the module store validates, seals and evicts", "[measure]") {
  ModuleStore store(100, 2);
  std::vector<std::uint8_t> image(40, 1);
  CHECK_THAT(store.put("xyz", image), Catch::Contains("malformed module hash"));
  CHECK_THAT(store.put(fake_hash(1), {}), Catch::Contains("empty"));
  CHECK_THAT(store.put(fake_hash(1), std::vector<std::uint8_t>(101, 0)), Catch::Contains("exceeds"));
  CHECK(store.put(fake_hash(1), image).empty());
  CHECK(store.put(fake_hash(2), image).empty());
  int fd = store.fd(fake_hash(1));  // 1 is now the most recently used
  CHECK(fd >= 0);
  CHECK(::write(fd, "x", 1) < 0);   // sealed
  CHECK(store.put(fake_hash(3), image).empty());
  CHECK(store.contains(fake_hash(1)));
  CHECK_FALSE(store.contains(fake_hash(2)));
  CHECK(store.size() == 2);
  CHECK(store.bytes() == 80);
}

TEST_CASE("a module of kernel ABI v1 is refused with the version it was built for", "[measure][bad-input][abi]") {
  Fixtures f;
  BatchSpec spec = add_batch(f);
  add_candidates(spec, {f.candidate(1, "abi_v1"), f.candidate(2, "add")});
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  REQUIRE(out.results.size() == 2);
  CHECK(out.results[0].status == Status::device_load_error);
  CHECK_THAT(out.results[0].message, Catch::Contains("kernel ABI v1") &&
                                                 Catch::Contains("implements v" + std::to_string(KESTREL_KERNEL_ABI_VERSION)));
  CHECK(out.results[1].status == Status::ok);  // the batch goes on
}

TEST_CASE("kernel ABI v3: v2 modules still run, vendor libraries are found in the worker, a missing one is named",
          "[measure][abi][vendor]") {
  check_vendor_kernels();
}

TEST_CASE("a candidate names which kernel of a module runs (kernel ABI v2 entries)", "[measure][abi]") {
  Fixtures f;
  BatchSpec spec = add_batch(f);
  FixtureCandidate sum = f.candidate(1, "two_kernels"), off = f.candidate(2, "two_kernels"),
                   missing = f.candidate(3, "two_kernels"), fallback = f.candidate(4, "two_kernels");
  sum.request.entry = "add_sum";
  off.request.entry = "add_off_by_one";
  missing.request.entry = "add_nothing";
  // No entry: the default name, which this module does not export.
  add_candidates(spec, {sum, off, missing, fallback});
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  REQUIRE(out.results.size() == 4);
  CHECK(out.results[0].status == Status::ok);
  CHECK(out.results[1].status == Status::wrong_answer);
  CHECK(out.results[2].status == Status::device_load_error);
  CHECK_THAT(out.results[2].message, Catch::Contains("does not export the kernel 'add_nothing'"));
  CHECK(out.results[3].status == Status::device_load_error);
  CHECK_THAT(out.results[3].message, Catch::Contains("'kestrel_kernel'"));
}

TEST_CASE("the reference kernel is found by its entry name too", "[measure][abi]") {
  Fixtures f;
  BatchSpec spec = add_batch(f);
  spec.request.reference_hash = f.hash.at("two_kernels");
  spec.request.reference_entry = "add_sum";
  spec.reference_fd = f.store.fd(spec.request.reference_hash);
  add_candidates(spec, {f.candidate(1, "add")});
  Outcome out = run_batch(spec);
  REQUIRE(out.done);
  CHECK(out.done->empty());
  REQUIRE(out.results.size() == 1);
  CHECK(out.results[0].status == Status::ok);
}
