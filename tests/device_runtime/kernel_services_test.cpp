// The kernel services' thread pool: every index of a parallel_for runs exactly once, on
// pools of 1 to 8 threads (more than this machine's cores: no spinning there), for jobs
// that follow one another at once (the threads still spinning) and after pauses long
// enough that they went to sleep, and nested calls run serially.
#include "kestrel/device_runtime/kernel_services.h"

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using kestrel::device::KernelServices;

namespace {

struct Counts {
  std::vector<std::atomic<int>> hits;
  explicit Counts(std::size_t n) : hits(n) {}
};

void count(std::int64_t i, void* arg) { static_cast<Counts*>(arg)->hits[static_cast<std::size_t>(i)].fetch_add(1); }

// Runs parallel_for over n indices and checks each ran once.
void check_once(const kestrel_services* svc, std::int64_t n) {
  Counts counts(static_cast<std::size_t>(n));
  kestrel_parallel_for(svc, n, count, &counts);
  for (std::int64_t i = 0; i < n; ++i) {
    INFO("index " << i << " of " << n);
    REQUIRE(counts.hits[static_cast<std::size_t>(i)].load() == 1);
  }
}

}  // namespace

TEST_CASE("parallel_for runs every index once, back to back and after the threads slept", "[services]") {
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    INFO(threads << " threads");
    KernelServices services(threads);
    REQUIRE(services.threads() == threads);
    // Back to back: thousands of small jobs while the pool threads spin between them.
    for (int round = 0; round < 2000; ++round) check_once(services.table(), 1 + round % 37);
    // With pauses past the spin time, so that each job wakes sleeping threads.
    for (int round = 0; round < 20; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      check_once(services.table(), 64);
    }
    check_once(services.table(), 0);
  }
}

TEST_CASE("a pool destroyed right after a job, or never used, stops its threads", "[services]") {
  for (int i = 0; i < 50; ++i) {
    KernelServices services(2);
    if (i % 2) check_once(services.table(), 5);
  }
  SUCCEED("every pool joined its threads");
}
