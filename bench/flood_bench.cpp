// kestrel-bench-flood: does a real client still get a device, and does the tracker's
// memory stay bounded, while an attacker who holds no token floods the tracker's port?
//
// It starts a real `kestrel tracker` and one `kestrel-device` as child processes, then:
//   1. quiet:  a client connects, requests the device, gets it, releases it and
//              disconnects, over and over; each cycle's connect -> grant time is kept;
//   2. flood:  the same client loop while, on other threads, attackers who know no
//              token keep open:
//              - slow frames: connections whose first frame header announces 64 MiB,
//                followed by 512 bytes and then silence (the memory attack of finding 5),
//              - malformed frames: connections that send a hello whose `name` pointer is
//                a struct (finding 1) or random bytes, read until closed, and reconnect,
//              - idle: connections that send nothing at all.
// The tracker's resident memory (VmRSS, /proc/PID/status) is sampled every 20 ms. It prints
// the client's connect -> grant time (median and worst) in both phases, the tracker's peak
// RSS, the attackers' connection counts, and whether the targets hold (grant within 1 s,
// RSS under 200 MB). Exit status 0 when they hold, 1 when not, 2 on bad usage.
//
//   build/bench/kestrel-bench-flood [--seconds 10] [--slow 128] [--malformed 64] [--idle 256]
//                                   [--token] [--no-tls] [--attacker 127.0.0.2]
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <capnp/any.h>
#include <capnp/message.h>

#include "kestrel/base/log.h"
#include "kestrel/base/stats.h"
#include "kestrel/rpc/framing.h"
#include "kestrel/rpc/handshake.h"
#include "kestrel/rpc/tracker_client.h"

extern char** environ;

namespace {
using namespace kestrel;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Options {
  int seconds = 10;
  int slow = 128;
  int malformed = 64;
  int idle = 256;
  bool token = false;
  bool no_tls = false;
  std::string attacker = "127.0.0.2";  // the attackers' source address
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "kestrel-bench-flood: %s\n"
               "usage: kestrel-bench-flood [--seconds N] [--slow N] [--malformed N] [--idle N] [--token] [--no-tls]\n"
               "  --seconds N    length of each phase (default 10)\n"
               "  --slow N       connections announcing a 64 MiB frame and sending 512 bytes (default 128)\n"
               "  --malformed N  connections looping over malformed frames (default 64)\n"
               "  --idle N       connections that send nothing (default 256)\n"
               "  --token        run tracker, device and client with a token (TLS on, its default)\n"
               "  --no-tls       with --token: no TLS, per-frame MACs\n"
               "  --attacker A   the attackers' source address (default 127.0.0.2; 127.0.0.1 shares the\n"
               "                 client's, the worst case for the per-address handshake cap)\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto number = [&](int& out) {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > 100000) usage(("bad value for " + a).c_str());
      out = static_cast<int>(v);
    };
    if (a == "--seconds") number(o.seconds);
    else if (a == "--slow") number(o.slow);
    else if (a == "--malformed") number(o.malformed);
    else if (a == "--idle") number(o.idle);
    else if (a == "--token") o.token = true;
    else if (a == "--no-tls") o.no_tls = true;
    else if (a == "--attacker") {
      if (i + 1 >= argc) usage("missing value after --attacker");
      o.attacker = argv[++i];
      in_addr probe{};
      if (inet_pton(AF_INET, o.attacker.c_str(), &probe) != 1) usage("--attacker takes an IPv4 address");
    }
    else if (a == "--help" || a == "-h") usage("the tracker under a flood of unauthenticated connections");
    else usage(("unknown option " + a).c_str());
  }
  if (o.seconds < 1) usage("--seconds must be at least 1");
  return o;
}

// A child process; killed (SIGTERM, then SIGKILL) when destroyed.
struct Child {
  pid_t pid = -1;
  Child(std::vector<std::string> argv, const std::string& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> args;
    for (auto& s : argv) args.push_back(s.data());
    args.push_back(nullptr);
    if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) {
      std::fprintf(stderr, "kestrel-bench-flood: cannot start %s\n", args[0]);
      std::exit(2);
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Child() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Resident memory of a process in MiB, from /proc/PID/status; 0 when unreadable.
double rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return 0;
}

// A hello frame whose `name` pointer points at a struct instead of text.
std::vector<std::uint8_t> wrong_typed_hello() {
  capnp::MallocMessageBuilder builder;
  auto hello = builder.initRoot<wire::Frame>().initHello();
  hello.setProtocolVersion(rpc::protocol_version());
  hello.setRole(wire::Role::CLIENT);
  std::uint8_t nonce[32] = {};
  hello.setNonce(capnp::Data::Reader(nonce, sizeof nonce));
  capnp::AnyStruct::Builder any(kj::mv(hello));
  any.getPointerSection()[1].initAsAnyStruct(1, 0);
  return rpc::encode_frame(builder);
}

// The attackers: plain blocking sockets, one thread per kind, non-blocking connects kept
// in a poll set would be leaner but these counts are small.
struct Attack {
  std::uint16_t port;
  in_addr source{};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> opened{0}, closed_by_tracker{0};
  std::vector<std::thread> threads;

