// Asking a tracker for its pool (see tracker_query.h).
#include "kestrel/frontend/tracker_query.h"

#include <exception>
#include <optional>

#include "kestrel/base/usage_error.h"
#include "kestrel/rpc/asio.h"

namespace kestrel::frontend {
namespace {

// The query's own --tracker (it has a default) and --timeout-ms (not the measuring one);
// the token and TLS options are the pool's.
const OptionSpec kTracker{"tracker", OptionKind::text, "HOST:PORT", "tracker to ask", "127.0.0.1:9190", 0, 0};
const OptionSpec kTimeout{"timeout-ms", OptionKind::integer, "MS", "give up after this long", "5000", 1, 3'600'000};

}  // namespace

const std::vector<OptionSpec>& query_option_specs() {
  static const std::vector<OptionSpec> specs = {kTracker, option_spec("token-file"), option_spec("tls-ca"),
                                                option_spec("no-tls"), kTimeout};
  return specs;
}

QueryOptions query_options(OptionSource& source, std::optional<rpc::Token> token, std::string client_name) {
  QueryOptions out;
  out.tracker = endpoint_of(source, kTracker);
  const OptionSpec& no_tls = option_spec("no-tls");
  const OptionSpec& tls_ca = option_spec("tls-ca");
  out.client.name = std::move(client_name);
  out.client.token = std::move(token);
  out.client.tls.disabled = source.flag(no_tls);
  out.client.tls.ca_file = text_of(source, tls_ca);
  if (out.client.tls.disabled && !out.client.tls.ca_file.empty()) {
    throw UsageError(source.spell(tls_ca) + " and " + source.spell(no_tls) + " contradict each other: drop one");
  }
  out.timeout = std::chrono::milliseconds(integer_of(source, kTimeout));
  return out;
}

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
