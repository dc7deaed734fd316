// Blocking work awaited from a coroutine without blocking its executor and without
// polling: the work runs on a thread of its own, which posts the caller's resumption to
// the caller's executor when it is done. For work of milliseconds and more (model
// fitting, annealing, waiting for a compile pool); a thread per call.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "kestrel/rpc/asio.h"

namespace kestrel::rpc {

// Runs fn() on a new thread; returns its value or rethrows what it threw. The executor
// must be single-threaded (an io_context run by one thread), as every one here is.
template <typename Fn>
awaitable<std::invoke_result_t<Fn>> run_on_thread(Fn fn) {
  using Result = std::invoke_result_t<Fn>;
  struct State {
    explicit State(asio::any_io_executor ex) : done(std::move(ex), std::chrono::steady_clock::time_point::max()) {}
    asio::steady_timer done;
    bool finished = false;  // touched on the executor's thread only
    std::exception_ptr error;
    std::conditional_t<std::is_void_v<Result>, bool, std::optional<Result>> value{};
  };
  auto executor = co_await asio::this_coro::executor;
  auto state = std::make_shared<State>(executor);
  std::thread worker([state, executor, fn = std::move(fn)]() mutable {
    try {
      if constexpr (std::is_void_v<Result>) {
        fn();
      } else {
        state->value.emplace(fn());
      }
    } catch (...) {
      state->error = std::current_exception();
    }
    asio::post(executor, [state] {
      state->finished = true;
      state->done.cancel();
    });
  });
  while (!state->finished) co_await state->done.async_wait(use_nothrow);
  worker.join();
  if (state->error) std::rethrow_exception(state->error);
  if constexpr (!std::is_void_v<Result>) co_return std::move(*state->value);
}

}  // namespace kestrel::rpc
