// kestrel-bench-tracker: what one request -> grant -> release cycle through the tracker
// costs, over real TCP sockets on 127.0.0.1. A cycle is TrackerClient::request (submit,
// wait for the grant) followed by TrackerClient::release (wait for the tracker's
// confirmation).
//
//   BM_RequestGrantRelease/devices:1
//       One client, one device agent under the key: the round-trip latency of a cycle.
//       One iteration is one cycle; Time is the cycle's own duration measured on the
//       client thread (manual time), so handing the work from the benchmark thread to
//       the client thread and back is not counted. p50_us/p99_us: its distribution.
//
//   BM_TrackerThroughput/devices:1000/clients:N
//       1,000 device agents, all connected over loopback and registered under one key;
//       N client connections, each looping request/release concurrently. One iteration
//       is one cycle; Time is wall time divided by cycles (the inverse of the tracker's
//       throughput). cycles/s: the aggregate rate; latency_us: the mean duration of a
//       cycle as one client sees it. devices:1/clients:1 is the same loop against the
//       one-device pool, for reference.
//
// CPU (both): the CPU time of the whole process, all threads together, per cycle.
// The tracker keeps its default heartbeat (1 s), so the 1,000 devices' heartbeat
// traffic runs in the background, as in a real pool.
//
// Threads: the tracker runs on its own io_context and thread, all device agents on a
// second, all clients on a third; the benchmark thread only hands work over and waits.
// The tracker is only touched from its thread (constructed and started before it runs).
// Pools are started on first use and torn down at the end of main: clients closed,
// agents stopped, tracker stopped, each on its own thread, then the threads joined.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "kestrel/device_runtime/agent.h"
#include "kestrel/device_runtime/capabilities.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/tracker/tracker.h"
#include "kestrel/rpc/tracker_client.h"

