// `kestrel profile`: compile one configuration of an op (or a user kernel file with a
// small JSON spec), time it on a device, and print the statistics.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "kestrel/host/compile_async.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/measure_client.h"
#include "kestrel/ops/op.h"
#include "kestrel/rpc/errors.h"
#include "kestrel/base/log.h"
#include "kestrel/host/local_pool.h"
#include "measure_args.h"

namespace kestrel::tools {
namespace {

struct Stats {
  double min = 0, median = 0, mean = 0, stddev = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(sq / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// What is being profiled: sources, arguments, FLOPs, tolerance.
struct Subject {
  std::string label;
  ops::KernelSource kernel;
  std::optional<ops::KernelSource> reference;
  std::vector<rpc::TensorArg> args;
  double flops = 0;
  double tolerance = 1e-4;
  std::string instantiation_error;
};

// The op's variant for `backend` (GPU kernels have knobs of their own).
Subject subject_from_op(const ops::Registry& registry, const Args& args, const host::Target& target) {
  const ops::Op& op = registry.get(args.get("op"), target.backend);
  if (!args.has("shape")) throw UsageError("--shape is required with --op (see `kestrel ops --op " + args.get("op") + "`)");
  ops::Params params = ops::parse_params(op, args.get("shape"));
  ops::Config config = ops::parse_config(op, params, args.get("config"));
  Subject s;
  s.label = std::string(op.name()) + " " + ops::format_params(params) + " [" + ops::format_config(config) + "]";
  s.flops = op.flops(params);
  s.tolerance = op.tolerance(params);
  for (const auto& t : op.tensors(params)) s.args.push_back({t.elements(), t.role == ops::Role::output});
  s.instantiation_error = op.check(params, config);
  if (s.instantiation_error.empty()) {
    s.kernel = op.source(target.backend, params, config);
    s.instantiation_error = host::check_launch(s.kernel, target);
  }
  s.reference = op.reference(params);
  return s;
}

// A user kernel: --kernel FILE.c --spec FILE.json, where the spec is
// {"args": [{"name": "x", "elements": 1024, "output": false}, ...],
//  "defines": {"N": "1024"}, "flops": 2048, "reference": "ref.c", "tolerance": 1e-5}
Subject subject_from_file(const Args& args) {
  if (!args.has("spec")) throw UsageError("--kernel needs --spec FILE.json describing its arguments");
  std::string spec_path = args.get("spec");
  nlohmann::json spec = nlohmann::json::parse(read_file(spec_path), nullptr, false);
  if (spec.is_discarded() || !spec.is_object()) throw UsageError("spec '" + spec_path + "' is not a JSON object");
  Subject s;
  s.label = args.get("kernel");
  s.kernel.file_name = std::filesystem::path(args.get("kernel")).filename().string();
  s.kernel.text = read_file(args.get("kernel"));
  if (!spec.contains("args") || !spec["args"].is_array() || spec["args"].empty()) {
    throw UsageError("spec '" + spec_path + "' needs \"args\": [{\"elements\": N, \"output\": bool}, ...]");
  }
  for (const auto& a : spec["args"]) {
    if (!a.contains("elements") || !a["elements"].is_number_integer() || a["elements"].get<std::int64_t>() <= 0) {
      throw UsageError("spec '" + spec_path + "': every arg needs a positive integer \"elements\"");
    }
    s.args.push_back({a["elements"].get<std::int64_t>(), a.value("output", false)});
  }
  if (spec.contains("defines")) {
    for (const auto& [name, value] : spec["defines"].items()) {
      s.kernel.defines.push_back({name, value.is_string() ? value.get<std::string>() : value.dump()});
    }
  }
  s.flops = spec.value("flops", 0.0);
  s.tolerance = spec.value("tolerance", 1e-4);
  if (spec.contains("reference")) {
    auto ref_path = std::filesystem::path(spec_path).parent_path() / spec["reference"].get<std::string>();
    ops::KernelSource ref;
    ref.file_name = ref_path.filename().string();
    ref.text = read_file(ref_path.string());
    ref.defines = s.kernel.defines;
    s.reference = ref;
  }
  return s;
}

void print_text(const Subject& subject, const host::Measurement& m, const host::Target& target, double compile_ms) {
  std::cout << "kernel:   " << subject.label << "\n"
            << "target:   " << target.to_string() << "\n"
            << "device:   " << (m.device.empty() ? "-" : m.device) << "\n"
            << "status:   " << host::to_string(m.status) << "\n";
  if (!m.message.empty()) std::cout << "message:  " << m.message << "\n";
  if (compile_ms > 0) std::cout << "compile:  " << std::fixed << std::setprecision(1) << compile_ms << " ms\n";
  if (m.status != host::Status::ok) return;
  Stats s = stats_of(m.round_seconds);
  std::cout << std::fixed << std::setprecision(3) << "rounds:   " << m.round_seconds.size() << " x " << m.number
            << " calls\n"
            << "min:      " << s.min * 1e3 << " ms\n"
            << "median:   " << s.median * 1e3 << " ms\n"
            << "mean:     " << s.mean * 1e3 << " ms\n"
            << "stddev:   " << s.stddev * 1e3 << " ms\n";
  if (subject.flops > 0) {
    std::cout << std::setprecision(2) << "GFLOP/s:  " << subject.flops / s.median / 1e9 << " (median)\n";
  }
  std::cout << std::scientific << std::setprecision(2) << "max err:  " << m.max_error << "\n";
}

nlohmann::json to_json(const Subject& subject, const host::Measurement& m, const host::Target& target,
                       double compile_ms) {
  Stats s = stats_of(m.round_seconds);
  nlohmann::json out = {{"kernel", subject.label},      {"target", target.to_string()},
                        {"device", m.device},           {"status", host::to_string(m.status)},
                        {"message", m.message},         {"compile_ms", compile_ms},
                        {"number", m.number},           {"round_seconds", m.round_seconds},
                        {"max_error", m.max_error},     {"flops", subject.flops}};
  if (m.status == host::Status::ok) {
    out["min_s"] = s.min;
    out["median_s"] = s.median;
    out["mean_s"] = s.mean;
    out["stddev_s"] = s.stddev;
    if (subject.flops > 0) out["gflops"] = subject.flops / s.median / 1e9;
  }
  return out;
}

}  // namespace

int run_profile(int argc, char** argv) {
  Args args("kestrel profile",
            "Compiles one kernel configuration for a device, times it there, and prints the\n"
            "statistics of the timed rounds (min, median, mean, stddev, GFLOP/s) and its status.\n"
            "Without --tracker it starts a local tracker and device and profiles on this machine.");
  args.option("op", "NAME", "op to profile (see `kestrel ops`)");
  args.option("shape", "SHAPE", "workload, e.g. M=512,N=512,K=512 or 512x512x512");
  args.option("config", "KNOBS", "knob values, e.g. mc=64,nr=16 (others: the default config)");
  args.option("kernel", "FILE.c", "profile your own kernel file instead of an op");
  args.option("spec", "FILE.json", "with --kernel: {\"args\": [{\"elements\": N, \"output\": bool}], "
                                     "\"defines\": {}, \"flops\": F, \"reference\": \"ref.c\", \"tolerance\": T}");
  add_pool_options(args);
  add_measure_options(args);
  args.flag("json", "print JSON instead of text");
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    set_log_level(args, "warn");
    if (args.has("op") == args.has("kernel")) throw UsageError("give either --op NAME or --kernel FILE");
    ops::Registry registry = ops::builtin_ops();
    // An op's subject depends on the target (its backend's variant), known once a device
    // is leased; the workload is checked now so that a bad --shape fails fast.
    Subject subject;
    if (args.has("op")) {
      if (!args.has("shape")) throw UsageError("--shape is required with --op (see `kestrel ops --op " + args.get("op") + "`)");
      ops::parse_params(registry.get(args.get("op")), args.get("shape"));
    } else {
      subject = subject_from_file(args);
    }
    rpc::MeasureSettings measure = measure_options(args);
    PoolChoice pool = pool_choice(args);

    std::unique_ptr<host::LocalPool> local;
    if (!pool.tracker) local = std::make_unique<host::LocalPool>(1, pool.key);
    rpc::Endpoint endpoint = pool.tracker ? *pool.tracker : local->endpoint();

    host::Measurement result;
    host::Target target;
    double compile_ms = 0;
    asio::io_context io;
    std::exception_ptr failure;
    asio::co_spawn(
        io,
        [&]() -> rpc::awaitable<void> {
          rpc::ClientOptions client_options;
          client_options.name = "kestrel profile";
          client_options.token = pool.token;
          auto client = co_await rpc::TrackerClient::connect(endpoint, client_options);
          host::MeasureClientOptions measure_client;
          measure_client.key = pool.key;
          measure_client.request_timeout = pool.wait;
          host::MeasureClient measurer(client, measure_client);
          try {
            co_await measurer.open();
            target = resolve_target(args, measurer.leases().front().info);
            if (args.has("op")) {
              subject = subject_from_op(registry, args, target);
            } else if (target.is_gpu()) {
              throw UsageError("--kernel files are CPU C kernels; use --op for " + target.to_string() + " kernels");
            }
            result.device = measurer.leases().front().info.name;
            if (!subject.instantiation_error.empty()) {
              result.status = host::Status::instantiation_error;
              result.message = subject.instantiation_error;
            } else {
              host::Compiler compiler({2});
              std::vector<host::CompileRequest> requests(1, host::CompileRequest{subject.kernel, target});
              if (subject.reference) requests.push_back(host::CompileRequest{*subject.reference, target.reference_target()});
              // On the compiler's pool: this io thread must keep answering heartbeats.
              auto compiled = co_await host::compile_async(compiler, std::move(requests));
              host::CompileResult& kernel = compiled.front();
              compile_ms = kernel.compile_ms;
              host::Workload workload;
              workload.args = subject.args;
              workload.tolerance = subject.tolerance;
              if (subject.reference) {
                host::CompileResult& ref = compiled.back();
                if (!ref.ok) throw std::runtime_error("the reference kernel does not compile:\n" + ref.diagnostics);
                workload.reference = {ref.hash, std::make_shared<std::vector<std::uint8_t>>(std::move(ref.shared_object))};
              }
              if (!kernel.ok) {
                result.status = host::Status::host_compile_error;
                result.message = kernel.diagnostics;
              } else {
                host::Candidate candidate{1, {kernel.hash, std::make_shared<std::vector<std::uint8_t>>(
                                                               std::move(kernel.shared_object))}, ""};
                std::vector<host::Candidate> candidates(1, candidate);
                auto results = co_await measurer.measure(workload, candidates, measure);
                result = results.front();
              }
            }
          } catch (...) {
            failure = std::current_exception();
          }
          co_await measurer.close();
          measurer.tracker()->close();
        },
        [&](std::exception_ptr e) {
          if (e && !failure) failure = e;
        });
    io.run();
    if (failure) std::rethrow_exception(failure);
    if (args.has("json")) {
      std::cout << to_json(subject, result, target, compile_ms).dump(2) << "\n";
    } else {
      print_text(subject, result, target, compile_ms);
    }
    return result.status == host::Status::ok ? 0 : 1;
  } catch (const UsageError& e) {
    std::cerr << "kestrel profile: " << e.what() << "\n(see kestrel profile --help)\n";
    return 2;
  } catch (const ops::OpError& e) {
    std::cerr << "kestrel profile: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kestrel profile: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kestrel::tools
