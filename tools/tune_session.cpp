// The tuning session behind `kestrel tune` and `kestrel bench --tune-trials`.
#include "tune_session.h"

#include <unistd.h>

#include <csignal>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "kestrel/host/local_pool.h"
#include "kestrel/rpc/errors.h"

namespace kestrel::tools {
namespace {

std::string duration_text(std::chrono::steady_clock::duration d) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
  else if (s >= 60) out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else out << s << "s";
  return out.str();
}

// Progress: a bar redrawn in place on a terminal, plain log lines otherwise.
class ProgressView {
 public:
  ProgressView(bool quiet, std::string prefix)
      : tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet), prefix_(std::move(prefix)) {}

  void update(const tuner::TuneProgress& p) {
    if (quiet_) return;
    std::ostringstream line;
    std::size_t width = 24;
    std::size_t filled = p.total ? std::min(width, p.trials * width / p.total) : 0;
    line << prefix_ << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << p.trials << "/"
         << p.total << " trials";
    line << std::fixed << std::setprecision(1) << " | best " << p.best_gflops << " GFLOP/s";
    if (p.default_gflops > 0 && p.best_gflops > 0) {
      line << std::setprecision(2) << " (" << p.best_gflops / p.default_gflops << "x default)";
    }
    line << " | " << p.failures << " failed | " << duration_text(p.elapsed);
    if (p.eta) line << " | ETA " << duration_text(*p.eta);
    if (p.phase == "final") line << " | re-measuring the best";
    if (tty_) {
      std::cerr << "\r\033[K" << line.str() << std::flush;
      if (p.phase == "done") std::cerr << "\n";
    } else if (p.trials != last_trials_ || p.phase != last_phase_) {
      std::cerr << "tune: " << line.str() << "\n";
    }
    last_trials_ = p.trials;
    last_phase_ = p.phase;
  }

 private:
  bool tty_;
  bool quiet_;
  std::string prefix_;
  std::size_t last_trials_ = static_cast<std::size_t>(-1);
  std::string last_phase_;
};

}  // namespace

TuneSessionResult run_tune_session(const std::vector<TuneJob>& jobs, tuner::RecordStore& db,
                                   const TuneSessionOptions& options) {
  TuneSessionResult session;
  if (jobs.empty()) return session;
  const PoolChoice& pool = options.pool;
  std::unique_ptr<host::LocalPool> local;
  if (!pool.tracker) local = std::make_unique<host::LocalPool>(1, pool.key);
  rpc::Endpoint endpoint = pool.tracker ? *pool.tracker : local->endpoint();

  asio::io_context io;
  tuner::TuningLoop* loop_ptr = nullptr;
  bool stop_requested = false;
  int interrupts = 0;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](std::error_code ec, int signo) {
      if (ec) return;
      if (++interrupts > 1 || !loop_ptr) {
        std::cerr << "\n" << options.program << ": interrupted; records so far are in " << db.location() << "\n";
        std::_Exit(130);
      }
      std::cerr << "\n" << options.program << ": signal " << signo
                << ": stopping after the batch in flight (again to quit now); records are kept\n";
      stop_requested = true;
      loop_ptr->request_stop();
      wait_signal();
    });
  };
  wait_signal();

  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        rpc::ClientOptions client_options;
        client_options.name = options.program;
        client_options.token = pool.token;
        auto client = co_await rpc::TrackerClient::connect(endpoint, client_options);
        host::MeasureClientOptions measure_client;
        measure_client.key = pool.key;
        measure_client.devices = options.devices;
        measure_client.request_timeout = pool.wait;
        measure_client.reconnect_timeout = options.reconnect_window;
        // An overnight session outlives a tracker restart: reconnect and lease again.
        measure_client.reconnect = [endpoint, client_options]() {
          return rpc::TrackerClient::connect(endpoint, client_options);
        };
        host::MeasureClient measurer(client, measure_client);
        try {
          co_await measurer.open();
          host::Target target = options.target_args ? resolve_target(*options.target_args, measurer.leases().front().info)
                                                    : host::target_for_device(measurer.leases().front().info);
          host::Compiler compiler({options.compile_threads});
          for (std::size_t i = 0; i < jobs.size() && !stop_requested; ++i) {
            const TuneJob& job = jobs[i];
            std::string prefix;
            if (jobs.size() > 1) {
              prefix = "(" + std::to_string(i + 1) + "/" + std::to_string(jobs.size()) + " " +
                       (job.label.empty() ? std::string(job.op->name()) : job.label) + ") ";
            }
            ProgressView view(options.quiet, prefix);
            // OpError when the op has no kernel for the target's backend.
            const ops::Op& op = options.registry ? options.registry->get(job.op->name(), target.backend) : *job.op;
            tuner::TuningLoop loop(op, job.params, target, db, compiler, measurer, options.tune);
            loop_ptr = &loop;
            tuner::TuneResult result = co_await loop.run([&](const tuner::TuneProgress& p) { view.update(p); });
            loop_ptr = nullptr;
            if (result.stop_reason == "interrupted") stop_requested = true;
            session.results.push_back(std::move(result));
          }
        } catch (...) {
          loop_ptr = nullptr;
          failure = std::current_exception();
        }
        co_await measurer.close();
        measurer.tracker()->close();
        signals.cancel();
      },
      [&](std::exception_ptr e) {
        if (e && !failure) failure = e;
        signals.cancel();
      });
  io.run();
  if (failure) std::rethrow_exception(failure);
  session.interrupted = stop_requested;
  return session;
}

}  // namespace kestrel::tools
