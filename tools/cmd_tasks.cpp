// `kestrel tasks`: the Kestrel tasks an ONNX model maps to (op, workload, fused pattern,
// occurrences, FLOP share, dynamic parameters), the operators left untuned and why.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/deploy/portable_ops.h"
#include "kestrel/frontend/tune_setup.h"
#include "kestrel/host/target.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/tasks.h"
#include "kestrel/ops/op.h"

namespace kestrel::tools {

namespace {

// The workload in the op's own parameter order ("N=1,C=64,H=56,..."), easier to read
// than the key's alphabetical order.
std::string workload_text(const ops::Op& op, const ops::Params& params) {
  std::string out;
  for (const auto& spec : op.params()) {
    if (auto it = params.find(spec.name); it != params.end()) {
      out += (out.empty() ? "" : ",") + spec.name + "=" + std::to_string(it->second);
    }
  }
  return out;
}

std::string dynamic_text(const std::vector<model::DynamicParam>& dynamic) {
  std::string out = model::to_string(dynamic);
  return out.empty() ? "-" : out;
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

// GFLOP with four significant digits ("0.2312", "1.865e-05").
std::string gflop(double flops) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.4g", flops / 1e9);
  return buffer;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text += std::string(width - text.size(), ' ');
  return text;
}

double tuned_flops(const model::Plan& plan) {
  double sum = 0;
  for (const auto& t : plan.tasks) sum += t.flops * t.occurrences;
  return sum;
}

int untuned_nodes(const model::Plan& plan) {
  int sum = 0;
  for (const auto& u : plan.untuned) sum += u.occurrences;
  return sum;
}

void print_table(const model::Plan& plan, std::ostream& out) {
  const double total = plan.total_flops > 0 ? plan.total_flops : 1;
  std::vector<std::vector<std::string>> rows = {
      {"#", "op", "workload", "pattern", "count", "GFLOP", "share", "dynamic"}};
  for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& t = plan.tasks[i];
    const double flops = t.flops * t.occurrences;
    rows.push_back({std::to_string(i + 1), t.op_name(), workload_text(*t.op, t.params), t.pattern,
                    std::to_string(t.occurrences), gflop(flops), fixed(100 * flops / total, 1) + "%",
                    dynamic_text(t.dynamic)});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  out << "tasks (" << plan.tasks.size() << "):\n";
  for (const auto& row : rows) {
    out << " ";
    for (std::size_t c = 0; c < row.size(); ++c) out << " " << (c + 1 < row.size() ? pad(row[c], width[c]) : row[c]);
    out << "\n";
  }
  if (plan.untuned.empty()) {
    out << "untuned operators: none\n";
  } else {
    // What `kestrel run` can execute: an untuned operator with no portable implementation
    // cannot run (the planner knows nothing of deploy/, so the tool asks).
    bool any_missing = false;
    for (const auto& u : plan.untuned) any_missing = any_missing || !deploy::has_portable(u.op_type);
    out << "untuned operators (run by portable implementations"
        << (any_missing ? "; those marked \"cannot run\" have none, and kestrel run refuses the model" : "") << "):\n";
    std::size_t type_width = 4;
    for (const auto& u : plan.untuned) type_width = std::max(type_width, u.op_type.size());
    out << "  " << pad("type", type_width) << "  count  GFLOP   share  reason\n";
    for (const auto& u : plan.untuned) {
      out << "  " << pad(u.op_type, type_width) << "  " << pad(std::to_string(u.occurrences), 5) << "  "
          << pad(gflop(u.flops), 6) << "  " << pad(fixed(100 * u.flops / total, 1) + "%", 5) << "  "
          << u.reason << (deploy::has_portable(u.op_type) ? "" : " (cannot run: no portable implementation)") << "\n";
    }
  }
  int instances = 0;
  for (const auto& t : plan.tasks) instances += t.occurrences;
  const double tuned = tuned_flops(plan);
  out << "total: " << plan.tasks.size() << " distinct tasks (" << instances << " instances), "
      << gflop(tuned) << " GFLOP tuned (" << fixed(100 * tuned / total, 1) << "%), "
      << untuned_nodes(plan) << " untuned nodes " << gflop(plan.total_flops - tuned) << " GFLOP ("
      << fixed(100 * (plan.total_flops - tuned) / total, 1) << "%), model " << gflop(plan.total_flops)
      << " GFLOP\n";
}

nlohmann::json plan_json(const model::Plan& plan) {
  const double total = plan.total_flops > 0 ? plan.total_flops : 1;
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& t : plan.tasks) {
    nlohmann::json dynamic = nlohmann::json::array();
    for (const auto& d : t.dynamic) dynamic.push_back({{"param", d.param}, {"symbol", d.symbol}, {"multiplier", d.multiplier}});
    tasks.push_back({{"op", t.op_name()},
                     {"params", t.params},
                     {"key", t.key()},
                     {"workload", workload_text(*t.op, t.params)},
                     {"pattern", t.pattern},
                     {"occurrences", t.occurrences},
                     {"flops", t.flops},
                     {"gflops", t.flops * t.occurrences / 1e9},
                     {"share", t.flops * t.occurrences / total},
                     {"dynamic", dynamic}});
  }
  nlohmann::json untuned = nlohmann::json::array();
  for (const auto& u : plan.untuned) {
    untuned.push_back({{"op_type", u.op_type},
                       {"reason", u.reason},
                       {"can_run", deploy::has_portable(u.op_type)},
                       {"occurrences", u.occurrences},
                       {"flops", u.flops},
                       {"share", u.flops / total}});
  }
  return {{"symbols", plan.symbols},   {"block", plan.block},
          {"tasks", tasks},            {"untuned", untuned},
          {"total_flops", plan.total_flops}, {"tuned_flops", tuned_flops(plan)},
          {"untuned_nodes", untuned_nodes(plan)}};
}

// "3 nodes: 2 Resize (no Kestrel op), 1 Identity (layout operator)"
std::string contents(const model::Plan& plan) {
  std::string out;
  for (const auto& u : plan.untuned) {
    out += (out.empty() ? "" : ", ") + std::to_string(u.occurrences) + " " + u.op_type + " (" + u.reason + ")";
  }
  return std::to_string(untuned_nodes(plan)) + " nodes: " + (out.empty() ? "none" : out);
}

}  // namespace

