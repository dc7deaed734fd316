// The dashboard's HTTP server through the real path: a real HttpServer on loopback,
// real sockets (plain and TLS, the client side on OpenSSL directly), and a
// DashboardFeed that each test publishes into by hand (as the tracker would).
#include "kestrel/tracker/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <map>
#include <optional>
#include <thread>

#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/tls.h"
#include "support/process.h"

using namespace kestrel;
using namespace kestrel::tracker;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "dashboard-token-0123456789";

// A connected loopback socket (closed when destroyed), optionally with TLS on top.
class Client {
 public:
  // `receive_buffer`: a small one (bytes) makes a reader that does not read fall behind soon.
  // `source`: the local address to connect from (127.0.0.n: another remote address to the
  // server).
  Client(std::uint16_t port, bool tls, int receive_buffer = 0, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    timeval timeout{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (source) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      REQUIRE(::inet_pton(AF_INET, source, &from.sin_addr) == 1);
      REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    if (tls) {
      ctx_ = SSL_CTX_new(TLS_client_method());
      REQUIRE(ctx_);
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
      ssl_ = SSL_new(ctx_);
      SSL_set_fd(ssl_, fd_);
      REQUIRE(SSL_connect(ssl_) == 1);
    }
  }
  ~Client() {
    if (ssl_) SSL_free(ssl_);
    if (ctx_) SSL_CTX_free(ctx_);
    ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool send(const std::string& data) {
    if (ssl_) return SSL_write(ssl_, data.data(), static_cast<int>(data.size())) == static_cast<int>(data.size());
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Some bytes; empty on close, error or timeout.
  std::string read_some() {
    char buf[8192];
    const auto n = ssl_ ? SSL_read(ssl_, buf, sizeof buf) : ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }
  std::string read_all() {
    std::string all;
    for (std::string part; !(part = read_some()).empty();) all += part;
    return all;
  }
  // Reads until `text` has arrived (true) or the stream ends or stalls (false).
  // `from`: where in what was received to look for it.
  bool read_until(const std::string& text, std::size_t from = 0) {
    while (received_.find(text, from) == std::string::npos) {
      auto part = read_some();
      if (part.empty()) return false;
      received_ += part;
    }
    return true;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string received_;
};

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string raw;

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

Response parse(const std::string& raw) {
  Response res;
  res.raw = raw;
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return res;
  res.status = std::stoi(raw.substr(9, 3));
  std::size_t at = raw.find("\r\n") + 2;
  while (at < head_end) {
    const auto end = raw.find("\r\n", at);
    const auto line = raw.substr(at, end - at);
    const auto colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    res.headers[name] = value;
    at = end + 2;
  }
  res.body = raw.substr(head_end + 4);
  return res;
}

// One request on a fresh connection (`Connection: close`), the whole answer.
Response request(std::uint16_t port, const std::string& method, const std::string& path,
                 const std::string& extra_headers = "", const std::string& body = "", bool tls = false,
                 const char* source = nullptr) {
  Client client(port, tls, 0, source);
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty()) req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  REQUIRE(client.send(req));
  return parse(client.read_all());
}

DashboardSnapshot snapshot(int n) {
  DashboardSnapshot s;
  s.state_json = "{\"tracker\":{\"n\":" + std::to_string(n) + "},\"pool\":{},\"sessions\":[],\"events\":[]}";
  s.pool_json = "{\"pool\":" + std::to_string(n) + "}";
  s.sessions_json = "[" + std::to_string(n) + "]";
  s.events_json = "[{\"n\":" + std::to_string(n) + "}]";
  s.metrics_text = "# HELP kestrel_uptime_seconds x\n# TYPE kestrel_uptime_seconds gauge\nkestrel_uptime_seconds " +
                   std::to_string(n) + "\n";
  return s;
}

void check_security_headers(const Response& res) {
  INFO(res.raw.substr(0, 600));
  CHECK(res.header("cache-control") == "no-store");
  CHECK(res.header("x-content-type-options") == "nosniff");
  CHECK(res.header("content-security-policy") ==
        "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:");
  CHECK(res.header("x-frame-options") == "DENY");
}

struct Server {
  explicit Server(HttpOptions options = {}, std::vector<rpc::Token> tokens = {},
                  std::shared_ptr<const rpc::TlsContext> tls = nullptr)
      : feed(std::make_shared<DashboardFeed>()), http(options, feed, std::move(tokens), std::move(tls)) {
    http.start();
  }
  std::shared_ptr<DashboardFeed> feed;
  HttpServer http;
};

}  // namespace

TEST_CASE("the dashboard serves its page, assets, documents and metrics with their types and security headers",
          "[dashboard][http]") {
  Server server;
  server.feed->publish(snapshot(1));
  const auto port = server.http.port();
  CHECK(server.http.url() == "http://127.0.0.1:" + std::to_string(port) + "/");

  auto page = request(port, "GET", "/");
  CHECK(page.status == 200);
  CHECK(page.header("content-type") == "text/html; charset=utf-8");
  CHECK_THAT(page.body, Catch::Contains("/assets/dashboard.js"));
  check_security_headers(page);
  auto head = request(port, "HEAD", "/");
  CHECK(head.status == 200);
  CHECK(head.header("content-length") == std::to_string(page.body.size()));
  CHECK(head.body.empty());

  auto js = request(port, "GET", "/assets/dashboard.js");
  CHECK(js.status == 200);
  CHECK(js.header("content-type") == "text/javascript; charset=utf-8");
  CHECK_FALSE(js.body.empty());
  auto css = request(port, "GET", "/assets/dashboard.css");
  CHECK(css.status == 200);
  CHECK(css.header("content-type") == "text/css; charset=utf-8");

  const auto expected = snapshot(1);
  for (const auto& [path, body] : std::map<std::string, std::string>{{"/api/state", expected.state_json},
                                                                    {"/api/pool", expected.pool_json},
                                                                    {"/api/sessions", expected.sessions_json},
                                                                    {"/api/events", expected.events_json}}) {
    INFO(path);
    auto res = request(port, "GET", path);
    CHECK(res.status == 200);
    CHECK(res.header("content-type") == "application/json");
    CHECK(res.body == body);
    check_security_headers(res);
  }
  auto metrics = request(port, "GET", "/metrics");
  CHECK(metrics.status == 200);
  CHECK(metrics.header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(metrics.body == expected.metrics_text);
  auto health = request(port, "GET", "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok");
  check_security_headers(health);
  // Each request counts as interest: the tracker keeps publishing.
  CHECK(server.feed->wanted(std::chrono::steady_clock::now()));
}

TEST_CASE("the dashboard answers unknown pages with 404 and other methods with 405, in JSON", "[dashboard][http]") {
  Server server;
  server.feed->publish(snapshot(1));
  const auto port = server.http.port();
  auto missing = request(port, "GET", "/api/nothing");
  CHECK(missing.status == 404);
  CHECK(missing.header("content-type") == "application/json");
  CHECK_THAT(missing.body, Catch::StartsWith("{\"error\":\""));
  check_security_headers(missing);
  auto post = request(port, "POST", "/api/state", "", "x=1");
  CHECK(post.status == 405);
  CHECK(post.header("allow") == "GET, HEAD");
  CHECK_THAT(post.body, Catch::StartsWith("{\"error\":\""));
  CHECK(request(port, "DELETE", "/").status == 405);
  CHECK(request(port, "PUT", "/login").header("allow") == "GET, HEAD, POST");
  // A query string does not change the page.
  CHECK(request(port, "GET", "/healthz?probe=1").status == 200);
}

TEST_CASE("the dashboard serves several requests on one kept-alive connection", "[dashboard][http]") {
  Server server;
  server.feed->publish(snapshot(3));
  Client client(server.http.port(), false);
  REQUIRE(client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /api/pool HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(client.read_until(snapshot(3).pool_json));
  CHECK(client.received().rfind("HTTP/1.1 200", 0) == 0);
  CHECK(client.received().find("HTTP/1.1 200", 10) != std::string::npos);
}

TEST_CASE("a request that finds no fresh snapshot asks the tracker for one, and gets 503 when none comes",
          "[dashboard][http]") {
  HttpOptions options;
  options.interval = 100ms;
  Server server(options);
  const auto port = server.http.port();

  // No refresher: nothing arrives within the wait.
  const auto start = std::chrono::steady_clock::now();
  auto none = request(port, "GET", "/api/state");
  CHECK(none.status == 503);
  CHECK(none.header("content-type") == "application/json");
  CHECK_THAT(none.body, Catch::Contains("not published"));
  CHECK(std::chrono::steady_clock::now() - start >= 1900ms);

  // A stale snapshot with a tracker that answers the request: the request gets the new one.
  server.feed->publish(snapshot(1));
  std::this_thread::sleep_for(250ms);  // older than 2 x interval
  int refreshes = 0;
  server.feed->set_refresher([&] {
    ++refreshes;
    server.feed->publish(snapshot(2));
  });
  auto fresh = request(port, "GET", "/api/pool");
  CHECK(fresh.status == 200);
  CHECK(fresh.body == snapshot(2).pool_json);
  CHECK(refreshes == 1);
  // A fresh one is served as it is.
  CHECK(request(port, "GET", "/api/pool").body == snapshot(2).pool_json);
  CHECK(refreshes == 1);
}

TEST_CASE("the live stream sends the state at once and each new snapshot, and counts as a viewer while open",
          "[dashboard][http]") {
  Server server;
  server.feed->publish(snapshot(1));
  {
    Client client(server.http.port(), false);
    REQUIRE(client.send("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
    REQUIRE(client.read_until("data: " + snapshot(1).state_json + "\n\n"));
    const auto res = parse(client.received());
    CHECK(res.status == 200);
    CHECK(res.header("content-type") == "text/event-stream");
    check_security_headers(res);
    CHECK_THAT(client.received(), Catch::Contains("\r\n\r\nevent: state\ndata: "));
    CHECK(test::wait_for([&] { return server.feed->viewers() == 1; }));

    server.feed->publish(snapshot(2));
    REQUIRE(client.read_until("event: state\ndata: " + snapshot(2).state_json + "\n\n"));
  }
  // The client left: no viewer any more.
  CHECK(test::wait_for([&] { return server.feed->viewers() == 0; }));
}

TEST_CASE("a live stream that reads slower than the snapshots come gets the newest state, not a backlog",
          "[dashboard][http]") {
  Server server;
  // Snapshots of 512 KiB: 60 of them (30 MiB) are far more than the socket buffers hold.
  auto big = [](int n) {
    DashboardSnapshot s = snapshot(n);
    s.state_json = "{\"tracker\":{\"n\":" + std::to_string(n) + "},\"pad\":\"" + std::string(512 * 1024, 'x') + "\"}";
    return s;
  };
  server.feed->publish(big(1));
  Client client(server.http.port(), false, 4096);
  REQUIRE(client.send("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(test::wait_for([&] { return server.feed->viewers() == 1; }));
  constexpr int kPublished = 60;
  for (int n = 2; n <= kPublished; ++n) {  // the client reads nothing meanwhile
    server.feed->publish(big(n));
    std::this_thread::sleep_for(5ms);
  }
  const std::string last = "{\"tracker\":{\"n\":" + std::to_string(kPublished) + "}";
  REQUIRE(client.read_until(last));
  std::size_t events = 0;
  for (auto at = client.received().find("event: state"); at != std::string::npos;
       at = client.received().find("event: state", at + 1)) {
    ++events;
  }
  // The server kept at most the event being written and the newest one waiting: the
  // reader skipped the states it was too slow for and still got the last one.
  CHECK(events < static_cast<std::size_t>(kPublished) / 2);
  CHECK(events >= 2);
}

TEST_CASE("with a token the dashboard refuses requests without it and takes a bearer token or the login cookie",
          "[dashboard][http][auth]") {
  Server server({}, {rpc::Token(kToken)}, rpc::TlsContext::server("", ""));
  server.feed->publish(snapshot(1));
  const auto port = server.http.port();
  CHECK(server.http.url() == "https://127.0.0.1:" + std::to_string(port) + "/");
  auto get = [&](const std::string& path, const std::string& headers = "") {
    return request(port, "GET", path, headers, "", true);
  };

  auto refused = get("/api/state");
  CHECK(refused.status == 401);
  CHECK(refused.header("www-authenticate") == "Bearer realm=\"kestrel\"");
  CHECK(refused.header("content-type") == "application/json");
  CHECK(refused.body.find(snapshot(1).state_json) == std::string::npos);
  check_security_headers(refused);
  CHECK(get("/metrics").status == 401);
  CHECK(get("/api/stream").status == 401);
  auto page = get("/");
  CHECK(page.status == 303);
  CHECK(page.header("location") == "/login");
  CHECK(get("/healthz").status == 200);
  CHECK(get("/login").status == 200);
  CHECK(get("/api/state", "Authorization: Bearer wrong-token-0123456789\r\n").status == 401);
  CHECK(get("/api/state", "Cookie: kestrel_dashboard=" + std::string(64, '0') + "\r\n").status == 401);

  auto bearer = get("/api/state", "Authorization: Bearer " + kToken + "\r\n");
  CHECK(bearer.status == 200);
  CHECK(bearer.body == snapshot(1).state_json);
  CHECK(get("/metrics", "Authorization: Bearer " + kToken + "\r\n").status == 200);

  auto wrong = request(port, "POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n",
                       "token=not-the-token", true);
  CHECK(wrong.status == 401);
  CHECK(wrong.header("set-cookie").empty());
  CHECK(wrong.header("content-type") == "text/html; charset=utf-8");

  auto login = request(port, "POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n",
                       "token=" + kToken, true);
  CHECK(login.status == 303);
  CHECK(login.header("location") == "/");
  const auto cookie = login.header("set-cookie");
  CHECK_THAT(cookie, Catch::StartsWith("kestrel_dashboard=") && Catch::Contains("; HttpOnly") &&
                         Catch::Contains("; Secure") && Catch::Contains("; SameSite=Strict") &&
                         Catch::Contains("; Path=/"));
  CHECK(cookie.find(kToken) == std::string::npos);  // the cookie is a MAC, not the token
  const auto pair = cookie.substr(0, cookie.find(';'));
  auto with_cookie = get("/", "Cookie: theme=dark; " + pair + "\r\n");
  CHECK(with_cookie.status == 200);
  CHECK(with_cookie.header("content-type") == "text/html; charset=utf-8");
  CHECK(get("/api/events", "Cookie: " + pair + "\r\n").body == snapshot(1).events_json);
}

TEST_CASE("with a token the dashboard speaks HTTPS only: a plain HTTP request gets a 400 saying so",
          "[dashboard][http][auth]") {
  Server server({}, {rpc::Token(kToken)}, rpc::TlsContext::server("", ""));
  server.feed->publish(snapshot(1));
  auto plain = request(server.http.port(), "GET", "/api/state", "Authorization: Bearer " + kToken + "\r\n");
  CHECK(plain.status == 400);
  CHECK_THAT(plain.body, Catch::Contains("HTTPS only"));
  CHECK(plain.raw.find(snapshot(1).state_json) == std::string::npos);
  // Still serving HTTPS afterwards.
  CHECK(request(server.http.port(), "GET", "/healthz", "", "", true).status == 200);
}

TEST_CASE("the dashboard refuses oversized requests", "[dashboard][http]") {
  Server server;
  const auto port = server.http.port();
  auto head = request(port, "GET", "/healthz", "X-Padding: " + std::string(10000, 'a') + "\r\n");
  CHECK((head.status == 431 || (head.status == 0 && head.raw.empty())));
  auto body = request(port, "POST", "/login", "", std::string(9000, 'b'));
  CHECK(body.status == 413);
  CHECK(request(port, "GET", "/healthz").status == 200);
}

// Seconds until the server closes `client`'s connection (it reads and drops what comes).
double seconds_until_closed(Client& client) {
  const auto start = std::chrono::steady_clock::now();
  client.read_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A kept-alive connection that has had one answer (so it is open on the server's side
// too, idle between requests).
std::unique_ptr<Client> idle_client(std::uint16_t port, const char* source = nullptr) {
  auto client = std::make_unique<Client>(port, false, 0, source);
  REQUIRE(client->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(client->read_until("\r\n\r\nok"));
  std::this_thread::sleep_for(20ms);  // a distinct idle time for each
  return client;
}

bool still_served(Client& client) {
  const auto before = client.received().size();
  return client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") && client.read_until("\r\n\r\nok", before);
}

TEST_CASE("past its connection cap the dashboard closes the connection idle longest and serves the newcomer",
          "[dashboard][http]") {
  HttpOptions options;
  options.max_connections = 2;
  Server server(options);
  const auto port = server.http.port();
  auto idle1 = idle_client(port);
  auto idle2 = idle_client(port);
  CHECK(request(port, "GET", "/healthz").status == 200);
  // The server closed the one idle longest, at once (not the client's 5 s timeout).
  CHECK(seconds_until_closed(*idle1) < 3);
  CHECK(still_served(*idle2));
}

TEST_CASE("the dashboard closes a connection that has not sent its request to make room, the longest waiting first",
          "[dashboard][http]") {
  HttpOptions options;
  options.max_connections = 3;
  Server server(options);
  const auto port = server.http.port();
  Client silent(port, false);  // sends nothing
  std::this_thread::sleep_for(20ms);
  Client partial(port, false);
  REQUIRE(partial.send("GET /healthz HTTP/1.1\r\n"));  // half a request
  std::this_thread::sleep_for(20ms);
  auto idle = idle_client(port);
  auto newcomer = idle_client(port);  // the fourth: room made
  CHECK(seconds_until_closed(silent) < 3);
  CHECK(request(port, "GET", "/").status == 200);  // the fourth again
  CHECK(seconds_until_closed(partial) < 3);
  CHECK(still_served(*idle));
  CHECK(still_served(*newcomer));
}

TEST_CASE("a flood of dashboard connections from one address takes only its share: its own oldest make room",
          "[dashboard][http]") {
  HttpOptions options;
  options.max_connections = 100;
  options.max_connections_per_address = 2;
  Server server(options);
  const auto port = server.http.port();
  auto other = idle_client(port, "127.0.0.3");  // idle longest of all, but another address's
  auto first = idle_client(port, "127.0.0.2");
  auto second = idle_client(port, "127.0.0.2");
  CHECK(request(port, "GET", "/healthz", "", "", false, "127.0.0.2").status == 200);
  CHECK(seconds_until_closed(*first) < 3);
  CHECK(still_served(*second));
  CHECK(still_served(*other));
}

TEST_CASE("when every dashboard connection is busy on the server's side a newcomer is closed at once",
          "[dashboard][http]") {
  HttpOptions options;
  options.max_connections = 1;
  Server server(options);  // nothing published: a request for a document waits 2 s for it
  const auto port = server.http.port();
  Client waiting(port, false);
  REQUIRE(waiting.send("GET /api/state HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(300ms);
  CHECK(request(port, "GET", "/healthz").raw.empty());
  CHECK(waiting.read_until("not published"));  // its 503 after the wait
  CHECK(test::wait_for([&] { return request(port, "GET", "/healthz").status == 200; }, 5s));
}

TEST_CASE("the dashboard's open streams are counted apart: never closed to make room, past their own cap 503",
          "[dashboard][http]") {
  HttpOptions options;
  options.max_connections = 1;
  options.max_streams = 2;
  options.max_streams_per_address = 1;
  Server server(options);
  server.feed->publish(snapshot(1));
  const auto port = server.http.port();
  Client stream(port, false, 0, "127.0.0.2");
  REQUIRE(stream.send("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(stream.read_until("event: state"));
  // Its address has its one stream: 503 with Retry-After (in the one request slot).
  auto refused = request(port, "GET", "/api/stream", "", "", false, "127.0.0.2");
  CHECK(refused.status == 503);
  CHECK(refused.header("retry-after") == "10");
  CHECK_THAT(refused.body, Catch::Contains("too many open streams"));
  // Another address gets the second; a third stream is past max_streams.
  Client stream2(port, false, 0, "127.0.0.3");
  REQUIRE(stream2.send("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(stream2.read_until("event: state"));
  CHECK(request(port, "GET", "/api/stream", "", "", false, "127.0.0.4").status == 503);
  // Idle connections past the cap of one close each other, never a stream.
  {
    std::vector<std::unique_ptr<Client>> flood;
    for (int i = 0; i < 5; ++i) flood.push_back(std::make_unique<Client>(port, false));
    CHECK(request(port, "GET", "/healthz").status == 200);
  }
  server.feed->publish(snapshot(2));
  CHECK(stream.read_until("data: " + snapshot(2).state_json));
  CHECK(stream2.read_until("data: " + snapshot(2).state_json));
}

TEST_CASE("a dashboard request's headers must come within the header timeout (the first: of the connection's start)",
          "[dashboard][http]") {
  HttpOptions options;
  options.header_timeout = 300ms;
  Server server(options);
  const auto port = server.http.port();
  Client silent(port, false);
  CHECK(seconds_until_closed(silent) < 2);
  Client slow(port, false);
  REQUIRE(slow.send("GET /healthz HTTP/1.1\r\n"));
  CHECK(seconds_until_closed(slow) < 2);
  // A later request on a kept-alive connection: from its first byte.
  auto kept = idle_client(port);
  std::this_thread::sleep_for(500ms);  // idle (idle_timeout), not yet a request
  REQUIRE(kept->send("G"));
  CHECK(seconds_until_closed(*kept) < 2);
  CHECK(request(port, "GET", "/healthz").status == 200);
}

TEST_CASE("with HTTPS the dashboard's TLS handshake and first request headers are under the header timeout",
          "[dashboard][http][auth]") {
  HttpOptions options;
  options.header_timeout = 500ms;
  Server server(options, {rpc::Token(kToken)}, rpc::TlsContext::server("", ""));
  const auto port = server.http.port();
  Client silent(port, false);  // no handshake at all
  CHECK(seconds_until_closed(silent) < 2);
  Client stalled(port, false);
  REQUIRE(stalled.send(std::string("\x16\x03\x01", 3)));  // the start of a ClientHello
  CHECK(seconds_until_closed(stalled) < 2);
  const auto start = std::chrono::steady_clock::now();
  Client quiet(port, true);  // a whole handshake, then no request
  CHECK(seconds_until_closed(quiet) < 2);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(request(port, "GET", "/healthz", "", "", true).status == 200);
}

TEST_CASE("stopping the dashboard closes its connections and can be repeated", "[dashboard][http]") {
  Server server;
  server.feed->publish(snapshot(1));
  Client stream(server.http.port(), false);
  REQUIRE(stream.send("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(stream.read_until("event: state"));
  server.http.stop();
  server.http.stop();
  // The server closed the stream: it ends at once, long before the client's 5 s timeout.
  const auto start = std::chrono::steady_clock::now();
  stream.read_all();
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  CHECK(server.feed->viewers() == 0);
  // Publishing after the stop reaches nobody and harms nothing.
  server.feed->publish(snapshot(2));
}

TEST_CASE("the dashboard says which address it cannot listen on", "[dashboard][http]") {
  HttpOptions options;
  options.host = "203.0.113.7";  // not an address of this machine
  CHECK_THROWS_WITH(HttpServer(options, std::make_shared<DashboardFeed>(), {}, nullptr),
                    Catch::Contains("cannot serve the dashboard on 203.0.113.7:0"));
}

TEST_CASE("the dashboard drops a client that sends its request too slowly, and closes idle kept-alive connections",
          "[dashboard][http]") {
  HttpOptions options;
  options.request_timeout = 400ms;
  options.idle_timeout = 300ms;
  Server server(options);
  const auto port = server.http.port();
  {
    Client slow(port, false);
    REQUIRE(slow.send("GET /healthz HTTP/1.1\r\n"));
    // One header byte every 100 ms: each arrives in time, the whole request does not.
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(100ms);
      if (!slow.send("X")) break;
    }
    CHECK(slow.read_all().find("HTTP/1.1 200") == std::string::npos);
  }
  {
    Client idle(port, false);
    REQUIRE(idle.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    REQUIRE(idle.read_until("\r\n\r\nok"));
    const auto start = std::chrono::steady_clock::now();
    CHECK(idle.read_all().empty());  // closed by the server, not by the client's 5 s timeout
    CHECK(std::chrono::steady_clock::now() - start < 3s);
  }
}

TEST_CASE("the live stream sends a keepalive comment while nothing new is published", "[dashboard][http]") {
  HttpOptions options;
  options.stream_keepalive = 100ms;
  Server server(options);
  server.feed->publish(snapshot(1));
  Client client(server.http.port(), false);
  REQUIRE(client.send("GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(client.read_until("event: state\n"));
  REQUIRE(client.read_until("\n\n: keepalive\n\n"));
}
