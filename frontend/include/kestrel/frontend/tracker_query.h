// Asking a tracker for its pool, for every front end: `kestrel query` and Python's
// kestrel.query. Both print or return the summary in the one JSON form of
// host/summary_json.h (`host::to_json(summary, endpoint.to_string())`).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/frontend/options.h"
#include "kestrel/rpc/connection.h"
#include "kestrel/rpc/device_info.h"
#include "kestrel/rpc/tracker_client.h"

namespace kestrel::frontend {

// Connects to the tracker at `tracker` as `options` say (name, token, TLS), asks for its
// summary and closes the connection, on an io_context of its own run on the calling
// thread (a caller holding Python's GIL releases it first). `timeout` bounds the
// connection (it replaces options.connect_timeout) and, again, the answer. Throws
// rpc::RpcError: connection_lost (unreachable, with the address), auth_failed or
// version_mismatch (what to change), timeout.
rpc::TrackerSummary query_tracker(const rpc::Endpoint& tracker, rpc::ClientOptions options,
                                  std::chrono::milliseconds timeout);

// What a query is told: the tracker (127.0.0.1:9190 unless given), the client's token and
// TLS options (the pool's --token-file, --tls-ca, --no-tls) and how long to wait.
struct QueryOptions {
  rpc::Endpoint tracker;
  rpc::ClientOptions client;
  std::chrono::milliseconds timeout{5000};
};
// --tracker, --token-file, --tls-ca, --no-tls, --timeout-ms (the query's, 5000 ms).
const std::vector<OptionSpec>& query_option_specs();
// The query options from `source`; `token` is the client token when the front end read one.
// UsageError for a bad endpoint, contradicting TLS options or a timeout out of range.
QueryOptions query_options(OptionSource& source, std::optional<rpc::Token> token, std::string client_name);

}  // namespace kestrel::frontend
