// Asking a tracker for its pool (see tracker_query.h).
#include "kestrel/frontend/tracker_query.h"

#include <exception>
#include <optional>

#include "kestrel/rpc/asio.h"

namespace kestrel::frontend {

rpc::TrackerSummary query_tracker(const rpc::Endpoint& tracker, rpc::ClientOptions options,
                                  std::chrono::milliseconds timeout) {
  options.connect_timeout = timeout;
  asio::io_context io;
  std::optional<rpc::TrackerSummary> summary;
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        auto client = co_await rpc::TrackerClient::connect(tracker, options);
        summary = co_await client->summary(timeout);
        client->close();
      },
      [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return std::move(*summary);
}

}  // namespace kestrel::frontend