namespace {

using namespace kestrel;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kLog = "bench";

// The large pool: this many device agents in this process, two sockets each (the
// agent's and the tracker's end).
constexpr std::size_t kMaxDevices = 1000;
constexpr rlim_t kSpareDescriptors = 256;  // clients, epoll and eventfds, stdio

// BM_RequestGrantRelease: cycles measured.
constexpr benchmark::IterationCount kLatencyCycles = 5000;
// BM_TrackerThroughput: cycles per batch (shared among the clients) and batches.
constexpr std::size_t kBatchCycles = 2000;
constexpr std::size_t kBatches = 5;

constexpr auto kRegistrationLimit = std::chrono::seconds(30);
constexpr auto kStuckLimit = std::chrono::seconds(20);     // one hand-off to a worker thread
constexpr auto kWindDownLimit = std::chrono::seconds(10);  // a worker's io_context running dry

double to_seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- worker threads ------------------------------------------------------------------

// One io_context run by one thread. The work guard keeps run() going while idle;
// finish() drops it and waits for the context to run out of work by itself.
class Worker {
 public:
  explicit Worker(std::string name) : name_(std::move(name)), guard_(asio::make_work_guard(io_)) {}
  ~Worker() {
    if (thread_.joinable()) {  // finish() was never reached
      io_.stop();
      thread_.join();
    }
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  asio::io_context& io() { return io_; }

  void start() {
    finished_ = done_.get_future();
    thread_ = std::thread([this] {
      while (true) {
        try {
          if (drain_requested_) {
            drain();
            continue;
          }
          io_.run();
          if (!drain_requested_) break;  // out of work: finish() was called
        } catch (const std::exception& e) {
          log::error(kLog, name_, " thread: a handler threw: ", e.what());
        }
      }
      done_.set_value();
    });
  }

  // Calls `fn` on this worker's thread at a moment when no completion handler is
  // queued: the thread leaves run(), runs every ready handler until none is left, then
  // calls `fn` with nothing in between, and goes back to run().
  //
  // Why: Connection::close() clears the send queue even while write_loop() has an
  // async_write of its front in flight; when that write has already completed
  // successfully (its completion queued, not yet run), write_loop() then pops from the
  // emptied deque: a double free (seen under AddressSanitizer when agents were stopped
  // in the middle of a heartbeat burst). DeviceAgent::stop() calls close(), so the
  // agents are stopped only once every write completion has been delivered.
  void call_when_drained(std::function<void()> fn) {
    drain_then_ = std::move(fn);
    drain_requested_ = true;
    asio::post(io_, [this] {
      if (drain_requested_) io_.stop();
    });
  }

  // Lets run() return once no work is left, and joins. Returns false (after stopping
  // the context by force) when work was still pending after `limit`: something did
  // not shut down.
  bool finish(Clock::duration limit) {
    guard_.reset();
    if (!thread_.joinable()) return true;
    bool clean = finished_.wait_for(limit) == std::future_status::ready;
    if (!clean) {
      log::error(kLog, "the ", name_, " thread still had work ", to_seconds(limit),
                 " s after shutdown; stopping it by force");
      io_.stop();
    }
    thread_.join();
    return clean;
  }

 private:
  std::string name_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::atomic<bool> drain_requested_{false};
  std::function<void()> drain_then_;  // set before drain_requested_, read after it
  std::promise<void> done_;
  std::future<void> finished_;
  std::thread thread_;

  void drain() {
    std::function<void()> fn = std::move(drain_then_);
    drain_then_ = nullptr;
    drain_requested_ = false;  // from here on, the posted stop handler does nothing
    io_.restart();
    while (io_.poll() > 0) {
    }
    if (fn) fn();
  }
};

// Runs `fn` on `io`'s thread; its result (or exception) comes back through the future.
template <typename F>
std::future<std::invoke_result_t<F&>> call_on(asio::io_context& io, F fn) {
  using R = std::invoke_result_t<F&>;
  auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
  auto result = task->get_future();
  asio::post(io, [task] { (*task)(); });
  return result;
}

template <typename A>
struct awaited;
template <typename T, typename E>
struct awaited<asio::awaitable<T, E>> {
  using type = T;
};

// Spawns the coroutine that `make()` returns on `io` (from `io`'s own thread); its
// result (or exception) comes back through the future. co_spawn keeps `make` alive
// until the coroutine is done, so a capturing coroutine lambda is safe here.
template <typename F>
std::future<typename awaited<std::invoke_result_t<F&>>::type> spawn_on(asio::io_context& io, F make) {
  using T = typename awaited<std::invoke_result_t<F&>>::type;
  auto done = std::make_shared<std::promise<T>>();
  auto result = done->get_future();
  asio::post(io, [&io, make = std::move(make), done]() mutable {
    asio::co_spawn(io, std::move(make), [done](std::exception_ptr e, auto... value) {
      if (e) {
        done->set_exception(e);
      } else {
        done->set_value(std::move(value)...);
      }
    });
  });
  return result;
}

// One client's share of a throughput batch.
rpc::awaitable<void> cycle_loop(std::shared_ptr<rpc::TrackerClient> client, std::string key, std::size_t cycles) {
  for (std::size_t i = 0; i < cycles; ++i) {
    rpc::Lease lease = co_await client->request(key);
    co_await client->release(lease.id);
  }
}

// Starts `cycles_each` cycles on every client at once; the future is ready when all
// are done, or carries the first error.
std::future<void> run_clients(asio::io_context& io, std::vector<std::shared_ptr<rpc::TrackerClient>> clients,
                              std::string key, std::size_t cycles_each) {
  struct Batch {
    std::size_t remaining = 0;
    std::exception_ptr error;
    std::promise<void> done;
  };
  auto batch = std::make_shared<Batch>();
  batch->remaining = clients.size();
  auto result = batch->done.get_future();
  asio::post(io, [&io, clients = std::move(clients), key = std::move(key), cycles_each, batch] {
    for (const auto& client : clients) {
      asio::co_spawn(io, cycle_loop(client, key, cycles_each), [batch](std::exception_ptr e) {
        if (e && !batch->error) batch->error = e;
        if (--batch->remaining > 0) return;
        if (batch->error) {
          batch->done.set_exception(batch->error);
        } else {
          batch->done.set_value();
        }
      });
    }
  });
  return result;
}

// ---- a tracker with its devices and clients ------------------------------------------

class Pool {
 public:
  Pool(std::size_t devices, std::string key) : devices_(devices), key_(std::move(key)) {}
  ~Pool() { shutdown(); }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Starts the tracker, connects the device agents and waits until all are registered.
  // Throws std::runtime_error saying what went wrong.
  void start() {
    tracker::TrackerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;  // any free port
    tracker_ = std::make_unique<tracker::Tracker>(tracker_thread_.io(), options);
    tracker_->start();
    port_ = tracker_->port();
    tracker_thread_.start();

    const auto begin = Clock::now();
    rpc::DeviceInfo info = device::detect_device_info("bench-device");
    device::AgentOptions agent_options;
    agent_options.tracker = rpc::Endpoint{"127.0.0.1", port_};
    agent_options.key = key_;
    agents_.reserve(devices_);
    for (std::size_t i = 0; i < devices_; ++i) {
      // Names must differ: the tracker treats a second registration of a name under
      // the same key as the device reconnecting and drops the first.
      info.name = str(key_, "-", i);
      agents_.push_back(std::make_unique<device::DeviceAgent>(agent_thread_.io().get_executor(), agent_options, info));
      device::DeviceAgent* agent = agents_.back().get();
      asio::co_spawn(agent_thread_.io(), [agent] { return agent->run(); }, [this](std::exception_ptr e) {
        if (!e) return;
        ++agents_failed_;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log::error(kLog, "a device agent ended with an error: ", ex.what());
        }
      });
    }
    agent_thread_.start();
    client_thread_.start();

