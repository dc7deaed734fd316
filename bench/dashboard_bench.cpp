// kestrel-bench-dashboard: what the tracker's dashboard costs the pool. The grant
// latency (TrackerClient::request -> grant, as a client sees it, over real loopback
// TCP) of a tracker with 1,000 connected device agents and 10 live tuning sessions
// holding a lease each, measured twice:
//   off: no dashboard (TrackerOptions::http unset; the sessions cannot report);
//   on:  the dashboard on (TrackerOptions::http) and a viewer looking, as a browser and
//        Prometheus would: a real HTTP client following /api/stream (so the tracker
//        builds and publishes a snapshot every interval, and the HTTP server sends each
//        one) and scraping /metrics each second; the 10 sessions reporting a batch each
//        --report-ms.
// Prints each run's p50/p99, the snapshot build time and the p99 ratio on/off (the
// goal: within 10%). Exits nonzero only when the harness fails (a pool that does not
// come up, a request that fails, a thread that does not wind down), not on the ratio.
//
// Threads: the tracker on its own io_context and thread, all agents on a second, all
// clients on a third; the main thread only hands work over and waits. The tracker is
// touched only from its thread (constructed and started before that thread runs).
//
//   ./build/bench/kestrel-bench-dashboard [--quick] [--devices N] [--seconds S]
//       [--rounds N] [--interval-ms MS] [--report-ms MS]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kestrel/base/log.h"
#include "kestrel/base/stats.h"
#include "kestrel/base/str.h"
#include "kestrel/device_runtime/agent.h"
#include "kestrel/device_runtime/capabilities.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/session_report.h"
#include "kestrel/rpc/tracker_client.h"
#include "kestrel/tracker/tracker.h"

