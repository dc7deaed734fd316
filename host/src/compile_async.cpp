// compile_async: submit to the pool, poll the futures on a short timer.
#include "kestrel/host/compile_async.h"

#include <chrono>

namespace kestrel::host {

rpc::awaitable<std::vector<CompileResult>> compile_async(Compiler& compiler, std::vector<CompileRequest> requests) {
  std::vector<std::future<CompileResult>> futures;
  futures.reserve(requests.size());
  for (auto& r : requests) futures.push_back(compiler.submit(std::move(r)));
  std::vector<CompileResult> results;
  results.reserve(futures.size());
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (auto& f : futures) {
    while (f.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
      timer.expires_after(std::chrono::milliseconds(2));
      co_await timer.async_wait(rpc::use_nothrow);
    }
    results.push_back(f.get());
  }
  co_return results;
}

}  // namespace kestrel::host
