// The records as Python values: kestrel.read_records (one dict per record, which the
// package turns into a pandas DataFrame), kestrel.best (what `kestrel best` shows) and
// kestrel.export (a kernel library from the best records, model/export.h). Databases are
// opened with records::open_records, read-only: a missing one is a RecordsError.
#include <pybind11/stl.h>

#include <set>

#include "bindings.h"
#include "kestrel/deploy/export.h"
#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/model/buckets.h"
#include "kestrel/model/graph.h"
#include "kestrel/model/tasks.h"
#include "kestrel/frontend/tune_setup.h"
#include "kestrel/records/config_choice.h"
#include "kestrel/records/json.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/cross_model.h"

namespace kestrel::python {
namespace {

// A record as Python sees it: its one JSON form (records::to_json), with the cost as a
// float (+inf when not ok, where the JSON has null) and two spellings the DataFrame has
// always had: final (= final_measurement) and rounds (the number of round_seconds).
py::dict record_dict(const records::Record& r) {
  py::dict out = to_python(records::to_json(r));
  out["cost"] = r.cost;
  out["final"] = r.final_measurement;
  out["rounds"] = r.round_seconds.size();
  return out;
}

std::unique_ptr<records::RecordStore> open_existing(const std::string& db) {
  return records::open_records(db, records::OpenMode::existing);
}

py::list read_records(const std::string& db, const std::string& op) {
  std::vector<records::Record> records;
  {
    py::gil_scoped_release release;
    records = open_existing(db)->all(op);
  }
  py::list out;
  for (const records::Record& r : records) out.append(record_dict(r));
  return out;
}

py::list best(const std::string& db) {
  std::vector<records::Best> bests;
  {
    py::gil_scoped_release release;
    bests = open_existing(db)->best();
  }
  py::list out;
  for (const records::Best& b : bests) {
    py::dict one;
    one["op"] = b.op;
    one["workload"] = ops::format_params(b.workload);
    one["target"] = b.target.to_string();
    one["device_key"] = b.device_class.key;
    one["device_model"] = b.device_class.model;
    one["device_fingerprint"] = b.device_class.fingerprint;
    one["config"] = to_dict(b.record.config);
    one["config_text"] = ops::format_config(b.record.config);
    one["gflops"] = b.record.gflops;
    one["cost"] = b.record.cost;
    one["implementation"] = b.record.implementation;
    one["trials"] = b.trials;
    one["default_is_best"] = b.default_is_best;
    one["default_gflops"] = b.default_record ? py::object(py::float_(b.default_record->gflops)) : py::object(py::none());
    one["record"] = record_dict(b.record);
    one["own_record"] = b.own_record ? py::object(record_dict(*b.own_record)) : py::object(py::none());
    out.append(one);
  }
  return out;
}

// One plan of every (op, workload) that has a best record for the target's triple: the
// kernels `kestrel export` would build for a model made of exactly those tasks.
model::Plan plan_from_records(records::RecordStore& records, const host::Target& target, const std::string& key) {
  model::Plan plan;
  const ops::Registry& registry = ops::builtin_registry();  // outlives the plan, which points into it
  std::set<std::string> seen;
  for (const records::Best& b : records.best()) {
    if (b.target.is_gpu() || b.target.triple != target.triple) continue;
    if (!key.empty() && b.device_class.key != key) continue;
    const ops::Op* op = registry.find(b.op, ops::Backend::cpu);
    if (!op) continue;  // a GPU-only op: export builds CPU libraries
    model::ModelTask task;
    task.label = b.op + " " + ops::format_params(b.workload);
    task.op = op;
    task.params = b.workload;
    task.pattern = b.op;
    task.occurrences = 1;
    task.flops = op->flops(b.workload);
    if (seen.insert(task.identity()).second) plan.tasks.push_back(std::move(task));
  }
  plan.total_flops = 0;
  for (const model::ModelTask& t : plan.tasks) plan.total_flops += t.flops;
  return plan;
}

py::dict export_library(const std::string& db, const std::string& out_dir, py::dict options) {
  auto take = [&](const char* key) -> std::string {
    if (!options.contains(key) || options[key].is_none()) return "";
    return py::str(options[key]).cast<std::string>();
  };
  const std::string model_path = take("model");
  const std::string buckets_text = take("buckets");
  const std::string target_spec = take("target").empty() ? "native" : take("target");
  const std::string cpu = take("cpu");
  const std::string key = take("key");
  const std::string runtime_dir = take("runtime_dir");
  const bool zero_shot = options.contains("zero_shot") && !options["zero_shot"].is_none() &&
                         options["zero_shot"].cast<bool>();
  if (zero_shot && model_path.empty()) throw UsageError("zero_shot=True picks for a model's tasks: give model=");
  const frontend::CostModelUse cost_model = frontend::load_cost_model(take("cost_model"), zero_shot, "zero_shot=True",
                                                                      "cost_model=");
  const std::int64_t block = options.contains("block") && !options["block"].is_none() ? options["block"].cast<std::int64_t>() : 0;
  const bool winograd = !options.contains("winograd") || options["winograd"].is_none() || options["winograd"].cast<bool>();
  frontend::checked_block("block", block);
  if (model_path.empty() && !buckets_text.empty()) throw UsageError("buckets go with model=");
  host::Target target;
  try {
    target = host::parse_target(target_spec, cpu);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  deploy::ExportReport report;
  {
    py::gil_scoped_release release;
    // Zero-shot picks need no records: a database that does not exist is an empty store.
    auto records = zero_shot ? frontend::open_session_records(db, false) : open_existing(db);
    deploy::ExportOptions export_options;
    export_options.target = target;
    export_options.out_dir = out_dir;
    export_options.device_key = key;
    export_options.runtime_dir = runtime_dir;
    export_options.cost_model = cost_model.model;
    export_options.cost_model_path = cost_model.path;
    if (!model_path.empty()) {
      // A model's tasks, at each bucket, as `kestrel export --model` does.
      const model::Model loaded = model::Model::load(model_path);
      export_options.model = model_path;
      for (const model::Binding& binding : model::parse_buckets(loaded.graph().symbols(), buckets_text)) {
        model::PlanOptions plan_options;
        plan_options.block = block;
        plan_options.traits = target.traits;
        plan_options.symbols = binding;
        plan_options.winograd = winograd;
        export_options.plans.push_back(model::plan_model(loaded, plan_options));
      }
    } else {
      export_options.plans.push_back(plan_from_records(*records, target, key));
      if (export_options.plans.front().tasks.empty()) {
        throw model::ModelError("no records for " + target.triple + (key.empty() ? "" : " (device key " + key + ")") +
                                " in " + records->location() + ": tune for it first");
      }
    }
    host::Compiler compiler;
    report = deploy::export_library(*records, compiler, export_options);
  }
  py::list kernels;
  for (const deploy::ExportedKernel& k : report.kernels) {
    py::dict one;
    one["op"] = k.op;
    one["params"] = ops::format_params(k.params);
    one["dynamic"] = model::to_string(k.dynamic);
    one["config"] = k.config;
    one["origin"] = k.origin;
    one["gflops"] = k.gflops;
    one["entry"] = k.entry;
    kernels.append(one);
  }
  py::dict out;
  out["target"] = target.to_string();
  out["out"] = out_dir;
  out["kernels"] = kernels;
  out["files"] = report.files;
  out["runtime_copied"] = report.runtime_copied;
  out["runtime_note"] = report.runtime_note;
  out["notes"] = report.notes;
  return out;
}

}  // namespace

void bind_records(py::module_& m) {
  m.def("read_records", &read_records, py::arg("db"), py::arg("op") = "",
        "every record of the database (of one op when given), oldest first, as dicts");
  m.def(
      "shipped_cost_model", [] { return frontend::shipped_cost_model_path(); },
      "the path of the cost model Kestrel ships (empty when it is not found)");
  m.def("best", &best, py::arg("db"), "the best record per (op, workload, target, device class), as dicts");
  m.def("export", &export_library, py::arg("db"), py::arg("out"), py::arg("options"),
        "writes a kernel library (see kestrel.export)");
}

}  // namespace kestrel::python