namespace {

using namespace kestrel;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kLog = "bench";
constexpr std::size_t kSessions = 10;
constexpr auto kRegistrationLimit = std::chrono::seconds(60);
constexpr auto kCallLimit = std::chrono::seconds(120);
constexpr auto kWindDownLimit = std::chrono::seconds(10);

struct Settings {
  std::size_t devices = 1000;
  std::chrono::milliseconds measure_for{10'000};  // request -> grant -> release cycles for this long per run
  std::size_t rounds = 3;     // off/on pairs, alternating (the machine's drift falls on both)
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds report_every{100};
};

// One io_context run by one thread until finish() lets it run dry.
class Worker {
 public:
  Worker() : guard_(asio::make_work_guard(io_)) {}
  ~Worker() {
    if (thread_.joinable()) {
      io_.stop();
      thread_.join();
    }
  }
  asio::io_context& io() { return io_; }
  void start() {
    thread_ = std::thread([this] {
      while (true) {
        try {
          io_.run();
          if (!drain_requested_) break;
          drain();
        } catch (const std::exception& e) {
          log::error(kLog, "a handler threw: ", e.what());
          failed_ = true;
        }
      }
      finished_ = true;
    });
  }
  // Calls `fn` on this thread once no completion handler is queued. Stopping device
  // agents closes connections, and a connection closed while the completion of its
  // last write is queued but not yet run frees its send queue under that completion;
  // so the agents are stopped only when every queued completion has run.
  void call_when_drained(std::function<void()> fn) {
    drain_then_ = std::move(fn);
    drain_requested_ = true;
    asio::post(io_, [this] { io_.stop(); });
  }
  // False (after stopping it by force) when work was left after `limit`.
  bool finish(Clock::duration limit) {
    guard_.reset();
    if (!thread_.joinable()) return true;
    auto deadline = Clock::now() + limit;
    while (!finished_ && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    bool clean = finished_ && !failed_;
    if (!finished_) {
      log::error(kLog, "a worker thread still had work after shutdown; stopping it by force");
      io_.stop();
    }
    thread_.join();
    return clean;
  }

 private:
  void drain() {
    std::function<void()> fn = std::move(drain_then_);
    drain_requested_ = false;
    io_.restart();
    while (io_.poll() > 0) {
    }
    if (fn) fn();
    io_.restart();
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::atomic<bool> drain_requested_{false};
  std::function<void()> drain_then_;  // set before drain_requested_, read after it
  std::atomic<bool> finished_{false};
  std::atomic<bool> failed_{false};
};

// Runs the coroutine `make()` returns on `io` and waits for its result.
template <typename T, typename F>
T run_on(asio::io_context& io, F make) {
  auto done = std::make_shared<std::promise<T>>();
  auto result = done->get_future();
  asio::post(io, [&io, make = std::move(make), done]() mutable {
    asio::co_spawn(io, std::move(make), [done](std::exception_ptr e, auto... value) {
      if (e) {
        done->set_exception(e);
      } else {
        done->set_value(std::move(value)...);
      }
    });
  });
  if (result.wait_for(kCallLimit) != std::future_status::ready) {
    throw std::runtime_error(str("a call on a worker thread did not finish within ", kCallLimit.count(), " s"));
  }
  return result.get();
}

struct RunResult {
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  std::uint64_t snapshots = 0;
  // Build times of the snapshots published (each snapshot's metrics carry the one before).
  double snapshot_ms_mean = 0;
  double snapshot_ms_max = 0;
  std::size_t state_bytes = 0;  // of the last /api/state document
  std::size_t reports = 0;
  std::size_t cycles = 0;
  std::size_t stream_events = 0;  // snapshots the viewer's /api/stream delivered
  std::size_t scrapes = 0;        // /metrics answers it read
};

// A dashboard viewer on its own thread, over plain loopback sockets: one connection
// follows /api/stream (counting the `state` events it receives), another asks for
// /metrics each second. stop() ends both (shutdown wakes the blocked reads) and joins.
class Viewer {
 public:
  explicit Viewer(std::uint16_t port) : port_(port) {
    stream_fd_ = connect_to_port();
    send_request(stream_fd_, "/api/stream");
    stream_ = std::thread([this] { follow_stream(); });
    scraper_ = std::thread([this] { scrape_metrics(); });
  }
  ~Viewer() { stop(); }

  void stop() {
    if (stopped_.exchange(true)) return;
    ::shutdown(stream_fd_, SHUT_RDWR);
    stream_.join();
    scraper_.join();
    ::close(stream_fd_);
  }
  std::size_t events() const { return events_; }
  std::size_t scrapes() const { return scrapes_; }
  std::size_t bytes() const { return bytes_; }

 private:
  int connect_to_port() const {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("viewer: socket() failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd);
      throw std::runtime_error(str("viewer: cannot connect to the dashboard on port ", port_));
    }
    return fd;
  }
  static void send_request(int fd, const std::string& path) {
    std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
      throw std::runtime_error("viewer: cannot send " + path);
    }
  }
  void follow_stream() {
    static constexpr std::string_view kEvent = "event: state";
    std::vector<char> buffer(1 << 16);
    std::string tail;  // the end of the previous read, for a marker split across reads
    while (true) {
      ssize_t n = ::recv(stream_fd_, buffer.data(), buffer.size(), 0);
      if (n <= 0) return;
      bytes_ += static_cast<std::size_t>(n);
      std::string chunk = tail + std::string(buffer.data(), static_cast<std::size_t>(n));
      for (auto at = chunk.find(kEvent); at != std::string::npos; at = chunk.find(kEvent, at + 1)) {
        if (at + kEvent.size() > tail.size()) ++events_;  // not counted with the previous read
      }
      tail = chunk.substr(chunk.size() - std::min(chunk.size(), kEvent.size() - 1));
    }
  }
  void scrape_metrics() {
    while (!stopped_) {
      int fd = connect_to_port();
      send_request(fd, "/metrics");
      std::vector<char> buffer(1 << 16);
      while (::recv(fd, buffer.data(), buffer.size(), 0) > 0) {
      }
      ::close(fd);
      ++scrapes_;
      for (int i = 0; i < 20 && !stopped_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  std::uint16_t port_;
  int stream_fd_ = -1;
  std::atomic<bool> stopped_{false};
  std::atomic<std::size_t> events_{0}, scrapes_{0}, bytes_{0};
  std::thread stream_, scraper_;
};

// A tracker with `devices` agents and kSessions session clients holding a lease each.
class Bench {
 public:
  Bench(const Settings& settings, bool dashboard) : settings_(settings), dashboard_(dashboard) {}
  ~Bench() { shutdown(); }

  RunResult run() {
    start_pool();
    start_sessions();
    auto feed = tracker_->dashboard_feed();
    if (dashboard_) {
      if (!feed) throw std::runtime_error("the tracker has no dashboard feed with --http");
      // On the tracker's thread after each publish: note the previous build's time
      // (a short search in the small metrics text).
      feed->add_listener([this, weak = std::weak_ptr<tracker::DashboardFeed>(feed)] {
        auto live = weak.lock();
        auto latest = live ? live->latest() : nullptr;
        if (!latest) return;
        const std::string name = "\nkestrel_dashboard_snapshot_seconds ";
        auto pos = latest->metrics_text.find(name);
        if (pos == std::string::npos) return;
        double ms = 1000 * std::strtod(latest->metrics_text.c_str() + pos + name.size(), nullptr);
        if (ms <= 0) return;  // the first one: nothing built before it
        std::lock_guard lock(build_times_mutex_);
        build_times_ms_.push_back(ms);
      });
      viewer_ = std::make_unique<Viewer>(tracker_->http_port());  // a live page and a scraper
    }
    // Warm up, then measure.
    measure(settings_.measure_for / 10);
    std::vector<double> us = measure(settings_.measure_for);
    RunResult result;
    std::sort(us.begin(), us.end());
    auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))]; };
    result.p50_us = at(0.50);
    result.p99_us = at(0.99);
    result.max_us = us.back();
    result.cycles = us.size();
    result.reports = reports_sent_;
    if (dashboard_) {
      viewer_->stop();
      result.stream_events = viewer_->events();
      result.scrapes = viewer_->scrapes();
      if (auto latest = feed->latest()) {
        result.snapshots = latest->version;
        result.state_bytes = latest->state_json.size();
      }
      std::lock_guard lock(build_times_mutex_);
      for (double ms : build_times_ms_) {
        result.snapshot_ms_mean += ms / static_cast<double>(build_times_ms_.size());
        result.snapshot_ms_max = std::max(result.snapshot_ms_max, ms);
      }
      if (result.snapshots < 2) throw std::runtime_error("the tracker published no snapshot while a viewer looked");
      if (result.stream_events < 2) throw std::runtime_error("the viewer's stream received no snapshot");
      if (result.scrapes == 0) throw std::runtime_error("no /metrics scrape finished");
      if (result.reports == 0) throw std::runtime_error("no session report was sent with the dashboard on");
    }
    if (!shutdown()) throw std::runtime_error("the pool did not wind down cleanly");
    return result;
  }

