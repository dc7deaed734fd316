// `kestrel tune`: a tuning session for one workload on a pool of devices (or, without
// --tracker, on this machine through an embedded tracker and device).
#include <unistd.h>

#include <csignal>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "kestrel/host/local_pool.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/rpc/log.h"
#include "kestrel/tuner/records.h"
#include "kestrel/tuner/strategy.h"
#include "kestrel/tuner/tuning_loop.h"
#include "measure_args.h"

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

std::chrono::seconds parse_duration(const std::string& text) {
  if (text.empty()) throw UsageError("--time-budget needs a value such as 90s, 15m or 2h");
  char unit = text.back();
  std::string number = std::isdigit(static_cast<unsigned char>(unit)) ? text : text.substr(0, text.size() - 1);
  long value = 0;
  try {
    std::size_t used = 0;
    value = std::stol(number, &used);
    if (used != number.size() || value < 0) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw UsageError("--time-budget '" + text + "' is not a duration such as 90s, 15m or 2h");
  }
  switch (unit) {
    case 'h': return std::chrono::hours(value);
    case 'm': return std::chrono::minutes(value);
    default: return std::chrono::seconds(value);
  }
}

// Progress: a bar redrawn in place on a terminal, plain log lines otherwise.
class ProgressView {
 public:
  explicit ProgressView(bool quiet) : tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet) {}

  void update(const tuner::TuneProgress& p) {
    if (quiet_) return;
    std::ostringstream line;
    std::size_t width = 24;
    std::size_t filled = p.total ? std::min(width, p.trials * width / p.total) : 0;
    line << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << p.trials << "/"
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
  std::size_t last_trials_ = static_cast<std::size_t>(-1);
  std::string last_phase_;
};

void print_summary(const tuner::TuneResult& r, const std::string& db_path) {
  std::cout << "\n"
            << r.op << " " << r.workload << " on " << r.target << "\n"
            << "trials: " << r.trials << " (" << r.this_session << " this session";
  if (r.resumed) std::cout << ", " << r.resumed << " resumed";
  std::cout << "), stopped by " << r.stop_reason << "\n";
  if (!r.statuses.empty()) {
    std::cout << "statuses:";
    for (const auto& [status, count] : r.statuses) std::cout << " " << status << "=" << count;
    std::cout << "\n";
  }
  if (r.transfer_records) std::cout << "model seeded with " << r.transfer_records << " records of other workloads\n";
  if (r.final.empty()) {
    std::cout << "no successful measurement\n";
    return;
  }
  std::cout << "\n" << std::left << std::setw(6) << "RANK" << std::setw(12) << "GFLOP/s" << std::setw(12)
            << "MEDIAN ms" << std::setw(10) << "SPEED-UP" << "CONFIG\n";
  int rank = 1;
  for (const auto& f : r.final) {
    std::ostringstream speedup;
    if (r.default_gflops > 0 && f.gflops > 0) speedup << std::fixed << std::setprecision(2) << f.gflops / r.default_gflops << "x";
    std::cout << std::left << std::setw(6) << rank++ << std::setw(12) << std::fixed << std::setprecision(1) << f.gflops
              << std::setw(12) << std::setprecision(3) << f.median_s * 1e3 << std::setw(10) << speedup.str()
              << f.config << "\n";
  }
  if (r.default_gflops > 0) {
    std::cout << std::fixed << std::setprecision(1) << "default config: " << r.default_gflops << " GFLOP/s\n";
  }
  std::cout << "records: " << db_path << " (kestrel best --db " << db_path << ")\n";
}

}  // namespace

