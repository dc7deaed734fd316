// Security regression tests (issue 30, hole 5), through the real `kestrel tracker --http`
// process and real sockets: a flood of connections that send nothing, from one remote
// address and from many (127.0.0.2, 127.0.0.3, ...: the client socket is bound to the
// source address before it connects), must not keep anyone else from the dashboard. The
// flooder reopens every connection the server closes, as an attacker would; meanwhile
// /healthz, the page and the API are polled from another address, each answer due within
// a short time, and again after the header timeout has passed. Plain HTTP (no token) and
// HTTPS (with a token: stalled TLS handshakes must fall under the same short deadline).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The server's default header timeout (HttpOptions::header_timeout) and how long a poll
// may take under the flood.
constexpr auto kHeaderTimeout = 5s;
constexpr auto kAnswerWithin = 3s;

// 127.0.0.n
std::string loopback(int n) { return "127.0.0." + std::to_string(n); }

// The flood needs more descriptors than the usual soft limit of 1024; OpenSSL writes to
// sockets the server may have closed (SIGPIPE would end the test).
void prepare(rlim_t wanted) {
  std::signal(SIGPIPE, SIG_IGN);
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_cur >= wanted) return;
  if (limit.rlim_max < wanted) {
    WARN("skipped: the open-file limit (" << limit.rlim_max << ") is below " << wanted);
    std::_Exit(77);
  }
  limit.rlim_cur = wanted;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
}

// A TCP socket from `source` to 127.0.0.1:port; -1 when the connect fails or takes more
// than a second. Blocking, with `io_timeout` on reads and writes.
int connect_from(const std::string& source, std::uint16_t port, timeval io_timeout = {2, 0}) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  timeval connect_timeout{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &connect_timeout, sizeof connect_timeout);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &io_timeout, sizeof io_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &io_timeout, sizeof io_timeout);
  return fd;
}

// The attacker: `per_address[i]` connections from 127.0.0.(first + i) that send nothing
// (or, with `hello`, only the first bytes of a TLS record) and are reopened as soon as
// the server closes them (checked every 100 ms), until destroyed.
class Flood {
 public:
  Flood(std::uint16_t port, int first, std::vector<int> per_address, std::string hello = "")
      : port_(port), hello_(std::move(hello)) {
    for (std::size_t i = 0; i < per_address.size(); ++i) {
      for (int k = 0; k < per_address[i]; ++k) slots_.push_back({loopback(first + static_cast<int>(i)), -1});
    }
    refill();
    thread_ = std::thread([this] { run(); });
  }
  ~Flood() {
    stop_ = true;
    thread_.join();
    for (auto& s : slots_) {
      if (s.fd >= 0) ::close(s.fd);
    }
  }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;

  std::size_t reopened() const { return reopened_; }

 private:
  struct Slot {
    std::string source;
    int fd;
  };

  void refill() {
    for (auto& s : slots_) {
      if (s.fd >= 0) continue;
      s.fd = connect_from(s.source, port_);
      if (s.fd >= 0 && !hello_.empty()) ::send(s.fd, hello_.data(), hello_.size(), MSG_NOSIGNAL);
    }
  }

  void run() {
    std::vector<pollfd> fds;
    while (!stop_) {
      fds.clear();
      for (auto& s : slots_) fds.push_back({s.fd, POLLIN | POLLRDHUP, 0});
      ::poll(fds.data(), fds.size(), 100);
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (slots_[i].fd >= 0 && fds[i].revents != 0) {  // closed by the server (it sends nothing else)
          ::close(slots_[i].fd);
          slots_[i].fd = -1;
          ++reopened_;
        }
      }
      refill();
      std::this_thread::sleep_for(100ms);
    }
  }

  std::uint16_t port_;
  std::string hello_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> reopened_{0};
  std::thread thread_;
};

// One request on a fresh connection from `source`: the status of the answer (0: none
// within the socket timeouts, or not HTTP), plain or over TLS.
int status_of(const std::string& source, std::uint16_t port, const std::string& path, bool tls,
              const std::string& headers = "") {
  int fd = connect_from(source, port, {static_cast<long>(kAnswerWithin / 1s), 0});
  if (fd < 0) return 0;
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers + "\r\n";
  std::string answer;
  char buf[16384];
  if (tls) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1 && SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
      for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  } else if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return 0;
  return std::stoi(answer.substr(9, 3));
}