  bool shutdown() {
    if (shut_down_) return clean_;
    shut_down_ = true;
    stop_sessions_ = true;
    if (client_started_) {
      asio::post(clients_.io(), [this] {
        for (auto& c : session_clients_) c->close();
        if (probe_) probe_->close();
      });
    }
    clean_ = clients_.finish(kWindDownLimit) && clean_;
    if (agents_started_) {
      agents_.call_when_drained([this] {
        for (auto& agent : agent_list_) agent->stop();
      });
    }
    clean_ = agents_.finish(kWindDownLimit) && clean_;
    if (tracker_) asio::post(tracker_io_.io(), [t = tracker_.get()] { t->stop(); });
    clean_ = tracker_io_.finish(kWindDownLimit) && clean_;
    if (!clean_) {  // coroutines of a context stopped by force may point into these
      (void)tracker_.release();
      for (auto& agent : agent_list_) (void)agent.release();
    }
    return clean_;
  }

 private:
  void start_pool() {
    tracker::TrackerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.limits.max_connections = settings_.devices + 256;
    options.limits.max_pending_connections = settings_.devices + 64;
    options.limits.max_pending_per_address = settings_.devices + 64;
    if (dashboard_) {
      tracker::HttpOptions http;
      http.interval = settings_.interval;
      options.http = http;
    }
    tracker_ = std::make_unique<tracker::Tracker>(tracker_io_.io(), options);
    tracker_->start();
    const std::uint16_t port = tracker_->port();
    tracker_io_.start();

    const auto begin = Clock::now();
    rpc::DeviceInfo info = device::detect_device_info("bench-device");
    device::AgentOptions agent_options;
    agent_options.tracker = rpc::Endpoint{"127.0.0.1", port};
    agent_options.key = "bench";
    for (std::size_t i = 0; i < settings_.devices; ++i) {
      info.name = str("bench-", i);
      agent_list_.push_back(std::make_unique<device::DeviceAgent>(agents_.io().get_executor(), agent_options, info));
      asio::co_spawn(agents_.io(), agent_list_.back()->run(), [this](std::exception_ptr e) {
        if (e) ++agents_failed_;
      });
    }
    agents_.start();
    agents_started_ = true;
    clients_.start();
    client_started_ = true;
    endpoint_ = rpc::Endpoint{"127.0.0.1", port};
    while (registered() < settings_.devices) {
      if (agents_failed_ > 0) throw std::runtime_error(str(agents_failed_.load(), " device agents failed"));
      if (Clock::now() - begin > kRegistrationLimit) {
        throw std::runtime_error(str("only ", registered(), " of ", settings_.devices, " devices registered within ",
                                     kRegistrationLimit.count(), " s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::size_t registered() {
    auto done = std::make_shared<std::promise<std::size_t>>();
    auto result = done->get_future();
    asio::post(tracker_io_.io(), [this, done] { done->set_value(tracker_->stats().devices); });
    if (result.wait_for(kCallLimit) != std::future_status::ready) throw std::runtime_error("the tracker thread is stuck");
    return result.get();
  }

  // kSessions clients, each holding a lease and (when the tracker takes them) sending a
  // report every settings_.report_every with the trials growing by a batch of 4.
  void start_sessions() {
    run_on<bool>(clients_.io(), [this]() -> rpc::awaitable<bool> {
      rpc::ClientOptions options;
      for (std::size_t s = 0; s < kSessions; ++s) {
        options.name = str("kestrel tune (session ", s, ")");
        auto client = co_await rpc::TrackerClient::connect(endpoint_, options);
        co_await client->request("bench");
        session_clients_.push_back(client);
        asio::co_spawn(clients_.io(), report_loop(client, s), asio::detached);
      }
      options.name = "latency probe";
      probe_ = co_await rpc::TrackerClient::connect(endpoint_, options);
      co_return true;
    });
  }

  rpc::awaitable<void> report_loop(std::shared_ptr<rpc::TrackerClient> client, std::size_t session) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    rpc::SessionReport report;
    report.session_id = str("bench-host:", session, ":1");
    report.label = str("gemm 512x512x", 64 * (session + 1));
    report.op = "gemm";
    report.workload = str("K=", 64 * (session + 1), ",M=512,N=512");
    report.strategy = "sa";
    report.key = "bench";
    report.phase = "tuning";
    report.budget = 100'000;
    const auto started = Clock::now();
    while (!stop_sessions_) {
      timer.expires_after(settings_.report_every);
      co_await timer.async_wait(rpc::use_nothrow);
      if (stop_sessions_) break;
      report.trials += 4;
      report.this_session = report.trials;
      report.best_gflops = 100.0 * (1.0 - 1.0 / (1.0 + report.trials / 50.0));
      report.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
      report.failures = {{"compile_error", report.trials / 40}, {"timeout", report.trials / 90}};
      if (client->report(report)) ++reports_sent_;
    }
  }

  // Request -> grant -> release cycles by the probe for `duration` (at least 100);
  // each grant's latency in us.
  std::vector<double> measure(std::chrono::milliseconds duration) {
    return run_on<std::vector<double>>(clients_.io(), [this, duration]() -> rpc::awaitable<std::vector<double>> {
      std::vector<double> us;
      const auto end = Clock::now() + duration;
      while (us.size() < 100 || Clock::now() < end) {
        auto begin = Clock::now();
        rpc::Lease lease = co_await probe_->request("bench");
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
        co_await probe_->release(lease.id);
      }
      co_return us;
    });
  }

  Settings settings_;
  bool dashboard_;
  Worker tracker_io_;
  Worker agents_;
  Worker clients_;
  std::unique_ptr<tracker::Tracker> tracker_;
  std::unique_ptr<Viewer> viewer_;
  std::vector<std::unique_ptr<device::DeviceAgent>> agent_list_;
  std::vector<std::shared_ptr<rpc::TrackerClient>> session_clients_;
  std::shared_ptr<rpc::TrackerClient> probe_;
  rpc::Endpoint endpoint_;
  std::atomic<std::size_t> agents_failed_{0};
  std::atomic<bool> stop_sessions_{false};
  std::atomic<std::size_t> reports_sent_{0};
  std::mutex build_times_mutex_;
  std::vector<double> build_times_ms_;
  bool agents_started_ = false;
  bool client_started_ = false;
  bool shut_down_ = false;
  bool clean_ = true;
};

bool raise_descriptor_limit(rlim_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  if (limit.rlim_cur >= needed) return true;
  if (limit.rlim_max < needed) {
    std::fprintf(stderr, "kestrel-bench-dashboard: needs %llu open files, the hard limit is %llu (ulimit -Hn)\n",
                 static_cast<unsigned long long>(needed), static_cast<unsigned long long>(limit.rlim_max));
    return false;
  }
  limit.rlim_cur = needed;
  return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

std::size_t positive(const char* flag, const char* value) {
  char* end = nullptr;
  long long n = std::strtoll(value, &end, 10);
  if (!end || *end != '\0' || n <= 0) throw std::invalid_argument(str(flag, " needs a positive integer, not '", value, "'"));
  return static_cast<std::size_t>(n);
}

const char* kUsage =
    "usage: kestrel-bench-dashboard [--quick] [--devices N] [--seconds S] [--rounds N]\n"
    "                               [--interval-ms MS] [--report-ms MS]\n"
    "The tracker's grant latency with 1,000 device agents and 10 reporting sessions,\n"
    "dashboard off vs on (a viewer looking), each measured for --seconds (10).\n"
    "--quick: 100 devices, 1.5 s, a snapshot each 100 ms, one round (a smoke test).\n";

}  // namespace

int main(int argc, char** argv) {
  log::set_level(log::Level::warn);
  Settings settings;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--quick") {
        settings.devices = 100;
        settings.measure_for = std::chrono::milliseconds(1500);
        settings.interval = std::chrono::milliseconds(100);
        settings.rounds = 1;
      } else if (arg == "--devices") {
        settings.devices = positive("--devices", value());
      } else if (arg == "--seconds") {
        settings.measure_for = std::chrono::milliseconds(1000 * positive("--seconds", value()));
      } else if (arg == "--rounds") {
        settings.rounds = positive("--rounds", value());
      } else if (arg == "--interval-ms") {
        settings.interval = std::chrono::milliseconds(positive("--interval-ms", value()));
      } else if (arg == "--report-ms") {
        settings.report_every = std::chrono::milliseconds(positive("--report-ms", value()));
      } else if (arg == "--help" || arg == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      } else {
        throw std::invalid_argument("unknown argument '" + arg + "'");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel-bench-dashboard: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (settings.devices <= kSessions) {
    std::fprintf(stderr, "kestrel-bench-dashboard: --devices must exceed the %zu sessions' leases\n", kSessions);
    return 2;
  }
  if (!raise_descriptor_limit(static_cast<rlim_t>(2 * settings.devices + 512))) return 1;

  std::printf("kestrel-bench-dashboard: %zu devices, %zu sessions holding a lease each (reporting every %lld ms "
              "when on), grants measured for %.1f s per run, snapshot interval %lld ms\n",
              settings.devices, kSessions, static_cast<long long>(settings.report_every.count()),
              std::chrono::duration<double>(settings.measure_for).count(),
              static_cast<long long>(settings.interval.count()));
  std::vector<double> off_p99, on_p99;
  try {
    for (std::size_t round = 0; round < settings.rounds; ++round) {
      for (bool dashboard : {false, true}) {
        Bench bench(settings, dashboard);
        RunResult r = bench.run();
        (dashboard ? on_p99 : off_p99).push_back(r.p99_us);
        std::printf("round %zu dashboard %-3s %6zu grants: latency p50 %7.1f us  p99 %7.1f us  max %8.1f us", round + 1,
                    dashboard ? "on" : "off", r.cycles, r.p50_us, r.p99_us, r.max_us);
        if (dashboard) {
          std::printf("  (%llu snapshots of %zu KiB built in %.2f ms mean, %.2f ms max; %zu streamed, %zu /metrics "
                      "scrapes; %zu reports)",
                      static_cast<unsigned long long>(r.snapshots), r.state_bytes / 1024, r.snapshot_ms_mean,
                      r.snapshot_ms_max, r.stream_events, r.scrapes, r.reports);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel-bench-dashboard: %s\n", e.what());
    return 1;
  }
  const double off = kestrel::stats::median(off_p99);
  const double on = kestrel::stats::median(on_p99);
  std::printf("grant latency p99 (median of %zu rounds): dashboard off %.1f us, on %.1f us, ratio on/off %.3f "
              "(goal: at most 1.10)\n",
              settings.rounds, off, on, off > 0 ? on / off : 0.0);
  return 0;
}
