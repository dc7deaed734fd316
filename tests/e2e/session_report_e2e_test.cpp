// Tuning sessions on the tracker's dashboard, as users run them: `kestrel tune` against
// a `kestrel tracker --http` reports each batch and its end (GET /api/sessions shows the
// job's growing curve and a finished report), and `kestrel tune --http PORT` serves the
// embedded pool's dashboard while it tunes. Real processes, real sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <signal.h>
#include <optional>
#include <thread>

#include "support/kestrel_processes.h"

using namespace kestrel;
using namespace kestrel::test::e2e;
using namespace std::chrono_literals;

namespace {

// A port free now (bound, read, closed): the dashboard's --http PORT.
std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// GET http://127.0.0.1:port/path and the body of a 200 response (chunked or not); none otherwise.
std::optional<std::string> http_get(std::uint16_t port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string response;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) response.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto head_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 || head_end == std::string::npos) return std::nullopt;
  std::string head = response.substr(0, head_end);
  for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string body = response.substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") == std::string::npos) return body;
  std::string plain;
  for (std::size_t at = 0;;) {
    const auto line_end = body.find("\r\n", at);
    if (line_end == std::string::npos) return std::nullopt;
    const std::size_t size = std::stoul(body.substr(at, line_end - at), nullptr, 16);
    if (size == 0) return plain;
    plain += body.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
}

nlohmann::json get_json(std::uint16_t port, const std::string& path) {
  auto body = http_get(port, path);
  return body ? nlohmann::json::parse(*body, nullptr, false) : nlohmann::json();
}

// The jobs of every session the dashboard lists.
std::vector<nlohmann::json> jobs_of(const nlohmann::json& sessions) {
  std::vector<nlohmann::json> jobs;
  if (!sessions.is_array()) return jobs;
  for (const auto& s : sessions) {
    for (const auto& j : s["jobs"]) jobs.push_back(j);
  }
  return jobs;
}

std::vector<std::string> tune_args(const std::string& db, int trials) {
  return {kKestrel,  "tune",      "--op",     "gemm", "--shape",       "48x40x32", "--trials", std::to_string(trials),
          "--batch", "4",         "--db",     db,     "--repeat",      "2",        "--min-repeat-ms", "2",
          "--final-top", "2",     "--final-repeat", "3", "--vendors",  "none",     "--quiet"};
}

}  // namespace

TEST_CASE("a remote tuning session reports every batch and its end to the tracker's dashboard", "[e2e][report]") {
  TempDir dir;
  const std::uint16_t http = free_port();
  TrackerProcess tracker(dir, {"--http", std::to_string(http)});
  auto device = start_device(dir, tracker, "rep", "rep-a");
  REQUIRE(test::wait_for([&] { return device_count(query(dir, tracker)) == 1; }, 20s));

  auto argv = tune_args(dir.file("t.db"), 16);
  argv.insert(argv.end(), {"--tracker", tracker.address(), "--key", "rep"});
  std::string output;
  REQUIRE(test::run_command(argv, output, dir.file("tune.out")) == 0);

  // The finished report has arrived (reports are fire and forget: allow a moment).
  nlohmann::json job;
  REQUIRE(test::wait_for(
      [&] {
        auto jobs = jobs_of(get_json(http, "/api/sessions"));
        if (jobs.empty() || !jobs.front()["finished"].get<bool>()) return false;
        job = jobs.front();
        return true;
      },
      10s));
  INFO(job.dump(2));
  CHECK(job["op"] == "gemm");
  CHECK(job["workload"] == "K=32,M=48,N=40");
  CHECK(job["strategy"] == "sa");
  CHECK(job["key"] == "rep");
  CHECK(job["phase"] == "done");
  CHECK(job["trials"] == 16);
  CHECK(job["budget"] == 16);
  CHECK(job["this_session"].get<int>() >= 16);  // the final round's re-measurements count too
  CHECK(job["best_gflops"].get<double>() > 0);
  // One point per report: the trials grew batch by batch (4 per batch, 16 in all).
  const auto& curve = job["curve"];
  REQUIRE(curve.size() >= 4);
  for (std::size_t i = 1; i < curve.size(); ++i) CHECK(curve[i][0].get<int>() >= curve[i - 1][0].get<int>());
  CHECK(curve.front()[0].get<int>() < 16);
  CHECK(curve.back()[0] == 16);
}

TEST_CASE("kestrel tune --http serves the embedded pool's dashboard while it tunes", "[e2e][report]") {
  TempDir dir;
  const std::uint16_t http = free_port();
  auto argv = tune_args(dir.file("t.db"), 400);
  argv.push_back("--http");
  argv.push_back(std::to_string(http));
  Process tune(argv, dir.file("tune.log"));
  const std::string url = "http://127.0.0.1:" + std::to_string(http) + "/";
  REQUIRE(test::wait_for([&] { return tune.log().find("kestrel tune: the dashboard will be at " + url) != std::string::npos; }));
  // The pool's device and this session's job, trials landing.
  REQUIRE(test::wait_for(
      [&] {
        auto state = get_json(http, "/api/state");
        if (!state.is_object() || state["pool"]["devices"].size() != 1) return false;
        auto jobs = jobs_of(state["sessions"]);
        return !jobs.empty() && jobs.front()["trials"].get<int>() > 0 && jobs.front()["op"] == "gemm";
      },
      30s));
  CHECK(http_get(http, "/").has_value());
  tune.signal(SIGTERM);
  REQUIRE(tune.wait_exit(30s));
  // The page lives as long as the tune.
  CHECK_FALSE(http_get(http, "/healthz").has_value());
}

TEST_CASE("kestrel tune --http with --tracker points to the tracker's own dashboard", "[e2e][report][bad-input]") {
  TempDir dir;
  std::string output;
  CHECK(test::run_command({kKestrel, "tune", "--shape", "8x8x8", "--tracker", "127.0.0.1:1", "--http", "9191", "--db",
                           dir.file("t.db")},
                          output, dir.file("o1")) == 2);
  CHECK(output.find("kestrel tracker --http") != std::string::npos);
  CHECK(test::run_command({kKestrel, "tune", "--shape", "8x8x8", "--http", "0", "--db", dir.file("t.db")}, output,
                          dir.file("o2")) == 2);
  CHECK(output.find("--http") != std::string::npos);
}
