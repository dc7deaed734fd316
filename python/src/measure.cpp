// What measures on devices: kestrel.profile (one configuration), kestrel.tune (a
// tuner::TuneSession), kestrel.query (a tracker's pool) and kestrel.LocalPool (the
// embedded pool, kept running across calls). Each call runs its own io_context on the
// calling thread with the GIL released; the GIL is taken back only to call Python (the
// progress callback) and to check for Ctrl-C.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>

#include "bindings.h"
#include "kestrel/base/stats.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/leased_pool.h"
#include "kestrel/host/local_pool.h"
#include "kestrel/host/summary_json.h"
#include "kestrel/host/target.h"
#include "kestrel/rpc/asio.h"
#include "kestrel/rpc/tracker_client.h"
#include "kestrel/tuner/evaluator.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/session.h"
#include "kestrel/tuner/strategy.h"
#include "kestrel/tuner/task.h"

namespace kestrel::python {
namespace {

using namespace std::chrono_literals;

// Reads a dict of options given by the Python layer: every key must be known (a typo
// is a UsageError rather than silently ignored).
class Options {
 public:
  Options(py::dict values, std::string what) : values_(std::move(values)), what_(std::move(what)) {}

  bool has(const char* key) const { return values_.contains(key) && !values_[key].is_none(); }

  std::string str(const char* key, const std::string& fallback = "") {
    py::object v = take(key);
    if (v.is_none()) return fallback;
    if (!py::isinstance<py::str>(v)) throw UsageError(std::string(key) + " must be a str");
    return v.cast<std::string>();
  }
  std::optional<std::string> optional_str(const char* key) {
    if (!has(key)) {
      take(key);
      return std::nullopt;
    }
    return str(key);
  }
  std::int64_t integer(const char* key, std::int64_t fallback, std::int64_t min, std::int64_t max) {
    py::object v = take(key);
    if (v.is_none()) return fallback;
    if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v)) {
      throw UsageError(std::string(key) + " must be an integer, not " + py::repr(v).cast<std::string>());
    }
    const auto value = v.cast<std::int64_t>();
    if (value < min || value > max) {
      throw UsageError(std::string(key) + " must be between " + std::to_string(min) + " and " + std::to_string(max) +
                       ", not " + std::to_string(value));
    }
    return value;
  }
  double number(const char* key, double fallback) {
    py::object v = take(key);
    if (v.is_none()) return fallback;
    if (!py::isinstance<py::int_>(v) && !py::isinstance<py::float_>(v)) throw UsageError(std::string(key) + " must be a number");
    return v.cast<double>();
  }
  bool flag(const char* key, bool fallback = false) {
    py::object v = take(key);
    return v.is_none() ? fallback : py::bool_(v).cast<bool>();
  }
  // Throws UsageError naming the keys no one asked for.
  void done() const {
    std::string unknown;
    for (auto [key, value] : values_) {
      const std::string name = py::str(key).cast<std::string>();
      if (!taken_.contains(name)) unknown += (unknown.empty() ? "" : ", ") + name;
    }
    if (!unknown.empty()) throw UsageError("unknown " + what_ + " option(s): " + unknown);
  }

 private:
  py::object take(const char* key) {
    taken_.insert(key);
    return values_.contains(key) ? py::object(values_[key]) : py::object(py::none());
  }
  py::dict values_;
  std::string what_;
  std::set<std::string> taken_;
};

std::optional<rpc::Token> token_of(Options& o) {
  std::optional<std::string> secret = o.optional_str("token");
  std::optional<std::string> file = o.optional_str("token_file");
  if (secret && file) throw UsageError("give token or token_file, not both");
  if (secret) return rpc::Token(*secret);
  if (file) return rpc::Token::from_file(*file);
  return std::nullopt;
}

