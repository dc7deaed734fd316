// The dashboard's routing table and answers (see http_routes.h).
#include "http_routes.h"

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>
#include <sstream>

namespace kestrel::embedded {
std::string_view dashboard_html();  // tracker/CMakeLists.txt: kestrel_embed
std::string_view dashboard_js();
std::string_view dashboard_css();
}  // namespace kestrel::embedded

namespace kestrel::tracker {
namespace http = boost::beast::http;

namespace {

constexpr std::string_view kJson = "application/json";
constexpr std::string_view kHtml = "text/html; charset=utf-8";
constexpr std::string_view kMetricsType = "text/plain; version=0.0.4; charset=utf-8";

enum class Page { page, js, css, state, pool, sessions, events, stream, metrics, login, healthz };

struct Route {
  std::string_view path;
  Page page;
};

constexpr Route kRoutes[] = {
    {"/", Page::page},
    {"/assets/dashboard.js", Page::js},
    {"/assets/dashboard.css", Page::css},
    {"/api/state", Page::state},
    {"/api/pool", Page::pool},
    {"/api/sessions", Page::sessions},
    {"/api/events", Page::events},
    {"/api/stream", Page::stream},
    {"/metrics", Page::metrics},
    {"/login", Page::login},
    {"/healthz", Page::healthz},
};

std::optional<Page> find_page(std::string_view target) {
  target = target.substr(0, target.find_first_of("?#"));
  for (const auto& route : kRoutes) {
    if (route.path == target) return route.page;
  }
  return std::nullopt;
}

HttpResponse make(unsigned version, http::status status, std::string_view type, std::string body) {
  HttpResponse res{status, version};
  res.set(http::field::content_type, type);
  add_security_headers(res);
  res.body() = std::move(body);
  return res;
}

HttpResponse redirect(unsigned version, std::string_view location) {
  HttpResponse res = make(version, http::status::see_other, "text/plain; charset=utf-8", "see " + std::string(location));
  res.set(http::field::location, location);
  return res;
}

std::string login_page(bool wrong) {
  std::string page =
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>kestrel tracker: log in</title>\n"
      "<link rel=\"icon\" href=\"data:,\">\n"  // no /favicon.ico request (a 404 in the console)
      "<link rel=\"stylesheet\" href=\"/assets/dashboard.css\">\n</head>\n<body>\n"
      "<main class=\"login\">\n<h1>kestrel tracker</h1>\n";
  if (wrong) page += "<p class=\"error\" role=\"alert\">that token is not one of this tracker's dashboard tokens</p>\n";
  page +=
      "<form method=\"post\" action=\"/login\">\n"
      "<label for=\"token\">token (the tracker's client token or any-role token)</label>\n"
      "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus>\n"
      "<button type=\"submit\">log in</button>\n</form>\n</main>\n</body>\n</html>\n";
  return page;
}

constexpr std::string_view kUnauthorized =
    "authentication required: send 'Authorization: Bearer <token>' or log in at /login";

}  // namespace

HttpResponse json_error(unsigned version, http::status status, std::string_view message) {
  std::string body = "{\"error\":\"";
  body += message;
  body += "\"}";
  return make(version, status, kJson, std::move(body));
}

std::string sse_event(std::string_view name, std::string_view data) {
  std::string event = "event: ";
  event += name;
  event += '\n';
  while (true) {
    const auto end = data.find('\n');
    event += "data: ";
    event += data.substr(0, end);
    event += '\n';
    if (end == std::string_view::npos) break;
    data.remove_prefix(end + 1);
  }
  event += '\n';
  return event;
}

HttpPlan HttpRoutes::plan(const HttpRequest& request) const {
  const unsigned version = request.version();
  const auto page = find_page(request.target());
  if (!page) return {json_error(version, http::status::not_found, "no such page"), {}, false};

  const auto method = request.method();
  const bool read = method == http::verb::get || method == http::verb::head;
  if (!(read || (method == http::verb::post && *page == Page::login))) {
    HttpResponse res = json_error(version, http::status::method_not_allowed, "method not allowed");
    res.set(http::field::allow, *page == Page::login ? "GET, HEAD, POST" : "GET, HEAD");
    return {std::move(res), {}, false};
  }

  // Open to everyone: the probe, the login form and the page's static files (code, no data).
  switch (*page) {
    case Page::healthz:
      return {make(version, http::status::ok, "text/plain; charset=utf-8", "ok"), {}, false};
    case Page::js:
      return {make(version, http::status::ok, "text/javascript; charset=utf-8", std::string(embedded::dashboard_js())),
              {}, false};
    case Page::css:
      return {make(version, http::status::ok, "text/css; charset=utf-8", std::string(embedded::dashboard_css())), {},
              false};
    case Page::login: {
      if (method != http::verb::post) return {make(version, http::status::ok, kHtml, login_page(false)), {}, false};
      if (!auth_.required()) return {redirect(version, "/"), {}, false};
      const auto token = form_field(request.body(), "token");
      const auto cookie = token ? auth_.login(*token) : std::nullopt;
      if (!cookie) return {make(version, http::status::unauthorized, kHtml, login_page(true)), {}, false};
      HttpResponse res = redirect(version, "/");
      res.set(http::field::set_cookie, std::string(kDashboardCookieName) + "=" + *cookie +
                                           "; HttpOnly; Secure; SameSite=Strict; Path=/");
      return {std::move(res), {}, false};
    }
    default:
      break;
  }

  if (!auth_.allows(request[http::field::authorization], request[http::field::cookie])) {
    if (*page == Page::page) return {redirect(version, "/login"), {}, false};
    HttpResponse res = json_error(version, http::status::unauthorized, kUnauthorized);
    res.set(http::field::www_authenticate, "Bearer realm=\"kestrel\"");
    return {std::move(res), {}, false};
  }

  switch (*page) {
    case Page::page:
      return {make(version, http::status::ok, kHtml, std::string(embedded::dashboard_html())), {}, false};
    case Page::state:
      return {{}, SnapshotDocument::state, false};
    case Page::pool:
      return {{}, SnapshotDocument::pool, false};
    case Page::sessions:
      return {{}, SnapshotDocument::sessions, false};
    case Page::events:
      return {{}, SnapshotDocument::events, false};
    case Page::metrics:
      return {{}, SnapshotDocument::metrics, false};
    case Page::stream:
      return {{}, {}, true};
    default:
      return {json_error(version, http::status::not_found, "no such page"), {}, false};
  }
}

HttpResponse HttpRoutes::from_snapshot(const HttpRequest& request, SnapshotDocument document,
                                       const std::shared_ptr<const DashboardSnapshot>& snapshot) const {
  const unsigned version = request.version();
  if (!snapshot) {
    HttpResponse res = json_error(version, http::status::service_unavailable,
                                  "the tracker has not published a dashboard snapshot yet: retry in a moment");
    res.set(http::field::retry_after, "1");
    return res;
  }
  switch (document) {
    case SnapshotDocument::state:
      return make(version, http::status::ok, kJson, snapshot->state_json);
    case SnapshotDocument::pool:
      return make(version, http::status::ok, kJson, snapshot->pool_json);
    case SnapshotDocument::sessions:
      return make(version, http::status::ok, kJson, snapshot->sessions_json);
    case SnapshotDocument::events:
      return make(version, http::status::ok, kJson, snapshot->events_json);
    case SnapshotDocument::metrics:
      return make(version, http::status::ok, kMetricsType, snapshot->metrics_text);
  }
  return make(version, http::status::ok, kJson, snapshot->state_json);
}

std::string HttpRoutes::stream_head() const {
  http::response<http::empty_body> head{http::status::ok, 11};
  head.set(http::field::content_type, "text/event-stream");
  add_security_headers(head);
  head.set("X-Accel-Buffering", "no");
  std::ostringstream out;
  out << head.base();
  return out.str();
}

}  // namespace kestrel::tracker