  int open_socket() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr = source;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      ::close(fd);
      return -1;
    }
    timeval tv{0, 200'000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return -1;
    }
    ++opened;
    return fd;
  }

  // True when the tracker has closed the socket (or reset it).
  static bool closed(int fd) {
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  // Keeps `count` connections in the state `prime` leaves them in, reopening closed ones.
  void hold(int count, const std::function<void(int)>& prime) {
    std::vector<int> fds;
    while (!stop) {
      for (auto it = fds.begin(); it != fds.end();) {
        if (closed(*it)) {
          ::close(*it);
          ++closed_by_tracker;
          it = fds.erase(it);
        } else {
          ++it;
        }
      }
      while (static_cast<int>(fds.size()) < count && !stop) {
        int fd = open_socket();
        if (fd < 0) break;
        prime(fd);
        fds.push_back(fd);
      }
      std::this_thread::sleep_for(20ms);
    }
    for (int fd : fds) ::close(fd);
  }

  void start(const Options& o) {
    threads.emplace_back([this, n = o.slow] {
      hold(n, [](int fd) {
        std::uint8_t bytes[4 + 512] = {};
        std::uint32_t length = 64u << 20;
        std::memcpy(bytes, &length, 4);
        (void)!::send(fd, bytes, sizeof bytes, MSG_NOSIGNAL);
      });
    });
    threads.emplace_back([this, n = o.idle] { hold(n, [](int) {}); });
    threads.emplace_back([this, n = o.malformed] {
      const auto hello = wrong_typed_hello();
      std::mt19937 rng(7);
      std::uint64_t round = 0;
      while (!stop) {
        std::vector<int> fds;
        for (int i = 0; i < n && !stop; ++i) {
          int fd = open_socket();
          if (fd < 0) break;
          if (round++ % 2 == 0) {
            (void)!::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
          } else {
            std::uint8_t junk[64];
            for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
            (void)!::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
          }
          fds.push_back(fd);
        }
        std::this_thread::sleep_for(50ms);
        for (int fd : fds) {
          if (closed(fd)) ++closed_by_tracker;
          ::close(fd);
        }
      }
    });
  }

  void finish() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

struct Cycles {
  std::vector<double> ms;  // connect -> grant, per cycle
  int failures = 0;
  std::string last_error;
};

// One client cycle after another for `seconds`: connect, request, release, close.
Cycles client_loop(std::uint16_t port, const Options& o, const std::string& token_file, int seconds) {
  Cycles out;
  asio::io_context io;
  auto until = Clock::now() + std::chrono::seconds(seconds);
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        while (Clock::now() < until) {
          rpc::ClientOptions options;
          options.name = "flood-bench client";
          if (o.token) options.token = rpc::Token::from_file(token_file);
          options.tls.disabled = o.no_tls;
          auto start = Clock::now();
          try {
            rpc::Endpoint endpoint;  // named: GCC 12 miscompiles braced temporaries in co_await
            endpoint.host = "127.0.0.1";
            endpoint.port = port;
            auto client = co_await rpc::TrackerClient::connect(endpoint, options);
            rpc::RequestOptions request;
            request.timeout = 10s;
            rpc::Lease lease = co_await client->request("flood", request);
            out.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
            co_await client->release(lease.id);
            client->close();
          } catch (const std::exception& e) {
            ++out.failures;
            out.last_error = e.what();
          }
          asio::steady_timer pause(io, 100ms);
          co_await pause.async_wait(rpc::use_nothrow);
        }
      },
      asio::detached);
  io.run();
  return out;
}

double median(const std::vector<double>& v) { return v.empty() ? 0 : kestrel::stats::median(v); }

