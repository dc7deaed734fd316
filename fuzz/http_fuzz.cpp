// Fuzz target: the tracker's dashboard server (HttpServer, Boost.Beast) on a real
// loopback socket: what any browser, probe or stranger on the network can reach.
// Input: byte 0 bit 0 set: the server requires a token (plain HTTP here, so that the
// bytes reach the HTTP parser rather than TLS); bit 1 set: the HTTPS-only server (with
// the token), where the bytes reach the TLS-or-HTTP sniffing and OpenSSL's handshake;
// the rest is what the client sends on a fresh connection (then it shuts its side).
// Guarantees checked: no crash, no hang (the answer ends: the server closes once the
// client's input has ended); the answer is empty (closed) or an HTTP/1.1 response (or,
// from the HTTPS server, TLS records); the server still answers afterwards (GET /healthz;
// the HTTPS server's 400 to plain HTTP); with a token, no answer carries the snapshot's
// documents unless the input holds the token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kestrel/rpc/auth.h"
#include "kestrel/rpc/tls.h"
#include "kestrel/tracker/dashboard_feed.h"
#include "kestrel/tracker/http_server.h"
#include "loopback.h"
#include "support.h"

using namespace kestrel;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view kToken = "fuzz-token-0123456789abcdef";
constexpr std::string_view kSecret = "fuzz-secret-document";  // in every document

struct Servers {
  std::shared_ptr<tracker::DashboardFeed> feed = std::make_shared<tracker::DashboardFeed>();
  std::unique_ptr<tracker::HttpServer> open;
  std::unique_ptr<tracker::HttpServer> guarded;
  std::unique_ptr<tracker::HttpServer> https;

  Servers() {
    tracker::DashboardSnapshot s;
    s.state_json = "{\"tracker\":{\"secret\":\"" + std::string(kSecret) + "\"}}";
    s.pool_json = s.state_json;
    s.sessions_json = "[\"" + std::string(kSecret) + "\"]";
    s.events_json = s.sessions_json;
    s.metrics_text = "# " + std::string(kSecret) + "\n";
    feed->set_refresher([feed = feed.get(), s] { feed->publish(s); });
    feed->publish(s);
    tracker::HttpOptions options;
    options.interval = 1h;  // the snapshot stays fresh
    open = std::make_unique<tracker::HttpServer>(options, feed, std::vector<rpc::Token>{}, nullptr);
    guarded = std::make_unique<tracker::HttpServer>(options, feed, std::vector<rpc::Token>{rpc::Token(std::string(kToken))},
                                                    nullptr);
    https = std::make_unique<tracker::HttpServer>(options, feed, std::vector<rpc::Token>{rpc::Token(std::string(kToken))},
                                                  rpc::TlsContext::server("", ""));
    open->start();
    guarded->start();
    https->start();
  }
};

Servers& servers() {
  static Servers* s = new Servers;  // lives as long as the process
  return *s;
}

// Sends `bytes` on a fresh connection, shuts the sending side, and returns everything
// the server answers until it closes. libFuzzer's SIGALRM may interrupt the calls: retry.
std::string exchange(std::uint16_t port, std::span<const std::uint8_t> bytes) {
  int fd = fuzz::connect_loopback(port);
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed early (e.g. an oversized request)
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      fuzz::broken("the server neither answered to the end nor closed within 10 s after the client's input ended");
    }
    if (n <= 0) break;  // closed (or reset after an oversized request)
    answer.append(buf, static_cast<std::size_t>(n));
  }
  fuzz::close_without_time_wait(fd);
  return answer;
}

// The login cookie's value for kToken: hex(HMAC-SHA256(token, "kestrel-dashboard-v1 cookie")).
std::string cookie_value() {
  constexpr std::string_view kLabel = "kestrel-dashboard-v1 cookie";
  const auto mac = rpc::hmac_sha256({reinterpret_cast<const std::uint8_t*>(kToken.data()), kToken.size()},
                                    {reinterpret_cast<const std::uint8_t*>(kLabel.data()), kLabel.size()});
  std::string hex;
  for (auto b : mac) {
    hex.push_back("0123456789abcdef"[b >> 4]);
    hex.push_back("0123456789abcdef"[b & 15]);
  }
  return hex;
}

void check_answer(const std::string& answer, bool tls) {
  constexpr std::string_view kStatusLine = "HTTP/1.1 ";
  // TLS records: a handshake (0x16) or an alert (0x15).
  if (tls && !answer.empty() && (answer[0] == 0x16 || answer[0] == 0x15)) return;
  const std::string_view head(answer.data(), std::min(answer.size(), kStatusLine.size()));
  fuzz::check(kStatusLine.substr(0, head.size()) == head,
              "the answer is neither empty nor an HTTP/1.1 response: " + answer.substr(0, 80));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const bool tls = data[0] & 2;
  const bool with_token = tls || (data[0] & 1);
  Servers& s = servers();
  auto& server = tls ? *s.https : with_token ? *s.guarded : *s.open;
  const std::span<const std::uint8_t> input(data + 1, size - 1);

  const auto answer = exchange(server.port(), input);
  check_answer(answer, tls);
  if (with_token) {
    const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
    // The input can only hold the token, or its cookie MAC, by luck or from a seed.
    static const std::string cookie = cookie_value();
    const bool has_proof = text.find(kToken) != std::string_view::npos || text.find(cookie) != std::string_view::npos;
    fuzz::check(has_proof || answer.find(kSecret) == std::string::npos,
                "a request without the token got the dashboard's documents");
  }

  static const std::string kHealth = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const auto health = exchange(server.port(), {reinterpret_cast<const std::uint8_t*>(kHealth.data()), kHealth.size()});
  if (tls) {
    fuzz::check(health.rfind("HTTP/1.1 400 ", 0) == 0 && health.find("HTTPS only") != std::string::npos,
                "the HTTPS server stopped answering plain HTTP with its 400: " + health.substr(0, 80));
  } else {
    fuzz::check(health.rfind("HTTP/1.1 200 ", 0) == 0 && health.ends_with("\r\n\r\nok"),
                "the server stopped answering /healthz: " + health.substr(0, 80));
  }
  return 0;
}
