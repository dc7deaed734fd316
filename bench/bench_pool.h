// Benchmark support: a real local pool for the benchmarks that measure candidates.
// A host::LeasedPool on the embedded local pool (an in-process tracker and one
// kestrel-device child) holding one lease, run by one io thread; the benchmark thread
// hands coroutines to the io thread with on_io() and waits for them.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "kestrel/host/leased_pool.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/host/target.h"
#include "kestrel/base/log.h"

#ifndef KESTREL_DEVICE_BIN_PATH
#define KESTREL_DEVICE_BIN_PATH ""
#endif

namespace kestrel::bench {

// Points LocalPool at the kestrel-device that CMake built, unless the caller chose one
// or one sits next to this executable.
inline void locate_device_binary() {
  if (std::getenv("KESTREL_DEVICE_BIN")) return;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && std::filesystem::exists(self.parent_path() / "kestrel-device", ec)) return;
  std::string built = KESTREL_DEVICE_BIN_PATH;
  if (!built.empty()) ::setenv("KESTREL_DEVICE_BIN", built.c_str(), 0);
}

class BenchPool {
 public:
  // Starts everything and leases the device; throws on any failure. `call_limit` bounds
  // every on_io() hand-off.
  BenchPool(const std::string& client_name, std::chrono::seconds call_limit) : call_limit_(call_limit) {
    host::PoolOptions options;
    options.key = "bench";
    options.client_name = client_name;
    options.wait = std::chrono::seconds(30);  // the device child registers first
    options.reconnect_window = std::chrono::milliseconds(0);
    pool_ = std::make_unique<host::LeasedPool>(options);
    guard_.emplace(asio::make_work_guard(io_));
    std::packaged_task<void()> run([this] { io_.run(); });
    io_done_ = run.get_future();
    io_thread_ = std::thread(std::move(run));
    on_io<void>([this]() -> rpc::awaitable<void> { co_await pool_->open(); });
    target_ = host::target_for_device(pool_->device());
  }
  ~BenchPool() { stop(); }
  BenchPool(const BenchPool&) = delete;
  BenchPool& operator=(const BenchPool&) = delete;

  // Runs `fn` (a coroutine) on the io thread and waits for its result.
  template <typename T>
  T on_io(std::function<rpc::awaitable<T>()> fn) {
    std::future<T> result = asio::co_spawn(io_, std::move(fn), asio::use_future);
    if (result.wait_for(call_limit_) != std::future_status::ready) {
      throw std::runtime_error("the io thread did not answer within " + std::to_string(call_limit_.count()) + " s");
    }
    return result.get();
  }

  std::vector<host::Measurement> measure(const host::Workload& workload, const std::vector<host::Candidate>& candidates,
                                         const rpc::MeasureSettings& options) {
    return on_io<std::vector<host::Measurement>>(
        [this, &workload, &candidates, &options]() -> rpc::awaitable<std::vector<host::Measurement>> {
          co_return co_await pool_->measurer().measure(workload, candidates, options);
        });
  }

  host::MeasureClient& measurer() { return pool_->measurer(); }
  const host::Target& target() const { return target_; }
  const rpc::DeviceInfo& device() const { return pool_->device(); }
  const std::string& key() const { return pool_->options().key; }

  // Releases the lease, closes the client, winds the io thread down and stops the pool.
  // Returns false when the teardown was not clean. Idempotent.
  bool stop() {
    if (!pool_) return true;
    bool clean = true;
    try {
      on_io<void>([this]() -> rpc::awaitable<void> { co_await pool_->close(); });
    } catch (const std::exception& e) {
      log::error("bench", "closing the pool: ", e.what());
      clean = false;
    }
    guard_.reset();
    if (io_thread_.joinable()) {
      if (io_done_.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        log::error("bench", "the io thread still had work after shutdown; stopping it by force");
        io_.stop();
        clean = false;
      }
      io_thread_.join();
    }
    pool_.reset();
    return clean;
  }

 private:
  std::chrono::seconds call_limit_;
  asio::io_context io_;
  std::unique_ptr<host::LeasedPool> pool_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::thread io_thread_;
  std::future<void> io_done_;
  host::Target target_;
};

}  // namespace kestrel::bench
