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

namespace {

struct Job {
  std::atomic<int>* current = nullptr;
  int round = 0;
  std::atomic<int>* stale = nullptr;  // calls that saw another round's job
  std::atomic<int> hits{0};
};

void check_round(std::int64_t, void* arg) {
  auto* job = static_cast<Job*>(arg);
  if (job->round != job->current->load()) job->stale->fetch_add(1);
  job->hits.fetch_add(1);
}

}  // namespace

TEST_CASE("a pool thread that wakes after a job was drained touches none of it", "[services]") {
  for (unsigned threads : {2u, 3u, 8u}) {
    INFO(threads << " threads");
    KernelServices services(threads);
    std::atomic<int> current{0}, stale{0};
    for (int round = 1; round <= 20000; ++round) {
      Job job;  // the same stack slot every round: a late call would see the next round
      job.current = &current;
      job.stale = &stale;
      job.round = round;
      current.store(round);
      kestrel_parallel_for(services.table(), 2 + round % 3, check_round, &job);
      REQUIRE(job.hits.load() == 2 + round % 3);
      job.round = -1;  // what a call after the return would see
      if (round % 5000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let them sleep
    }
    CHECK(stale.load() == 0);
  }
}
