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
#include "kestrel/frontend/json.h"
#include "kestrel/frontend/options.h"
#include "kestrel/frontend/session_runner.h"
#include "kestrel/frontend/tracker_query.h"
#include "kestrel/frontend/tune_setup.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/leased_pool.h"
#include "kestrel/host/local_pool.h"
#include "kestrel/host/summary_json.h"
#include "kestrel/host/target.h"
#include "kestrel/rpc/asio.h"
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
  bool is_text(const char* key) const { return has(key) && py::isinstance<py::str>(values_[key]); }
  // has(), and the key counts as known (done() does not refuse it, None or not).
  bool given(const char* key) {
    taken_.insert(key);
    return has(key);
  }

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
    if ((!py::isinstance<py::int_>(v) && !py::isinstance<py::float_>(v)) || py::isinstance<py::bool_>(v)) {
      throw UsageError(std::string(key) + " must be a number, not " + py::repr(v).cast<std::string>());
    }
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

// The shared options (frontend/options.h) as a call's keywords give them: "wait_ms".
class DictSource final : public frontend::OptionSource {
 public:
  explicit DictSource(Options& o) : o_(o) {}
  bool has(const frontend::OptionSpec& spec) override { return o_.given(key(spec).c_str()); }
  std::string text(const frontend::OptionSpec& spec) override { return o_.str(key(spec).c_str()); }
  std::int64_t integer(const frontend::OptionSpec& spec) override {
    return o_.integer(key(spec).c_str(), 0, INT64_MIN, INT64_MAX);
  }
  bool flag(const frontend::OptionSpec& spec) override { return o_.flag(key(spec).c_str()); }
  // A number of seconds, or the command line's text ("15m").
  std::chrono::seconds duration(const frontend::OptionSpec& spec) override {
    const std::string name = key(spec);
    if (o_.is_text(name.c_str())) return frontend::parse_duration(name, o_.str(name.c_str()));
    const double seconds = o_.number(name.c_str(), 0);
    if (!(seconds >= 0) || seconds > 1e9) {
      throw UsageError(name + " must be a number of seconds (or a text such as \"15m\"), not " + std::to_string(seconds));
    }
    return std::chrono::seconds(static_cast<std::int64_t>(std::ceil(seconds)));
  }
  std::string spell(const frontend::OptionSpec& spec) const override { return key(spec); }

 private:
  static std::string key(const frontend::OptionSpec& spec) {
    std::string k(spec.name);
    std::replace(k.begin(), k.end(), '-', '_');
    return k;
  }
  Options& o_;
};

// The pool a call measures on: a tracker's, or the embedded one.
host::PoolOptions pool_of(Options& o, std::string client_name) {
  DictSource source(o);
  std::optional<rpc::Token> token = token_of(o);
  host::PoolOptions pool = frontend::pool_options(source, std::move(token), std::move(client_name));
  return pool;
}

rpc::MeasureSettings measure_of(Options& o) {
  DictSource source(o);
  return frontend::measure_settings(source);
}

frontend::TargetPolicy target_of(Options& o) {
  DictSource source(o);
  return frontend::target_policy(source);
}


// frontend::to_json's forms, with each configuration as a dict ("config") beside its
// text ("config_text"; a vendor library's is {} and "").
py::dict progress_dict(const tuner::TuneProgress& p) {
  py::dict out = to_python(frontend::to_json(p));
  out["best_config"] = p.best_config ? to_dict(*p.best_config) : py::dict();
  return out;
}

py::dict entry_dict(const tuner::FinalEntry& entry, double flops) {
  py::dict out = to_python(frontend::to_json(entry, flops));
  out["config"] = to_dict(entry.config);
  out["config_text"] = ops::format_config(entry.config);
  return out;
}

