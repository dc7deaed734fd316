// --priority as users give it: with the only device of a key busy, two clients queue
// and the tracker grants the higher priority first, though it arrived last (real
// tracker, device and kestrel processes).
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <optional>
#include <thread>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

// The queue of `key` as `kestrel query --json` shows it; -1 when the key is not listed.
int queued(const TempDir& dir, const TrackerProcess& tracker, const std::string& key, const char* field = "queued") {
  nlohmann::json summary = query(dir, tracker);
  if (!summary.is_object()) return -1;
  for (const auto& k : summary["keys"]) {
    if (k["key"] == key) return k[field].get<int>();
  }
  return -1;
}

std::unique_ptr<Process> profile(const TempDir& dir, const TrackerProcess& tracker, const std::string& priority) {
  return std::make_unique<Process>(
      std::vector<std::string>{kKestrel, "profile", "--tracker", tracker.address(), "--key", "prio", "--op", "gemm",
                               "--shape", "48x40x32", "--repeat", "2", "--min-repeat-ms", "2", "--wait-ms", "60000",
                               "--priority", priority},
      dir.file("profile" + priority + ".log"));
}

}  // namespace

TEST_CASE("with the only device busy, the client with the higher --priority is granted first though it came last",
          "[e2e][priority]") {
  TempDir dir;
  TrackerProcess tracker(dir);
  auto device = start_device(dir, tracker, "prio", "only");
  REQUIRE(test::wait_for([&] { return queued(dir, tracker, "prio", "free") == 1; }, 20s));

  // A long tune holds the device.
  Process holder({kKestrel, "tune", "--tracker", tracker.address(), "--key", "prio", "--op", "gemm", "--shape",
                  "48x40x32", "--trials", "100000", "--batch", "4", "--repeat", "2", "--min-repeat-ms", "2",
                  "--final-top", "0", "--vendors", "none", "--reconnect-ms", "0", "--quiet", "--db", dir.file("holder.db")},
                 dir.file("holder.log"));
  REQUIRE(test::wait_for([&] { return queued(dir, tracker, "prio", "busy") == 1; }, 20s));

  auto low = profile(dir, tracker, "-5");
  REQUIRE(test::wait_for([&] { return queued(dir, tracker, "prio") == 1; }, 20s));
  auto high = profile(dir, tracker, "10");
  REQUIRE(test::wait_for([&] { return queued(dir, tracker, "prio") == 2; }, 20s));

  // The holder stops now (SIGTERM releases its lease): the queue is served in priority
  // order. Each profile compiles for a few hundred ms once granted, so the one granted
  // first exits well before the other (watched closely, from the signal on).
  holder.signal(SIGTERM);
  std::optional<std::string> first;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while ((low->running() || high->running()) && std::chrono::steady_clock::now() < deadline) {
    const bool low_done = !low->running(), high_done = !high->running();
    if (!first && (low_done || high_done)) first = low_done && high_done ? "both" : high_done ? "high" : "low";
    std::this_thread::sleep_for(2ms);
  }
  REQUIRE(holder.wait_exit(30s));
  INFO(high->log() << "\n---\n" << low->log());
  CHECK(first == "high");
  CHECK(high->wait_exit(1s) == 0);
  CHECK(low->wait_exit(1s) == 0);
}

TEST_CASE("a priority outside -1000..1000 is a usage error", "[e2e][priority][bad-input]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "profile", "--op", "gemm", "--shape", "8x8x8", "--priority", "1001"}, output,
                          dir.file("o1")) == 2);
  CHECK(output.find("--priority") != std::string::npos);
  CHECK(test::run_command({kKestrel, "tune", "--shape", "8x8x8", "--priority", "-1001", "--db", dir.file("t.db")},
                          output, dir.file("o2")) == 2);
  CHECK(output.find("--priority") != std::string::npos);
}