// The pool a call measures on (measure_args.cpp's pool_options for the commands).
host::PoolOptions pool_of(Options& o, std::string client_name) {
  host::PoolOptions pool;
  if (std::optional<std::string> tracker = o.optional_str("tracker")) pool.tracker = rpc::parse_endpoint(*tracker);
  pool.key = o.str("key", "local");
  if (!pool.tracker && pool.key != "local") {
    throw UsageError("key '" + pool.key + "' needs tracker=\"HOST:PORT\" (without a tracker a local device is used)");
  }
  pool.token = token_of(o);
  pool.tls.disabled = o.flag("no_tls");
  pool.tls.ca_file = o.str("tls_ca");
  if (pool.tls.disabled && !pool.tls.ca_file.empty()) throw UsageError("tls_ca and no_tls contradict each other: drop one");
  if (!pool.tracker && (pool.tls.disabled || !pool.tls.ca_file.empty())) {
    throw UsageError("no_tls and tls_ca apply to a tracker: give tracker=\"HOST:PORT\"");
  }
  rpc::peer_tls_context(pool.tls, pool.token.has_value());  // a bad tls_ca fails here, with its reason
  pool.wait = std::chrono::milliseconds(o.integer("wait_ms", 30'000, 1, 24 * 3'600'000));
  pool.priority = static_cast<std::int32_t>(o.integer("priority", 0, -1000, 1000));
  pool.devices = static_cast<unsigned>(o.integer("devices", 1, 1, 4096));
  pool.client_name = std::move(client_name);
  return pool;
}

rpc::MeasureSettings measure_of(Options& o) {
  rpc::MeasureSettings m;
  m.number = static_cast<std::uint32_t>(o.integer("number", 0, 0, 100'000'000));
  m.repeat = static_cast<std::uint32_t>(o.integer("repeat", 5, 1, 10'000));
  m.min_repeat_ms = static_cast<std::uint32_t>(o.integer("min_repeat_ms", 100, 0, 600'000));
  m.cooldown_ms = static_cast<std::uint32_t>(o.integer("cooldown_ms", 0, 0, 600'000));
  m.flush_cache = o.flag("flush_cache");
  m.timeout_ms = static_cast<std::uint32_t>(o.integer("timeout_ms", 10'000, 1, 3'600'000));
  m.threads = static_cast<std::uint32_t>(o.integer("threads", 0, 0, 1024));
  m.seed = static_cast<std::uint64_t>(o.integer("data_seed", 1, 0, INT64_MAX));
  return m;
}

// The compile target for the leased device (measure_args.cpp's resolve_target): auto
// (its CPU), native, a triple, or a GPU spec of the device (cuda, cuda:sm_XX, opencl).
struct TargetSpec {
  std::string spec = "auto";
  std::string mcpu;
  std::string features;

  host::Target resolve(const rpc::DeviceInfo& device) const {
    try {
      if (host::is_gpu_target_spec(spec) || spec == "auto") {
        host::Target target = host::is_gpu_target_spec(spec) ? host::gpu_target_for_device(spec, device)
                                                             : host::target_for_device(device);
        if (!mcpu.empty()) target.cpu = mcpu;
        if (!features.empty()) target.features = features;
        return target;
      }
      return host::parse_target(spec, mcpu, features);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
};

TargetSpec target_of(Options& o) {
  TargetSpec t;
  t.spec = o.str("target", "auto");
  t.mcpu = o.str("mcpu");
  t.features = o.str("features");
  return t;
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

py::dict progress_dict(const tuner::TuneProgress& p) {
  py::dict out;
  out["trials"] = p.trials;
  out["total"] = p.total;
  out["this_session"] = p.this_session;
  out["failures"] = p.failures;
  out["statuses"] = p.statuses;
  out["best_gflops"] = p.best_gflops;
  out["default_gflops"] = p.default_gflops;
  out["best_config"] = p.best_config.empty() ? py::dict() : to_dict(ops::parse_pairs(p.best_config));
  out["elapsed_s"] = seconds(p.elapsed);
  out["eta_s"] = p.eta ? py::object(py::float_(seconds(*p.eta))) : py::object(py::none());
  out["phase"] = p.phase;
  return out;
}

py::dict entry_dict(const tuner::FinalEntry& f) {
  py::dict out;
  out["config"] = f.config.empty() ? py::dict() : to_dict(ops::parse_pairs(f.config));
  out["config_text"] = f.config;
  out["median_s"] = f.median_s;
  out["gflops"] = f.gflops;
  out["status"] = f.status;
  out["spread"] = f.spread;
  out["noisy"] = f.noisy;
  out["is_default"] = f.is_default;
  out["implementation"] = f.implementation;
  return out;
}

py::dict result_dict(const tuner::TuneResult& r) {
  py::dict out;
  out["session"] = r.session;
  out["op"] = r.op;
  out["workload"] = r.workload;
  out["target"] = r.target;
  out["traits"] = r.traits;
  out["trials"] = r.trials;
  out["this_session"] = r.this_session;
  out["resumed"] = r.resumed;
  out["transfer_records"] = r.transfer_records;
  out["statuses"] = r.statuses;
  out["stop_reason"] = r.stop_reason;
  out["default_gflops"] = r.default_gflops;
  out["default_is_best"] = r.default_is_best;
  py::list final;
  for (const auto& f : r.final) final.append(entry_dict(f));
  out["final"] = final;
  py::list vendors;
  for (const auto& v : r.vendors) vendors.append(entry_dict(v));
  out["vendors"] = vendors;
  out["best_recorded"] = r.best_recorded ? py::object(entry_dict(*r.best_recorded)) : py::object(py::none());
  // The recommendation: the final round's winner, else the best recorded (none: nothing
  // was measured successfully).
  if (!r.final.empty()) out["best"] = entry_dict(r.final.front());
  else if (r.best_recorded) out["best"] = entry_dict(*r.best_recorded);
  else out["best"] = py::none();
  return out;
}

// Checks for Ctrl-C (and other Python signal handlers) every 200 ms while the io_context
// runs: Python's handler only sets a flag that this thread must act on. Only effective
// on the main thread (elsewhere Python runs no signal handlers).
class SignalPoll {
 public:
  // `on_signal` runs (GIL not held) when a handler raised; the first exception is kept.
  SignalPoll(asio::io_context& io, std::function<void()> on_signal) : timer_(io), on_signal_(std::move(on_signal)) {
    wait();
  }
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }
  // The first exception a signal handler raised (KeyboardInterrupt), if any; call with
  // the GIL held.
  std::optional<py::error_already_set>& raised() { return raised_; }

 private:
  void wait() {
    timer_.expires_after(200ms);
    timer_.async_wait([this](std::error_code ec) {
      if (ec || stopped_) return;
      bool signalled = false;
      {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) {
          signalled = true;
          if (!raised_) raised_.emplace();  // fetches (and clears) the Python error
          else PyErr_Clear();
        }
      }
      if (signalled) on_signal_();
      wait();
    });
  }
  asio::steady_timer timer_;
  std::function<void()> on_signal_;
  std::optional<py::error_already_set> raised_;
  bool stopped_ = false;
};

py::dict profile(const std::string& name, py::object shape, py::object config, py::dict options) {
  Options o(std::move(options), "profile");
  const ops::Registry registry = ops::builtin_ops();
  // The workload is checked now so that a bad one fails before a pool starts; the op's
  // variant for the target's backend is known once a device is leased.
  params_of(registry.get(name), shape);
  const std::string shape_text = pairs_text(shape, "the workload");
  const std::string config_text = pairs_text(config, "the configuration");
  host::PoolOptions pool_options = pool_of(o, "kestrel.profile (python)");
  pool_options.reconnect_window = 0ms;
  const rpc::MeasureSettings measure = measure_of(o);
  const TargetSpec target_spec = target_of(o);
  o.done();

  tuner::Evaluation result;
  host::Target target;
  tuner::Task task;
  ops::Config chosen;
  {
    py::gil_scoped_release release;
    host::run_leased(pool_options, [&](host::LeasedPool& leased) -> rpc::awaitable<void> {
      target = target_spec.resolve(leased.device());
      task.op = &registry.get(name, target.backend);
      task.params = ops::parse_params(*task.op, shape_text);
      task.target = target;
      chosen = ops::parse_config(*task.op, task.params, config_text, target.traits);
      host::Compiler compiler({2});
      tuner::MeasuredEvaluator evaluator(compiler, leased.measurer(), pool_options.key);
      std::vector<ops::Config> configs(1, chosen);
      std::vector<tuner::Evaluation> results = co_await evaluator.evaluate(task, configs, measure);
      result = results.front();
      if (result.device.empty()) result.device = leased.device().name;
    });
  }
  py::dict out;
  out["op"] = task.op_name();
  out["workload"] = task.workload();
  out["config"] = to_dict(chosen);
  out["target"] = target.to_string();
  out["device"] = result.device;
  out["status"] = std::string(kernel::to_string(result.status));
  out["ok"] = result.ok();
  out["message"] = result.message;
  out["compile_ms"] = result.compile_ms;
  out["number"] = result.number;
  out["round_seconds"] = result.round_seconds;
  out["max_error"] = result.max_error;
  out["flops"] = task.flops();
  if (result.ok() && !result.round_seconds.empty()) {
    const stats::Summary s = stats::summarize(result.round_seconds);
    out["min_s"] = s.min;
    out["median_s"] = s.median;
    out["mean_s"] = s.mean;
    out["stddev_s"] = s.stddev;
    out["cost"] = s.median;
    out["gflops"] = task.flops() / s.median / 1e9;
  } else {
    out["cost"] = std::numeric_limits<double>::infinity();
    out["gflops"] = 0.0;
  }
  return out;
}

py::dict tune(const std::string& name, py::object shape, py::dict options, py::object callback) {
  Options o(std::move(options), "tune");
  const ops::Registry registry = ops::builtin_ops();
  const ops::Op& op = registry.get(name);
  std::vector<tuner::TuneJob> jobs{{"", &op, params_of(op, shape)}};

  tuner::TuneOptions tune;
  tune.strategy = o.str("strategy", "sa");
  const auto& names = tuner::strategy_names();
  if (std::find(names.begin(), names.end(), tune.strategy) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw UsageError("unknown strategy '" + tune.strategy + "' (strategies: " + list + ")");
  }
  tune.trials = static_cast<std::size_t>(o.integer("trials", 200, 1, 100'000'000));
  tune.time_budget = std::chrono::seconds(o.integer("time_budget_s", 0, 0, 365LL * 24 * 3600));
  tune.early_stopping = static_cast<std::size_t>(o.integer("early_stopping", 0, 0, 100'000'000));
  tune.batch_size = static_cast<std::size_t>(o.integer("batch", 16, 1, 4096));
  tune.seed = static_cast<std::uint64_t>(o.integer("seed", 1, 0, INT64_MAX));
  tune.final_top = static_cast<std::size_t>(o.integer("final_top", 3, 0, 100));
  tune.final_repeat = static_cast<std::uint32_t>(o.integer("final_repeat", 15, 1, 10'000));
  tune.transfer = o.flag("transfer", true);
  tune.vendors = o.str("vendors", "all");
  tune.measure = measure_of(o);
  const std::string db_path = o.str("db", "kestrel.db");

  tuner::SessionOptions session_options;
  session_options.pool = pool_of(o, "kestrel.tune (python)");
  session_options.pool.reconnect_window = std::chrono::milliseconds(o.integer("reconnect_ms", 120'000, 0, 24 * 3'600'000));
  session_options.compile_threads = static_cast<unsigned>(o.integer("compile_threads", 0, 0, 256));
  tune.device_key = session_options.pool.key;
  session_options.tune = tune;
  const TargetSpec target_spec = target_of(o);
  session_options.choose_target = [target_spec](const rpc::DeviceInfo& device) { return target_spec.resolve(device); };
  session_options.registry = &registry;
  o.done();
  if (!callback.is_none() && !PyCallable_Check(callback.ptr())) throw UsageError("callback must be callable");

  std::unique_ptr<records::RecordStore> db = records::open_records(db_path);  // fails early on a bad file
  tuner::SessionResult session_result;
  std::exception_ptr failure;
  std::optional<py::error_already_set> interrupt;
  {
    py::gil_scoped_release release;
    tuner::TuneSession session(jobs, *db, session_options);
    asio::io_context io;
    // Ctrl-C: stop now (waits end, the batch in flight is dropped, every record is kept); again: abort.
    int signals = 0;
    bool stop_pending = false;
    auto stop = [&] {
      if (signals++ > 0) {
        session.abort();
        return;
      }
      stop_pending = !session.request_stop() && !session.abort();
    };
    SignalPoll poll(io, [&] { stop(); });
    asio::steady_timer retry(io);  // a stop asked for before any device was leased
    std::function<void()> retry_stop = [&] {
      retry.expires_after(100ms);
      retry.async_wait([&](std::error_code ec) {
        if (ec) return;
        if (stop_pending) stop_pending = !session.request_stop() && !session.abort();
        retry_stop();
      });
    };
    retry_stop();
    std::function<void(std::size_t, const tuner::TuneProgress&)> on_progress = [&callback](std::size_t,
                                                                                        const tuner::TuneProgress& p) {
      if (callback.is_none()) return;
      py::gil_scoped_acquire gil;
      callback(progress_dict(p));  // a Python exception propagates: the session ends, its pool released
    };
    asio::co_spawn(
        io,
        [&]() -> rpc::awaitable<void> { session_result = co_await session.run(on_progress); },
        [&](std::exception_ptr e) {
          failure = e;
          poll.stop();
          retry.cancel();
        });
    io.run();
    {
      py::gil_scoped_acquire gil;
      if (poll.raised()) interrupt = std::move(poll.raised());
    }
  }
  if (interrupt) throw *interrupt;  // KeyboardInterrupt: the session stopped, records kept
  if (failure) std::rethrow_exception(failure);

  py::dict out;
  py::list results;
  for (const auto& r : session_result.results) results.append(result_dict(r));
  out["results"] = results;
  out["db"] = db->location();
  out["interrupted"] = session_result.interrupted;
  out["aborted"] = session_result.aborted;
  return out;
}

py::dict query(py::dict options) {
  Options o(std::move(options), "query");
  const rpc::Endpoint endpoint = rpc::parse_endpoint(o.str("tracker", "127.0.0.1:9190"));
  rpc::ClientOptions client;
  client.name = "kestrel.query (python)";
  client.token = token_of(o);
  client.tls.disabled = o.flag("no_tls");
  client.tls.ca_file = o.str("tls_ca");
  if (client.tls.disabled && !client.tls.ca_file.empty()) throw UsageError("tls_ca and no_tls contradict each other: drop one");
  const auto timeout = std::chrono::milliseconds(o.integer("timeout_ms", 5000, 1, 3'600'000));
  client.connect_timeout = timeout;
  o.done();

  std::optional<rpc::TrackerSummary> summary;
  {
    py::gil_scoped_release release;
    asio::io_context io;
    std::exception_ptr failure;
    asio::co_spawn(
        io,
        [&]() -> rpc::awaitable<void> {
          auto connection = co_await rpc::TrackerClient::connect(endpoint, client);
          summary = co_await connection->summary(timeout);
          connection->close();
        },
        [&](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) std::rethrow_exception(failure);
  }
  // The same document as `kestrel query --json`, as Python objects.
  return py::dict(py::module_::import("json").attr("loads")(host::to_json(*summary, endpoint.to_string()).dump()));
}

// The embedded pool (a tracker on loopback and local kestrel-device children) as a
// Python object: kept running across calls, closed explicitly or when collected.
class LocalPool {
 public:
  LocalPool(unsigned devices, std::string key) {
    py::gil_scoped_release release;
    pool_ = std::make_unique<host::LocalPool>(devices, std::move(key));
  }
  std::string tracker() const { return get().endpoint().to_string(); }
  std::string key() const { return get().key(); }
  bool closed() const { return !pool_; }
  void close() {
    py::gil_scoped_release release;
    pool_.reset();
  }

 private:
  const host::LocalPool& get() const {
    if (!pool_) throw UsageError("the local pool is closed");
    return *pool_;
  }
  std::unique_ptr<host::LocalPool> pool_;
};

}  // namespace

void bind_measure(py::module_& m) {
  m.def("profile", &profile, py::arg("op"), py::arg("shape"), py::arg("config"), py::arg("options"),
        "measures one configuration of an op at a workload (see kestrel.profile)");
  m.def("tune", &tune, py::arg("op"), py::arg("shape"), py::arg("options"), py::arg("callback"),
        "runs a tuning session (see kestrel.tune)");
  m.def("query", &query, py::arg("options"), "a tracker's pool summary (see kestrel.query)");
  py::class_<LocalPool>(m, "LocalPool")
      .def(py::init<unsigned, std::string>(), py::arg("devices") = 1, py::arg("key") = "local")
      .def_property_readonly("tracker", &LocalPool::tracker, "its tracker's address, \"127.0.0.1:PORT\"")
      .def_property_readonly("key", &LocalPool::key)
      .def_property_readonly("closed", &LocalPool::closed)
      .def("close", &LocalPool::close, "stops the devices and the tracker; idempotent");
}

}  // namespace kestrel::python
