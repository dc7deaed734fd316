// kestrel.ops() and kestrel.space(): what `kestrel ops` shows, as dicts. The op library
// is ops::builtin_ops(), built once per call (it is small and holds no state).
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "kestrel/host/target.h"
#include "kestrel/tuner/space.h"

namespace kestrel::python {
namespace {

py::list backends_of(const std::vector<const ops::Op*>& variants) {
  py::list out;
  for (const ops::Op* op : variants) {
    for (ops::Backend b : op->backends()) out.append(std::string(ops::to_string(b)));
  }
  return out;
}

py::dict describe(const ops::Registry& registry, const ops::Op& op) {
  py::list params;
  for (const ops::ParamSpec& p : op.params()) {
    py::dict one;
    one["name"] = p.name;
    one["help"] = p.help;
    one["min"] = p.min;
    one["max"] = p.max;
    // A parameter whose fallback is below its minimum is required: no default.
    one["default"] = p.fallback >= p.min ? py::object(py::int_(p.fallback)) : py::object(py::none());
    one["optional"] = p.optional;
    params.append(one);
  }
  py::dict out;
  out["name"] = std::string(op.name());
  out["description"] = std::string(op.description());
  out["params"] = params;
  out["backends"] = backends_of(registry.variants(op.name()));
  return out;
}

ops::Backend parse_backend(const std::string& backend) {
  if (backend == "cpu") return ops::Backend::cpu;
  if (backend == "cuda") return ops::Backend::cuda;
  if (backend == "opencl") return ops::Backend::opencl;
  throw UsageError("backend must be cpu, cuda or opencl, not '" + backend + "'");
}

host::Target parse_target(const std::string& target, const std::string& cpu) {
  try {
    return host::parse_target(target, cpu);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def(
      "ops",
      [] {
        const ops::Registry registry = ops::builtin_ops();
        py::list out;
        for (const ops::Op* op : registry.all()) out.append(describe(registry, *op));
        return out;
      },
      "the built-in ops: name, description, workload parameters and backends of each");

  m.def(
      "op",
      [](const std::string& name) {
        const ops::Registry registry = ops::builtin_ops();
        return describe(registry, registry.get(name));
      },
      py::arg("name"), "one op, as ops() describes it; raises OpError for an unknown op");

  m.def(
      "space",
      [](const std::string& name, py::object shape, std::optional<std::string> backend, const std::string& target,
         const std::string& cpu) {
        const ops::Registry registry = ops::builtin_ops();
        const ops::Op& op = backend ? registry.get(name, parse_backend(*backend)) : registry.get(name);
        const host::Target compile_target = parse_target(target, cpu);
        const ops::Params params = params_of(op, shape);
        py::list knobs;
        for (const ops::Knob& k : op.knobs(params)) {
          py::dict one;
          one["name"] = k.name;
          one["values"] = k.values;
          one["help"] = k.help;
          knobs.append(one);
        }
        const tuner::Space space(op, params, compile_target.traits);
        py::list tensors;
        for (const ops::TensorSpec& t : op.tensors(params)) {
          py::dict one;
          one["name"] = t.name;
          one["dtype"] = std::string(ops::to_string(t.dtype));
          one["shape"] = t.shape;
          one["role"] = t.role == ops::Role::output ? "output" : "input";
          tensors.append(one);
        }
        py::list backends;
        for (ops::Backend b : op.backends()) backends.append(std::string(ops::to_string(b)));
        py::dict out;
        out["op"] = std::string(op.name());
        out["workload"] = ops::format_params(params);
        out["params"] = to_dict(params);
        out["flops"] = op.flops(params);
        out["target"] = compile_target.to_string();
        out["traits"] = compile_target.traits.to_string();
        out["backends"] = backends;
        out["tensors"] = tensors;
        out["knobs"] = knobs;
        out["size"] = space.size();
        out["default"] = to_dict(op.default_config(params, compile_target.traits));
        return out;
      },
      py::arg("op"), py::arg("shape"), py::arg("backend") = py::none(), py::arg("target") = "native",
      py::arg("cpu") = "",
      "the knob space of an op at a workload: knobs and their values, size (points before constraints), the "
      "default configuration on the target (native: this machine)");
}

}  // namespace kestrel::python