py::dict result_dict(const tuner::TuneResult& r) {
  py::dict out = to_python(frontend::to_json(r));
  py::list final, vendors;
  for (const auto& f : r.final) final.append(entry_dict(f, r.flops));
  for (const auto& v : r.vendors) vendors.append(entry_dict(v, r.flops));
  out["final"] = final;
  out["vendors"] = vendors;
  const tuner::FinalEntry* best = r.recommendation();
  out["best"] = best ? py::object(entry_dict(*best, r.flops)) : py::object(py::none());
  out["best_recorded"] = r.best_recorded ? py::object(entry_dict(*r.best_recorded, r.flops)) : py::object(py::none());
  if (!r.zero_shot) out["zero_shot"] = py::none();
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
  const frontend::TargetPolicy target_spec = target_of(o);
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
  // What is tuned: one op at a workload, or an ONNX model's tasks (as kestrel tune --model).
  std::vector<tuner::TuneJob> jobs;
  std::shared_ptr<const model::Model> model;
  std::vector<model::Binding> buckets;
  std::int64_t block = 0;
  const std::optional<std::string> model_path = o.optional_str("model");
  const std::string buckets_text = o.str("buckets");
  const bool has_block = o.has("block");
  block = frontend::checked_block("block", o.integer("block", 0, 0, 64));
  const bool has_winograd = o.has("winograd");
  const bool winograd = o.flag("winograd", true);
  if (model_path) {
    if (!name.empty() || !shape.is_none()) throw UsageError("give either op and shape, or model=, not both");
    model = std::make_shared<const model::Model>(model::Model::load(*model_path));
    buckets = model::parse_buckets(model->graph().symbols(), buckets_text);
  } else {
    if (!buckets_text.empty() || has_block) throw UsageError("buckets and block go with model=");
    if (has_winograd) throw UsageError("winograd goes with model=");
    if (name.empty()) throw UsageError("an op is required (or model=\"file.onnx\")");
    const ops::Op& op = registry.get(name);
    jobs.push_back({"", &op, params_of(op, shape)});
  }

  DictSource source(o);
  // A model has tens of tasks, each tuned to `trials_per_task` (64 by default) and
  // re-measured after the search: two finalists each.
  tuner::TuneOptions tune = frontend::tune_options(source, model != nullptr);
  const std::string db_path = o.str("db", "kestrel.db");

  tuner::SessionOptions session_options;
  session_options.pool = pool_of(o, "kestrel.tune (python)");
  frontend::apply_session_options(source, session_options);
  tune.device_key = session_options.pool.key;
  session_options.tune = tune;
  session_options.registry = &registry;
  // A cost model (kestrel cost-model train) as the search's prior, or picking without a search.
  const frontend::CostModelUse cost_model = frontend::cost_model_use(source);
  frontend::use_cost_model(session_options, cost_model, target_of(o), model ? nullptr : jobs.front().op, registry);
  if (model) frontend::tune_model_tasks(session_options, model, buckets, block, registry, {}, winograd);
  o.done();
  if (!callback.is_none() && !PyCallable_Check(callback.ptr())) throw UsageError("callback must be callable");

  std::unique_ptr<records::RecordStore> db = frontend::open_session_records(db_path, frontend::measures(cost_model));
  tuner::SessionResult session_result;
  std::exception_ptr failure;
  std::optional<py::error_already_set> interrupt;
  {
    py::gil_scoped_release release;
    asio::io_context io;
    // Ctrl-C: stop now (waits end, the batch in flight is dropped, every record is kept);
    // again: abort. One before any device is leased is kept and tried again every 100 ms.
    std::optional<SignalPoll> poll;
    std::optional<asio::steady_timer> retry;
    std::function<void()> retry_stop;
    int signals = 0;
    bool stop_pending = false;
    auto watch = [&](frontend::SessionControl& control) -> std::function<void()> {
      poll.emplace(io, [&] {
        if (signals++ > 0) {
          control.abort();
          return;
        }
        stop_pending = !control.request_stop() && !control.abort();
      });
      retry.emplace(io);
      retry_stop = [&] {
        retry->expires_after(100ms);
        retry->async_wait([&](std::error_code ec) {
          if (ec) return;
          if (stop_pending) stop_pending = !control.request_stop() && !control.abort();
          retry_stop();
        });
      };
      retry_stop();
      return [&] {
        poll->stop();
        retry->cancel();
      };
    };
    auto on_progress = [&callback](const std::vector<tuner::TuneJob>&, std::size_t, const tuner::TuneProgress& p) {
      if (callback.is_none()) return;
      py::gil_scoped_acquire gil;
      callback(progress_dict(p));  // a Python exception propagates: the session ends, its pool released
    };
    try {
      session_result = frontend::run_session(io, jobs, *db, session_options, on_progress, watch);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      py::gil_scoped_acquire gil;
      if (poll && poll->raised()) interrupt = std::move(poll->raised());
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
  out["stop_reason"] = std::string(tuner::to_string(session_result.stop_reason));
  return out;
}

py::dict query(py::dict options) {
  Options o(std::move(options), "query");
  DictSource source(o);
  std::optional<rpc::Token> token = token_of(o);
  frontend::QueryOptions query = frontend::query_options(source, std::move(token), "kestrel.query (python)");
  o.done();

  rpc::TrackerSummary summary;
  {
    py::gil_scoped_release release;
    summary = frontend::query_tracker(query.tracker, std::move(query.client), query.timeout);
  }
  // The same document as `kestrel query --json`, as Python objects.
  return to_python(host::to_json(summary, query.tracker.to_string()));
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
