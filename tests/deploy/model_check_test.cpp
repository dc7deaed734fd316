// The check of a model run against ONNX Runtime (model_check.h) without ONNX Runtime:
// the seeded inputs, the comparison of outputs within the tolerance, the latency figures,
// the reasons ONNX Runtime is reported unavailable, and the helper scripts' Python.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "kestrel/base/usage_error.h"
#include "kestrel/deploy/model_check.h"
#include "kestrel/deploy/python_tool.h"
#include "kestrel/device_runtime/kernel_runner.h"

using namespace kestrel;
using namespace kestrel::deploy;

namespace {

model::ValueInfo value(const std::string& name, std::vector<std::int64_t> shape, model::ElemType type = model::ElemType::f32) {
  model::ValueInfo v;
  v.name = name;
  v.type = type;
  model::Shape s;
  for (auto d : shape) s.push_back(model::Dim{d, ""});
  v.shape = s;
  return v;
}

Tensor tensor(std::vector<std::int64_t> shape, std::vector<float> values) { return Tensor::floats(std::move(shape), values); }

}  // namespace

TEST_CASE("model check: the random inputs are seeded, one stream per input, from -1 up to 1", "[deploy][model_check]") {
  model::Graph g;
  g.inputs = {value("a", {2, 50}), value("b", {100})};
  const auto first = generated_inputs(g, 1);
  const auto again = generated_inputs(g, 1);
  const auto other = generated_inputs(g, 2);
  REQUIRE(first.size() == 2);
  CHECK(first.at("a").shape == std::vector<std::int64_t>{2, 50});
  CHECK(first.at("a").f32 == again.at("a").f32);
  CHECK(first.at("b").f32 == again.at("b").f32);
  CHECK(first.at("a").f32 != other.at("a").f32);
  // The second input's stream is the next seed's first.
  CHECK(std::equal(first.at("b").f32.begin(), first.at("b").f32.end(), other.at("a").f32.begin()));
  for (float v : first.at("a").f32) {
    CHECK(v >= -1.0f);
    CHECK(v < 1.0f);
  }
  // The values a measurement's arguments get from the same seed (device::fill_uniform).
  std::vector<float> device_values(100);
  device::fill_uniform(device_values, 2);
  CHECK(std::equal(device_values.begin(), device_values.end(), first.at("b").f32.begin()));
}

TEST_CASE("model check: an output matches when its largest error is within the tolerance of the largest magnitude",
          "[deploy][model_check]") {
  const Tensor want = tensor({2}, {2.0f, -4.0f});
  const OutputCheck match = compare_output("y", tensor({2}, {2.001f, -4.0f}), &want, 1e-3);
  CHECK(match.ok);
  CHECK(match.problem.empty());
  CHECK(match.magnitude == 4.0);
  CHECK(match.max_abs == Approx(0.001).epsilon(1e-3));
  CHECK(match.relative == Approx(0.00025).epsilon(1e-3));

  const OutputCheck off = compare_output("y", tensor({2}, {2.1f, -4.0f}), &want, 1e-3);
  CHECK_FALSE(off.ok);
  CHECK_THAT(off.problem, Catch::StartsWith("max error ") && Catch::EndsWith("above the tolerance 0.001"));

  const OutputCheck nan = compare_output("y", tensor({2}, {std::nanf(""), -4.0f}), &want, 1e-3);
  CHECK_FALSE(nan.ok);
  CHECK(std::isinf(nan.max_abs));

  const OutputCheck shape = compare_output("y", tensor({1, 2}, {2.0f, -4.0f}), &want, 1e-3);
  CHECK_FALSE(shape.ok);
  CHECK(shape.problem == "shape [1,2], onnxruntime's is [2]");

  const OutputCheck missing = compare_output("y", want, nullptr, 1e-3);
  CHECK_FALSE(missing.ok);
  CHECK(missing.problem == "onnxruntime has no output y");
}

TEST_CASE("model check: every graph output is compared in order, none when ONNX Runtime did not run", "[deploy][model_check]") {
  model::Graph g;
  g.outputs = {value("z", {1}), value("a", {1})};
  const std::map<std::string, Tensor> ours = {{"z", tensor({1}, {1.0f})}, {"a", tensor({1}, {1.0f})}};
  OrtRun ort;
  CHECK(compare_outputs(g, ours, ort, 1e-3).empty());
  ort.available = true;
  ort.outputs["z"] = tensor({1}, {1.0f});
  const auto checks = compare_outputs(g, ours, ort, 1e-3);
  REQUIRE(checks.size() == 2);
  CHECK(checks[0].name == "z");
  CHECK(checks[0].ok);
  CHECK(checks[1].name == "a");
  CHECK(checks[1].problem == "onnxruntime has no output a");
}

TEST_CASE("model check: the latency figures", "[deploy][model_check]") {
  int calls = 0;
  const Latency l = time_runs([&] { ++calls; }, 5);
  CHECK(calls == 5);
  CHECK(l.runs == 5);
  CHECK(l.min_ms <= l.median_ms);
  Latency ours, theirs;
  ours.median_ms = 2;
  theirs.median_ms = 3;
  CHECK(speedup(ours, theirs) == 1.5);
  ours.median_ms = 0;
  CHECK(speedup(ours, theirs) == 0.0);
  CHECK_THAT(machine_description(), Catch::EndsWith(" core)") || Catch::EndsWith(" cores)"));
}

TEST_CASE("model check: ONNX Runtime is unavailable without its script or a Python that imports it", "[deploy][model_check]") {
  OnnxRuntime ort;
  ort.python = "/nonexistent/python";
  ort.script = "/nonexistent/ort_run.py";
  CHECK(ort_unavailable(ort) == "no script /nonexistent/ort_run.py (give its path with --ort-script)");
  const OrtRun run = run_onnxruntime(ort, "/nonexistent/model.onnx", {{"x", tensor({1}, {0.5f})}}, 1, 1);
  CHECK_FALSE(run.available);
  CHECK(run.why == "no script /nonexistent/ort_run.py (give its path with --ort-script)");

  ort.script = default_ort_script();
  REQUIRE(std::filesystem::exists(ort.script));
  CHECK(ort_unavailable(ort) == "/nonexistent/python cannot import onnxruntime and numpy");
  const OrtRun not_found = run_onnxruntime(ort, "/nonexistent/model.onnx", {{"x", tensor({1}, {0.5f})}}, 1, 1);
  CHECK_FALSE(not_found.available);
  CHECK(not_found.why == "/nonexistent/python was not found");
}

TEST_CASE("model check: the helper scripts' Python and shell quoting", "[deploy][model_check]") {
  CHECK(find_python(std::string("/opt/py/bin/python")) == "/opt/py/bin/python");
  CHECK_FALSE(find_python(std::nullopt).empty());
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
}
