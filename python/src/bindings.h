// The pieces of the extension module kestrel._kestrel, one file per part of the API
// (ops.cpp, measure.cpp, records.cpp), and the conversions they share: a workload or a
// configuration given as text ("48x40x32", "M=48,N=40,K=32") or as a dict.
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kestrel/base/usage_error.h"
#include "kestrel/ops/op.h"

namespace kestrel::python {

namespace py = pybind11;

// kestrel::UsageError (base/usage_error.h), a user error in the arguments of a call (not
// the op's or the database's), is raised as kestrel.UsageError, a ValueError.

void bind_ops(py::module_& m);
void bind_measure(py::module_& m);
void bind_records(py::module_& m);

// "A=1,B=2" from a dict {"A": 1, "B": 2}; a str as it is; None as "". Throws UsageError
// for anything else (naming `what`).
std::string pairs_text(py::handle value, const char* what);
// The validated workload of `op` (ops::parse_params). Throws ops::OpError.
ops::Params params_of(const ops::Op& op, py::handle shape);
// A JSON value as the Python object json.loads would make of it (null: None; text that
// is not UTF-8 decoded with replacement characters). Every result's one JSON form
// (frontend/json.h, records/json.h, host/summary_json.h) reaches Python through it.
py::object to_python(const nlohmann::json& j);
// {"A": 1, ...} of a params or config map.
py::dict to_dict(const std::map<std::string, std::int64_t>& pairs);

}  // namespace kestrel::python
