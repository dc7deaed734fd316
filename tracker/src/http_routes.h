// What each dashboard request gets: the routing table, authentication, the pages and
// the JSON errors, and every response's security headers. Pure: no sockets, no waiting
// (http_server.cpp does those). See docs/dashboard.md.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http_auth.h"
#include "kestrel/tracker/dashboard_feed.h"

namespace kestrel::tracker {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

// The documents a snapshot serves.
enum class SnapshotDocument { state, pool, sessions, events, metrics };

// What to do with a request: answer now, answer from a snapshot, or start the stream.
struct HttpPlan {
  std::optional<HttpResponse> response;       // set: send it
  std::optional<SnapshotDocument> document;   // set: send this document of a fresh snapshot
  bool stream = false;                        // GET /api/stream: the live event stream
};

class HttpRoutes {
 public:
  explicit HttpRoutes(HttpAuth auth) : auth_(std::move(auth)) {}

  HttpPlan plan(const HttpRequest& request) const;
  // The answer to `document` from `snapshot` (503 when there is none yet).
  HttpResponse from_snapshot(const HttpRequest& request, SnapshotDocument document,
                             const std::shared_ptr<const DashboardSnapshot>& snapshot) const;
  // The head of the /api/stream response (status line and headers, no length: the
  // stream ends when either side closes it).
  std::string stream_head() const;

 private:
  HttpAuth auth_;
};

// A JSON error answer ({"error":"..."}) with the security headers; `message` must not
// need escaping.
HttpResponse json_error(unsigned version, boost::beast::http::status status, std::string_view message);
// Adds the headers every dashboard response carries (no caching, no sniffing, no
// framing, a content security policy that allows only the server's own files).
template <class Fields>
void add_security_headers(Fields& fields) {
  fields.set(boost::beast::http::field::cache_control, "no-store");
  fields.set("X-Content-Type-Options", "nosniff");
  fields.set("Content-Security-Policy",
             "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:");
  fields.set("X-Frame-Options", "DENY");
}
// One server-sent event: `event: <name>` and each line of `data` as a `data:` line.
std::string sse_event(std::string_view name, std::string_view data);

}  // namespace kestrel::tracker