double worst(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  log::set_level(log::Level::warn);

  char dir_pattern[] = "/tmp/kestrel-flood-XXXXXX";
  std::string dir = ::mkdtemp(dir_pattern);
  std::string port_file = dir + "/port", token_file = dir + "/token";
  std::vector<std::string> tracker_args = {KESTREL_BIN_PATH, "tracker", "--port", "0", "--port-file", port_file};
  std::vector<std::string> device_args = {KESTREL_DEVICE_BIN_PATH, "--key", "flood", "--name", "flood-device",
                                          "--max-backoff-ms", "300"};
  if (o.token) {
    std::ofstream(token_file) << "flood-bench-token-0123456789abcdef\n";
    ::chmod(token_file.c_str(), 0600);
    for (auto* args : {&tracker_args, &device_args}) {
      args->insert(args->end(), {"--token-file", token_file});
      if (o.no_tls) args->push_back("--no-tls");
    }
    tracker_args.insert(tracker_args.end(), {"--host", "127.0.0.1"});
  }
  Child tracker(tracker_args, dir + "/tracker.log");
  for (int i = 0; i < 500 && read_text(port_file).empty(); ++i) std::this_thread::sleep_for(10ms);
  if (read_text(port_file).empty()) {
    std::fprintf(stderr, "kestrel-bench-flood: the tracker did not start; its log:\n%s\n",
                 read_text(dir + "/tracker.log").c_str());
    return 2;
  }
  auto port = static_cast<std::uint16_t>(std::stoi(read_text(port_file)));
  device_args.insert(device_args.begin() + 1, {"--tracker", "127.0.0.1:" + std::to_string(port)});
  Child device(device_args, dir + "/device.log");
  std::this_thread::sleep_for(1s);

  std::printf("kestrel-bench-flood: tracker pid %d on 127.0.0.1:%u, %s; %d s per phase\n", tracker.pid, port,
              !o.token ? "no token" : o.no_tls ? "token, no TLS (per-frame MACs)" : "token, TLS", o.seconds);
  double quiet_rss = rss_mib(tracker.pid);
  Cycles quiet = client_loop(port, o, token_file, o.seconds);

  Attack attack;
  attack.port = port;
  inet_pton(AF_INET, o.attacker.c_str(), &attack.source);
  std::atomic<bool> sampling{true};
  std::atomic<double> peak{0};
  std::thread sampler([&] {
    while (sampling) {
      double r = rss_mib(tracker.pid);
      if (r > peak) peak = r;
      std::this_thread::sleep_for(20ms);
    }
  });
  attack.start(o);
  std::this_thread::sleep_for(1s);  // let the flood build up before the client starts
  Cycles flooded = client_loop(port, o, token_file, o.seconds);
  attack.finish();
  sampling = false;
  sampler.join();
  bool tracker_alive = ::kill(tracker.pid, 0) == 0 && ::waitpid(tracker.pid, nullptr, WNOHANG) == 0;

  std::printf("\n%-8s %8s %12s %12s %9s\n", "phase", "cycles", "median ms", "worst ms", "failures");
  std::printf("%-8s %8zu %12.2f %12.2f %9d\n", "quiet", quiet.ms.size(), median(quiet.ms), worst(quiet.ms),
              quiet.failures);
  std::printf("%-8s %8zu %12.2f %12.2f %9d\n", "flood", flooded.ms.size(), median(flooded.ms), worst(flooded.ms),
              flooded.failures);
  if (!flooded.last_error.empty()) std::printf("last client error under flood: %s\n", flooded.last_error.c_str());
  std::printf("\nattack from %s: %d slow-frame, %d malformed-frame, %d idle connections held; %llu opened, %llu closed by "
              "the tracker\n",
              o.attacker.c_str(), o.slow, o.malformed, o.idle, static_cast<unsigned long long>(attack.opened.load()),
              static_cast<unsigned long long>(attack.closed_by_tracker.load()));
  std::printf("tracker RSS: %.1f MiB before, %.1f MiB peak under flood\n", quiet_rss, peak.load());
  std::printf("ratio flood/quiet median connect->grant: %.2f\n",
              median(quiet.ms) > 0 ? median(flooded.ms) / median(quiet.ms) : 0.0);

  bool grant_ok = !flooded.ms.empty() && flooded.failures == 0 && worst(flooded.ms) <= 1000.0;
  bool rss_ok = peak.load() < 200.0;
  std::printf("\ntarget: a client gets the device within 1 s under flood: %s (worst %.1f ms, %d failures)\n",
              grant_ok ? "met" : "MISSED", worst(flooded.ms), flooded.failures);
  std::printf("target: tracker RSS under 200 MB: %s (peak %.1f MiB)\n", rss_ok ? "met" : "MISSED", peak.load());
  if (!tracker_alive) std::printf("the tracker died during the flood; see %s/tracker.log\n", dir.c_str());
  std::string cleanup = "rm -rf '" + dir + "'";
  if (grant_ok && rss_ok && tracker_alive) (void)!std::system(cleanup.c_str());
  return grant_ok && rss_ok && tracker_alive ? 0 : 1;
}