// `rounds` polls of each path from `source`, one after another: how many were answered
// with 200 within kAnswerWithin (all of them, when the server serves under the flood).
int answered(const std::string& source, std::uint16_t port, const std::vector<std::string>& paths, int rounds,
             bool tls = false, const std::string& headers = "") {
  int ok = 0;
  for (int r = 0; r < rounds; ++r) {
    for (const auto& path : paths) {
      const auto start = Clock::now();
      const int status = status_of(source, port, path, tls, headers);
      const auto took = Clock::now() - start;
      if (status == 200 && took < kAnswerWithin) {
        ++ok;
      } else {
        UNSCOPED_INFO(path << " from " << source << ": status " << status << " after "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
      }
    }
  }
  return ok;
}

// The dashboard's port, from the tracker's "dashboard at http(s)://127.0.0.1:PORT/".
std::uint16_t dashboard_port(TrackerProcess& tracker) {
  std::string log;
  REQUIRE(test::wait_for([&] {
    log = tracker.process->log();
    return log.find("dashboard at ") != std::string::npos;
  }));
  const auto at = log.find("dashboard at ");
  const auto colon = log.find(':', log.find("//", at) + 2);
  return static_cast<std::uint16_t>(std::stoi(log.substr(colon + 1)));
}

// Seconds until the server closes a connection from `source` that sends `bytes` and then
// nothing (up to `limit`).
double seconds_until_closed(const std::string& source, std::uint16_t port, const std::string& bytes,
                            std::chrono::seconds limit) {
  const auto start = Clock::now();
  int fd = connect_from(source, port, {static_cast<long>(limit / 1s), 0});
  REQUIRE(fd >= 0);
  if (!bytes.empty()) ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {
  }
  ::close(fd);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("a flood of idle connections from one address and from many does not keep others from the dashboard",
          "[security][dashboard][flood]") {
  prepare(4096);
  TempDir dir;
  TrackerProcess tracker(dir, {"--http", "0"});
  const auto port = dashboard_port(tracker);
  REQUIRE(answered(loopback(200), port, {"/healthz"}, 1) == 1);

  // 300 idle connections from 127.0.0.2 and 40 from each of 127.0.0.3..22: 1,100 in all,
  // reopened as the server closes them.
  std::vector<int> per_address(21, 40);
  per_address[0] = 300;
  Flood flood(port, 2, per_address);
  const std::vector<std::string> paths = {"/healthz", "/", "/api/state"};
  CHECK(answered(loopback(200), port, paths, 6) == 18);
  // Past the header timeout, the flood's first connections are gone and it has opened new
  // ones: still served.
  std::this_thread::sleep_for(kHeaderTimeout + 1s);
  CHECK(answered(loopback(201), port, paths, 6) == 18);
  CHECK(flood.reopened() > 300);  // the server closed idle connections (to make room, or at the header timeout)
  CHECK(tracker.process->running());
}

TEST_CASE("a flood of idle dashboard connections from one address does not lock out another address",
          "[security][dashboard][flood]") {
  prepare(4096);
  TempDir dir;
  TrackerProcess tracker(dir, {"--http", "0"});
  const auto port = dashboard_port(tracker);
  Flood flood(port, 2, {600});
  CHECK(answered(loopback(3), port, {"/healthz", "/"}, 10) == 20);
  CHECK(tracker.process->running());
}

TEST_CASE("a dashboard connection that sends no request or stalls in its TLS handshake is closed at the header timeout",
          "[security][dashboard][flood]") {
  prepare(4096);
  TempDir dir;
  const auto token = write_token(dir, "token", "dashboard-flood-token-0123456789abcdef");
  TrackerProcess plain(dir, {"--http", "0"});
  TrackerProcess https(dir, {"--host", "127.0.0.1", "--token-file", token, "--http", "0"}, 0, "https.log");
  const auto plain_port = dashboard_port(plain);
  const auto https_port = dashboard_port(https);

  // Measured from the connection's start, in parallel, each from an address of its own:
  // nothing; a partial request; a stalled TLS handshake.
  const auto limit = std::chrono::duration<double>(kHeaderTimeout + 3s).count();
  double idle_s = 0, partial_s = 0, handshake_s = 0;
  std::thread a([&] { idle_s = seconds_until_closed(loopback(150), plain_port, "", 20s); });
  std::thread b([&] { partial_s = seconds_until_closed(loopback(151), plain_port, "GET /healthz HTTP/1.1\r\n", 20s); });
  std::thread c([&] {
    handshake_s = seconds_until_closed(loopback(152), https_port, std::string("\x16\x03\x01", 3), 20s);
  });
  a.join();
  b.join();
  c.join();
  CHECK(idle_s < limit);
  CHECK(partial_s < limit);
  CHECK(handshake_s < limit);

  // The HTTPS dashboard flooded with idle TCP connections, and with connections that
  // send the first bytes of a TLS handshake record and stall, from 16 addresses.
  Flood idle(https_port, 2, std::vector<int>(8, 40));
  Flood stalled(https_port, 10, std::vector<int>(8, 40), std::string("\x16\x03\x01\x00", 4));
  CHECK(answered(loopback(100), https_port, {"/healthz"}, 10, true) == 10);
  const std::string bearer = "Authorization: Bearer dashboard-flood-token-0123456789abcdef\r\n";
  CHECK(answered(loopback(101), https_port, {"/api/state", "/"}, 3, true, bearer) == 6);
  CHECK(plain.process->running());
  CHECK(https.process->running());
}