int run_tune(int argc, char** argv) {
  Args args("kestrel tune",
            "Tunes one workload: proposes configurations, compiles them for the device's target,\n"
            "measures them on every leased device of the key, records every result, and learns.\n"
            "Without --tracker it starts a tracker and a device on this machine and tunes for it.");
  args.option("op", "NAME", "op to tune (see `kestrel ops`)", "gemm");
  args.option("shape", "SHAPE", "workload, e.g. M=512,N=512,K=512 or 512x512x512 (required)");
  args.option("strategy", "NAME", "sa (annealing over an XGBoost cost model), anneal (model-free), ga, random, grid",
              "sa");
  args.option("trials", "N", "total configurations to measure for this workload and target, earlier runs included",
              "200");
  args.option("time-budget", "DURATION", "stop after this long, e.g. 15m");
  args.option("early-stopping", "N", "stop after N trials without improvement");
  args.option("batch", "N", "configurations per batch", "16");
  args.option("seed", "N", "seed of the search (reproducible)", "1");
  args.option("db", "FILE", "records database (SQLite); created if missing", "kestrel.db");
  args.option("devices", "N", "devices of the key to lease in parallel", "1");
  args.option("compile-threads", "N", "host compile threads; 0 = one per core", "0");
  args.option("reconnect-ms", "MS", "how long to keep reconnecting when the tracker goes away", "120000");
  args.option("final-top", "N", "best configurations re-measured at the end", "3");
  args.option("final-repeat", "N", "their timed rounds", "15");
  args.flag("no-transfer", "do not seed the cost model with records of other workloads");
  args.flag("quiet", "no progress output");
  args.flag("json", "print the result as JSON");
  add_pool_options(args);
  add_measure_options(args);
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  args.epilog(
      "Every measurement, failures included, is committed to --db as it arrives. Running the\n"
      "same command again resumes: configurations already measured on that target are\n"
      "skipped and the search starts from them. Ctrl-C stops after the batch in flight (press\n"
      "it again to quit at once); nothing recorded is lost.");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    set_log_level(args, "warn");
    if (!args.has("shape")) throw UsageError("--shape is required, e.g. --shape 512x512x512");
    ops::Registry registry = ops::builtin_ops();
    const std::string op_name = args.get("op", "gemm");
    const ops::Op& base_op = registry.get(op_name);
    ops::Params params = ops::parse_params(base_op, args.get("shape"));
    tuner::TuneOptions options;
    options.strategy = args.get("strategy", "sa");
    const auto& names = tuner::strategy_names();
    if (std::find(names.begin(), names.end(), options.strategy) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw UsageError("unknown strategy '" + options.strategy + "' (strategies: " + list + ")");
    }
    options.trials = static_cast<std::size_t>(args.get_int("trials", 200, 1, 100'000'000));
    if (args.has("time-budget")) options.time_budget = parse_duration(args.get("time-budget"));
    options.early_stopping = static_cast<std::size_t>(args.get_int("early-stopping", 0, 0, 100'000'000));
    options.batch_size = static_cast<std::size_t>(args.get_int("batch", 16, 1, 4096));
    options.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0, INT64_MAX));
    options.final_top = static_cast<std::size_t>(args.get_int("final-top", 3, 0, 100));
    options.final_repeat = static_cast<std::uint32_t>(args.get_int("final-repeat", 15, 1, 10'000));
    options.transfer = !args.has("no-transfer");
    options.measure = measure_options(args);
    PoolChoice pool = pool_choice(args);
    options.device_key = pool.key;
    unsigned devices = static_cast<unsigned>(args.get_int("devices", 1, 1, 4096));
    unsigned compile_threads = static_cast<unsigned>(args.get_int("compile-threads", 0, 0, 256));
    auto reconnect_window = std::chrono::milliseconds(args.get_int("reconnect-ms", 120'000, 0, 24 * 3'600'000));
    std::string db_path = args.get("db", "kestrel.db");
    tuner::RecordsDb db(db_path);  // fails early on a bad file

    std::unique_ptr<host::LocalPool> local;
    if (!pool.tracker) local = std::make_unique<host::LocalPool>(1, pool.key);
    rpc::Endpoint endpoint = pool.tracker ? *pool.tracker : local->endpoint();

    asio::io_context io;
    tuner::TuningLoop* loop_ptr = nullptr;
    int interrupts = 0;
    asio::signal_set signals(io, SIGINT, SIGTERM);
    std::function<void()> wait_signal = [&] {
      signals.async_wait([&](std::error_code ec, int signo) {
        if (ec) return;
        if (++interrupts > 1 || !loop_ptr) {
          std::cerr << "\nkestrel tune: interrupted; records so far are in " << db_path << "\n";
          std::_Exit(130);
        }
        std::cerr << "\nkestrel tune: signal " << signo
                  << ": stopping after the batch in flight (again to quit now); records are kept\n";
        loop_ptr->request_stop();
        wait_signal();
      });
    };
    wait_signal();

    tuner::TuneResult result;
    std::exception_ptr failure;
    ProgressView view(args.has("quiet") || args.has("json"));
    asio::co_spawn(
        io,
        [&]() -> rpc::awaitable<void> {
          rpc::ClientOptions client_options;
          client_options.name = "kestrel tune";
          client_options.token = pool.token;
          auto client = co_await rpc::TrackerClient::connect(endpoint, client_options);
          host::MeasureClientOptions measure_client;
          measure_client.key = pool.key;
          measure_client.devices = devices;
          measure_client.request_timeout = pool.wait;
          measure_client.reconnect_timeout = reconnect_window;
          // An overnight session outlives a tracker restart: reconnect and lease again.
          measure_client.reconnect = [endpoint, client_options]() { return rpc::TrackerClient::connect(endpoint, client_options); };
          host::MeasureClient measurer(client, measure_client);
          try {
            co_await measurer.open();
            host::Target target = resolve_target(args, measurer.leases().front().info);
            // The op's variant for the target's backend (GPU kernels have their own knobs).
            const ops::Op& op = registry.get(op_name, target.backend);  // OpError when it has none
            host::Compiler compiler({compile_threads});
            tuner::TuningLoop loop(op, params, target, db, compiler, measurer, options);
            loop_ptr = &loop;
            result = co_await loop.run([&](const tuner::TuneProgress& p) { view.update(p); });
            loop_ptr = nullptr;
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
    if (args.has("json")) {
      nlohmann::json final = nlohmann::json::array();
      for (const auto& f : result.final) {
        final.push_back({{"config", f.config}, {"median_s", f.median_s}, {"gflops", f.gflops}, {"status", f.status}});
      }
      nlohmann::json out = {{"session", result.session},     {"op", result.op},
                            {"workload", result.workload},   {"target", result.target},
                            {"trials", result.trials},       {"this_session", result.this_session},
                            {"resumed", result.resumed},     {"statuses", result.statuses},
                            {"stop_reason", result.stop_reason}, {"default_gflops", result.default_gflops},
                            {"final", final},                {"db", db_path}};
      std::cout << out.dump(2) << "\n";
    } else {
      print_summary(result, db_path);
    }
    return result.stop_reason == "interrupted" ? 130 : 0;
  } catch (const UsageError& e) {
    std::cerr << "kestrel tune: " << e.what() << "\n(see kestrel tune --help)\n";
    return 2;
  } catch (const ops::OpError& e) {
    std::cerr << "kestrel tune: " << e.what() << "\n";
    return 2;
  } catch (const tuner::RecordsError& e) {
    std::cerr << "kestrel tune: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kestrel tune: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kestrel::tools