    while (true) {
      std::size_t registered = tracker_stats().devices;
      if (registered == devices_) break;
      if (agents_failed_ > 0) {
        throw std::runtime_error(str(agents_failed_.load(), " device agents failed (see the log above)"));
      }
      if (Clock::now() - begin > kRegistrationLimit) {
        throw std::runtime_error(str("only ", registered, " of ", devices_, " devices registered with the tracker within ",
                                     std::chrono::duration_cast<std::chrono::seconds>(kRegistrationLimit).count(),
                                     " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::fprintf(stderr, "pool: %zu device agent(s) registered under key '%s' at 127.0.0.1:%u in %.2f s\n", devices_,
                 key_.c_str(), static_cast<unsigned>(port_), to_seconds(Clock::now() - begin));
  }

  // Closes the clients, stops the agents, then the tracker, each on its own thread, and
  // joins them. Idempotent. False when a thread had to be stopped by force.
  bool shutdown() {
    if (shut_down_) return clean_;
    shut_down_ = true;
    close_clients();
    clean_ = client_thread_.finish(kWindDownLimit) && clean_;
    agent_thread_.call_when_drained([this] {
      for (auto& agent : agents_) agent->stop();
    });
    clean_ = agent_thread_.finish(kWindDownLimit) && clean_;
    if (tracker_) asio::post(tracker_thread_.io(), [tracker = tracker_.get()] { tracker->stop(); });
    clean_ = tracker_thread_.finish(kWindDownLimit) && clean_;
    if (!clean_) {
      // A context stopped by force may still hold coroutines that point into these
      // objects; leak them rather than risk a use after free on the way out.
      (void)tracker_.release();
      for (auto& agent : agents_) (void)agent.release();
      (void)new std::vector<std::shared_ptr<rpc::TrackerClient>>(std::move(clients_));
    }
    clients_.clear();
    agents_.clear();
    tracker_.reset();
    return clean_;
  }

  const std::string& key() const { return key_; }
  asio::io_context& client_io() { return client_thread_.io(); }

  tracker::TrackerStats tracker_stats() {
    return wait(call_on(tracker_thread_.io(), [tracker = tracker_.get()] { return tracker->stats(); }),
                "reading the tracker's stats");
  }

  // The index-th client connection, connected on first use.
  std::shared_ptr<rpc::TrackerClient> client(std::size_t index) {
    while (clients_.size() <= index) {
      rpc::ClientOptions options;
      options.name = str("bench-client-", clients_.size());
      rpc::Endpoint endpoint{"127.0.0.1", port_};
      clients_.push_back(wait(spawn_on(client_thread_.io(),
                                       [endpoint, options] { return rpc::TrackerClient::connect(endpoint, options); }),
                              "connecting a client"));
    }
    return clients_[index];
  }

  // Waits for work handed to a worker thread. A wait that does not end is met by
  // closing the clients (which fails whatever they wait for), then by aborting: the
  // benchmark must never hang.
  template <typename T>
  T wait(std::future<T> result, std::string_view what) {
    if (result.wait_for(kStuckLimit) != std::future_status::ready) {
      log::error(kLog, what, " took more than ", to_seconds(kStuckLimit), " s; closing the clients");
      close_clients();
      if (result.wait_for(kStuckLimit) != std::future_status::ready) {
        log::error(kLog, what, " is still stuck; aborting");
        std::abort();
      }
    }
    return result.get();
  }

 private:
  void close_clients() {
    if (clients_.empty()) return;
    asio::post(client_thread_.io(), [clients = clients_] {
      for (const auto& client : clients) client->close();
    });
  }

  std::size_t devices_;
  std::string key_;
  // Declared first, destroyed last: everything below holds sockets and timers of
  // these io_contexts.
  Worker tracker_thread_{"tracker"};
  Worker agent_thread_{"device agent"};
  Worker client_thread_{"client"};
  std::unique_ptr<tracker::Tracker> tracker_;
  std::uint16_t port_ = 0;
  std::vector<std::unique_ptr<device::DeviceAgent>> agents_;
  std::atomic<std::size_t> agents_failed_{0};
  std::vector<std::shared_ptr<rpc::TrackerClient>> clients_;
  bool shut_down_ = false;
  bool clean_ = true;
};

// One pool per device count, started on first use and kept until the end of main.
std::map<std::size_t, std::unique_ptr<Pool>> g_pools;
std::map<std::size_t, std::string> g_pool_failures;

Pool& pool_with(std::size_t devices) {
  if (auto failed = g_pool_failures.find(devices); failed != g_pool_failures.end()) {
    throw std::runtime_error(failed->second);
  }
  auto& pool = g_pools[devices];
  if (!pool) {
    auto fresh = std::make_unique<Pool>(devices, str("bench-", devices));
    try {
      fresh->start();
    } catch (const std::exception& e) {
      std::string why = str("starting a tracker with ", devices, " device agent(s) failed: ", e.what());
      g_pool_failures[devices] = why;
      g_pools.erase(devices);
      throw std::runtime_error(why);
    }
    pool = std::move(fresh);
  }
  return *pool;
}

bool shutdown_pools() {
  bool clean = true;
  for (auto& [devices, pool] : g_pools) clean = pool->shutdown() && clean;
  g_pools.clear();
  return clean;
}

// Set when a benchmark was skipped with an error: main then exits with status 1.
bool g_failed = false;

void fail(benchmark::State& state, const std::string& why) {
  g_failed = true;
  state.SkipWithError(why.c_str());
}

// Every cycle must have produced exactly one grant, and every lease must be back.
void check_tracker(benchmark::State& state, Pool& pool, std::uint64_t grants_before, std::uint64_t cycles) {
  tracker::TrackerStats after = pool.tracker_stats();
  if (after.grants - grants_before != cycles || after.leases != 0) {
    fail(state, str("tracker counted ", after.grants - grants_before, " grants for ", cycles, " cycles and ",
                    after.leases, " leases still held"));
  }
}

// ---- benchmarks -----------------------------------------------------------------------

void BM_RequestGrantRelease(benchmark::State& state) {
  const auto devices = static_cast<std::size_t>(state.range(0));
  try {
    Pool& pool = pool_with(devices);
    auto client = pool.client(0);
    const std::string key = pool.key();
    const std::uint64_t grants_before = pool.tracker_stats().grants;
    std::vector<double> samples;
    samples.reserve(static_cast<std::size_t>(state.max_iterations));
    for (auto _ : state) {
      try {
        Clock::duration cycle =
            pool.wait(spawn_on(pool.client_io(),
                               [client, key]() -> rpc::awaitable<Clock::duration> {
                                 auto begin = Clock::now();
                                 rpc::Lease lease = co_await client->request(key);
                                 co_await client->release(lease.id);
                                 co_return Clock::now() - begin;
                               }),
                      "a request/release cycle");
        samples.push_back(to_seconds(cycle));
        state.SetIterationTime(samples.back());
      } catch (const std::exception& e) {
        fail(state, e.what());
        break;
      }
    }
    if (state.error_occurred() || samples.empty()) return;
    check_tracker(state, pool, grants_before, samples.size());

    const double total = std::accumulate(samples.begin(), samples.end(), 0.0);
    std::sort(samples.begin(), samples.end());
    auto percentile_us = [&](double q) {
      auto index = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
      return samples[std::min(index, samples.size() - 1)] * 1e6;
    };
    state.counters["cycles/s"] = benchmark::Counter(static_cast<double>(samples.size()) / total);
    state.counters["p50_us"] = benchmark::Counter(percentile_us(0.50));
    state.counters["p99_us"] = benchmark::Counter(percentile_us(0.99));
    state.SetLabel(str("1 client, ", devices, " device(s) under one key; time = one cycle"));
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

void BM_TrackerThroughput(benchmark::State& state) {
  const auto devices = static_cast<std::size_t>(state.range(0));
  const auto client_count = static_cast<std::size_t>(state.range(1));
  try {
    Pool& pool = pool_with(devices);
    std::vector<std::shared_ptr<rpc::TrackerClient>> clients;
    for (std::size_t i = 0; i < client_count; ++i) clients.push_back(pool.client(i));
    const std::size_t per_client = kBatchCycles / client_count;
    const auto batch = static_cast<benchmark::IterationCount>(per_client * client_count);
    const std::uint64_t grants_before = pool.tracker_stats().grants;
    Clock::duration elapsed{};
    std::uint64_t cycles = 0;
    while (state.KeepRunningBatch(batch)) {
      try {
        auto begin = Clock::now();
        pool.wait(run_clients(pool.client_io(), clients, pool.key(), per_client), "a batch of cycles");
        elapsed += Clock::now() - begin;
        cycles += static_cast<std::uint64_t>(batch);
      } catch (const std::exception& e) {
        fail(state, e.what());
        break;
      }
    }
    if (state.error_occurred() || cycles == 0) return;
    check_tracker(state, pool, grants_before, cycles);

    const double seconds = to_seconds(elapsed);
    state.counters["cycles/s"] = benchmark::Counter(static_cast<double>(cycles) / seconds);
    state.counters["latency_us"] =
        benchmark::Counter(seconds * static_cast<double>(client_count) / static_cast<double>(cycles) * 1e6);
    state.SetLabel(str(client_count, " client(s), ", devices, " devices under one key; time = wall/cycles"));
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

BENCHMARK(BM_RequestGrantRelease)
    ->ArgNames({"devices"})
    ->Arg(1)
    ->UseManualTime()
    ->MeasureProcessCPUTime()
    ->Iterations(kLatencyCycles)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_TrackerThroughput)
    ->ArgNames({"devices", "clients"})
    ->Args({1, 1})
    ->Args({static_cast<std::int64_t>(kMaxDevices), 1})
    ->Args({static_cast<std::int64_t>(kMaxDevices), 4})
    ->Args({static_cast<std::int64_t>(kMaxDevices), 16})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Iterations(static_cast<benchmark::IterationCount>(kBatchCycles * kBatches))
    ->Unit(benchmark::kMicrosecond);

// ---- main ---------------------------------------------------------------------------------

std::string limit_text(rlim_t value) {
  return value == RLIM_INFINITY ? std::string("unlimited") : std::to_string(static_cast<unsigned long long>(value));
}

// Raises the soft RLIMIT_NOFILE to the hard limit; false (after saying why) when even
// that is below `needed`.
bool raise_descriptor_limit(rlim_t needed) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    std::fprintf(stderr, "kestrel-bench-tracker: cannot read RLIMIT_NOFILE: %s\n", std::strerror(errno));
    return false;
  }
  if (limit.rlim_cur != limit.rlim_max) {
    rlimit raised = limit;
    // An unlimited hard limit still cannot be set as the soft one (fs.nr_open caps it).
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? std::max<rlim_t>(limit.rlim_cur, needed) : limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    } else {
      std::fprintf(stderr, "kestrel-bench-tracker: cannot raise RLIMIT_NOFILE from %s to %s: %s\n",
                   limit_text(limit.rlim_cur).c_str(), limit_text(raised.rlim_cur).c_str(), std::strerror(errno));
    }
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    std::fprintf(stderr,
                 "kestrel-bench-tracker: needs %llu open files (%zu device agents with two sockets each on "
                 "loopback, plus spare), but RLIMIT_NOFILE allows %s (hard limit %s).\n"
                 "Raise the hard limit (e.g. `ulimit -Hn %llu` as root, or LimitNOFILE= / "
                 "/etc/security/limits.conf) and run again.\n",
                 static_cast<unsigned long long>(needed), kMaxDevices, limit_text(limit.rlim_cur).c_str(),
                 limit_text(limit.rlim_max).c_str(), static_cast<unsigned long long>(needed));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!raise_descriptor_limit(2 * kMaxDevices + kSpareDescriptors)) return 1;
  log::set_level(log::Level::warn);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  const bool clean = shutdown_pools();
  benchmark::Shutdown();
  if (!clean) std::fprintf(stderr, "kestrel-bench-tracker: shutdown was not clean (see the log above)\n");
  return clean && !g_failed ? 0 : 1;
}
