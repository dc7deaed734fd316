// The tuning session's wiring in `kestrel tune` and `kestrel bench --tune-trials`: Ctrl-C
// and the progress bar.
#include "tune_session.h"

#include <unistd.h>

#include <csignal>
#include <iomanip>
#include <iostream>
#include <sstream>


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

tuner::SessionResult run_tune_session(const std::vector<tuner::TuneJob>& jobs, tuner::RecordStore& db,
                                      const TuneSessionOptions& options) {
  tuner::SessionResult result;
  if (jobs.empty()) return result;
  tuner::TuneSession session(jobs, db, options.session);
  asio::io_context io;
  int interrupts = 0;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](std::error_code ec, int signo) {
      if (ec) return;
      if (++interrupts > 1 || !session.request_stop()) {
        std::cerr << "\n" << options.program << ": interrupted; records so far are in " << db.location() << "\n";
        std::_Exit(130);
      }
      std::cerr << "\n" << options.program << ": signal " << signo
                << ": stopping after the batch in flight (again to quit now); records are kept\n";
      wait_signal();
    });
  };
  wait_signal();

  std::vector<ProgressView> views;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    std::string prefix;
    if (jobs.size() > 1) {
      prefix = "(" + std::to_string(i + 1) + "/" + std::to_string(jobs.size()) + " " +
               (jobs[i].label.empty() ? std::string(jobs[i].op->name()) : jobs[i].label) + ") ";
    }
    views.emplace_back(options.quiet, prefix);
  }
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> rpc::awaitable<void> {
        result = co_await session.run([&](std::size_t job, const tuner::TuneProgress& p) { views[job].update(p); });
      },
      [&](std::exception_ptr e) {
        failure = e;
        signals.cancel();
      });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return result;
}

}  // namespace kestrel::tools
