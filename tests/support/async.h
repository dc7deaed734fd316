// Test support: run a coroutine test body on a fresh io_context with a time limit.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <functional>

#include "kestrel/rpc/asio.h"

namespace kestrel::test {

// Runs `body` (a coroutine taking the io_context) to completion. Then calls
// `shutdown` (stop trackers/agents) and requires the io_context to drain within
// `drain_limit`, which checks that everything shuts down cleanly.
inline void run_async(asio::io_context& io, std::function<rpc::awaitable<void>()> body,
                      std::function<void()> shutdown = {},
                      std::chrono::milliseconds limit = std::chrono::seconds(30),
                      std::chrono::milliseconds drain_limit = std::chrono::seconds(5)) {
  std::exception_ptr failure;
  bool finished = false;
  asio::co_spawn(io, body(), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
    if (shutdown) shutdown();
  });
  auto start = std::chrono::steady_clock::now();
  while (!finished && std::chrono::steady_clock::now() - start < limit) {
    if (io.run_one_for(std::chrono::milliseconds(100)) == 0 && io.stopped()) break;
  }
  if (!finished) {
    if (shutdown) shutdown();
    io.run_for(drain_limit);
    FAIL("test body did not finish within " << limit.count() << " ms");
  }
  if (failure) std::rethrow_exception(failure);
  io.restart();
  auto drain_start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - drain_start < drain_limit) {
    if (io.run_one_for(std::chrono::milliseconds(50)) == 0 && io.stopped()) break;
  }
  INFO("io_context still had work after shutdown");
  CHECK(io.stopped());
}

// Suspends the calling coroutine for `d`.
inline rpc::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(rpc::use_nothrow);
}

// Polls `condition` every 10 ms until it holds or `limit` passes; returns whether it held.
template <typename Condition>
rpc::awaitable<bool> eventually(Condition condition, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) co_return false;
    co_await sleep_for(std::chrono::milliseconds(10));
  }
  co_return true;
}

// Runs `work` on a fresh io_context until it ends; its result, or what it threw.
template <typename T>
T sync(rpc::awaitable<T> work) {
  asio::io_context io;
  auto future = asio::co_spawn(io, std::move(work), asio::use_future);
  io.run();
  return future.get();
}

}  // namespace kestrel::test