int run_tasks(int argc, char** argv) {
  Args args("kestrel tasks",
            "Reads an ONNX model (opsets 11 to 21, IR up to 10), infers its shapes and lists the Kestrel tasks it\n"
            "maps to: each distinct op and workload, the ONNX operators it covers (a fused epilogue\n"
            "such as Conv+Add+Relu), how often it occurs, its GFLOP and share of the model's FLOPs,\n"
            "and the workload parameters that follow a symbolic dimension (dynamic). Operators left\n"
            "untuned are listed with the reason; they run with portable implementations.\n"
            "Convolutions and pools use the NCHWc layout with the target's block (or --block).\n"
            "A model with a symbolic dimension (e.g. 'seq') is planned once per bucket size:\n"
            "--buckets seq=8,32,128 (the default sizes), or at one size with --shape seq=50.\n"
            "Exit status: 0; 1 for a model error (missing, corrupt, unsupported opset, nothing to\n"
            "tune); 2 for a usage error.");
  args.option("model", "FILE", "the ONNX model (.onnx)");
  args.option("target", "TRIPLE", "compile target whose traits choose the block: native or a triple", "native");
  args.option("cpu", "CPU", "-mcpu of --target, e.g. cortex-a72 or skylake-avx512");
  args.option("block", "B", "channels per NCHWc block: 4, 8 or 16 (default: the target's fp32 lanes, at least 4)");
  args.option("buckets", "[SYM=]N,N,...", "bucket sizes of symbolic dimensions, e.g. seq=8,32,128 or "
              "\"seq=8,32;batch=1,4\" (default 8,32,128 each)");
  args.option("shape", "SYM=N", "one size per symbolic dimension instead of buckets, e.g. seq=50");
  args.flag("no-winograd", frontend::kNoWinogradHelp);
  args.flag("json", "print JSON instead of tables");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    if (!args.has("model")) throw UsageError("--model is required (the ONNX model to read)");
    host::Target target;
    try {
      target = host::parse_target(args.get("target", "native"), args.get("cpu"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    model::PlanOptions options;
    options.traits = target.traits;
    options.winograd = !args.has("no-winograd");
    if (args.has("block")) {
      options.block = args.get_int("block", 0, 4, 16);
      if (options.block != 4 && options.block != 8 && options.block != 16) {
        throw UsageError("--block must be 4, 8 or 16, got " + args.get("block"));
      }
    }
    const model::Model model = model::Model::load(args.get("model"));
    const model::Graph& graph = model.graph();
    // Sizes of the symbolic dimensions: command-line errors, reported as such.
    std::vector<model::Binding> bindings;
    try {
      if (args.has("shape")) {
        if (args.has("buckets")) throw UsageError("give either --buckets or --shape, not both");
        bindings = {model::parse_binding(graph.symbols(), args.get("shape"))};
      } else {
        bindings = model::parse_buckets(graph.symbols(), args.get("buckets"));
      }
    } catch (const model::ModelError& e) {
      throw UsageError(e.what());
    }
    std::vector<model::Plan> plans;
    for (const auto& binding : bindings) {
      options.symbols = binding;
      plans.push_back(model::plan_model(model, options));
    }
    bool any_task = false;
    for (const auto& plan : plans) any_task = any_task || !plan.tasks.empty();
    if (!any_task) {
      std::cerr << "kestrel tasks: " << graph.path << " has no operator Kestrel can tune; its "
                << contents(plans.front()) << "\n";
      return 1;
    }
    if (args.has("json")) {
      nlohmann::json out = {{"model", graph.path},
                            {"opset", graph.opset},
                            {"nodes", graph.nodes.size()},
                            {"target", target.to_string()},
                            {"symbols", graph.symbols()},
                            {"plans", nlohmann::json::array()}};
      for (const auto& plan : plans) out["plans"].push_back(plan_json(plan));
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::cout << "model: " << graph.path << " (opset " << graph.opset << ", " << graph.nodes.size() << " nodes";
    for (const auto& input : graph.inputs) {
      std::cout << ", input " << input.name << " " << (input.shape ? model::to_string(*input.shape) : "[?]");
    }
    std::cout << ")\ntarget: " << target.to_string() << ", block " << plans.front().block << "\n";
    for (const auto& plan : plans) {
      std::cout << "\n";
      if (!plan.symbols.empty()) std::cout << "bucket " << model::to_string(plan.symbols) << "\n";
      print_table(plan, std::cout);
    }
    return 0;
  } catch (...) {
    return report_error("kestrel tasks", std::current_exception());
  }
}

}  // namespace kestrel::tools
