// kestrel._kestrel: the extension module behind the `kestrel` Python package. The
// exceptions (kestrel.Error and its subclasses, carrying the C++ message), the version,
// the log level; the rest is bound in ops.cpp, measure.cpp and records.cpp.
#include <pybind11/stl.h>

#include "bindings.h"
#include "kestrel/base/log.h"
#include "kestrel/base/version.h"
#include "kestrel/frontend/errors.h"

namespace kestrel::python {
namespace {

// A new exception class kestrel.<name> with `bases`, added to the module. The module
// keeps the reference for as long as the interpreter runs.
PyObject* new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("kestrel.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module holds a reference; the caller keeps the new one
  return type;
}

// The exception classes, created once when the module is imported (the translator
// pybind11 takes is a plain function: it cannot capture them).
struct ExceptionTypes {
  PyObject* error = nullptr;
  PyObject* usage = nullptr;
  PyObject* op = nullptr;
  PyObject* records = nullptr;
  PyObject* rpc = nullptr;
  PyObject* model = nullptr;
};
ExceptionTypes exceptions;

// The Python class of each error kind (frontend/errors.h: the table the commands' exit
// statuses come from too).
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const py::error_already_set&) {
    throw;  // a Python exception: pybind11 restores it
  } catch (const py::builtin_exception&) {
    throw;  // pybind11's own (cast errors, StopIteration): its translator
  } catch (...) {
    const frontend::ClassifiedError e = frontend::classify(std::current_exception());
    PyObject* type = exceptions.error;
    switch (e.kind) {
      case frontend::ErrorKind::usage: type = exceptions.usage; break;
      case frontend::ErrorKind::op: type = exceptions.op; break;
      case frontend::ErrorKind::records: type = exceptions.records; break;
      case frontend::ErrorKind::device: type = exceptions.rpc; break;
      case frontend::ErrorKind::model:
      case frontend::ErrorKind::cost_model: type = exceptions.model; break;
      case frontend::ErrorKind::terminated:
      case frontend::ErrorKind::failure: type = exceptions.error; break;
    }
    PyErr_SetString(type, e.message.c_str());
  }
}

}  // namespace

std::string pairs_text(py::handle value, const char* what) {
  if (value.is_none()) return "";
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    std::string text;
    for (auto [key, item] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key) || !py::isinstance<py::int_>(item) || py::isinstance<py::bool_>(item)) {
        throw UsageError(std::string(what) + " must map names (str) to integers, got " +
                         py::repr(key).cast<std::string>() + ": " + py::repr(item).cast<std::string>());
      }
      text += (text.empty() ? "" : ",") + key.cast<std::string>() + "=" + std::to_string(item.cast<std::int64_t>());
    }
    return text;
  }
  throw UsageError(std::string(what) + " must be a str such as \"M=64,N=64,K=64\" or a dict, not " +
                   py::str(py::type::of(value).attr("__name__")).cast<std::string>());
}

ops::Params params_of(const ops::Op& op, py::handle shape) {
  if (shape.is_none()) throw UsageError("a workload is required (e.g. \"48x40x32\" or {\"M\": 48, ...})");
  return ops::parse_params(op, pairs_text(shape, "the workload"));
}

py::object to_python(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::json::value_t::string: {
      // Text from a device or a database may hold bytes that are not UTF-8 (a compiler
      // message): replaced, as json.loads of dump(replace) did.
      const std::string& text = j.get_ref<const std::string&>();
      return py::reinterpret_steal<py::str>(
          PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
    }
    case nlohmann::json::value_t::array: {
      py::list out;
      for (const auto& item : j) out.append(to_python(item));
      return out;
    }
    case nlohmann::json::value_t::object: {
      py::dict out;
      for (const auto& [key, item] : j.items()) out[to_python(nlohmann::json(key))] = to_python(item);
      return out;
    }
    default: return py::none();
  }
}

py::dict to_dict(const std::map<std::string, std::int64_t>& pairs) {
  py::dict out;
  for (const auto& [name, value] : pairs) out[py::str(name)] = value;
  return out;
}

void init_module(py::module_& m) {
  m.doc() = "Kestrel's C++ libraries (ops, tuner, records, export): use the kestrel package";

  // kestrel.Error: every error Kestrel raises; the input errors are ValueErrors too.
  exceptions.error = new_exception(m, "Error", py::make_tuple(py::handle(PyExc_RuntimeError)),
                                   "an error reported by Kestrel's C++ libraries, with their message");
  auto base = py::handle(exceptions.error);
  exceptions.usage = new_exception(m, "UsageError", py::make_tuple(base, py::handle(PyExc_ValueError)),
                                   "bad arguments to a kestrel function");
  exceptions.op = new_exception(m, "OpError", py::make_tuple(base, py::handle(PyExc_ValueError)),
                                "an unknown op, a malformed or unsupported workload or configuration");
  exceptions.records = new_exception(m, "RecordsError", py::make_tuple(base),
                                     "a records database that cannot be used (missing, not one, newer)");
  exceptions.rpc = new_exception(m, "RpcError", py::make_tuple(base),
                                 "a tracker or device failure: unreachable, refused token, no device of the key");
  exceptions.model = new_exception(m, "ModelError", py::make_tuple(base),
                                   "an ONNX model or an export that cannot be done");
  py::register_exception_translator(&translate);

  m.def("version", [] { return std::string(software_version()); }, "the version of Kestrel's libraries");
  m.def(
      "set_log_level",
      [](const std::string& level) {
        log::Level parsed;
        if (!log::parse_level(level, parsed)) throw UsageError("the log level must be debug, info, warn, error or off");
        log::set_level(parsed);
      },
      py::arg("level"), "how much the libraries log on stderr: debug, info, warn (the default), error or off");
  log::set_level(log::Level::warn);

  bind_ops(m);
  bind_measure(m);
  bind_records(m);
}

}  // namespace kestrel::python

PYBIND11_MODULE(_kestrel, m) { kestrel::python::init_module(m); }
