// `kestrel tasks` as a user runs it: the real binary on ONNX model files written by the
// test (onnx_builder.h): the table, --json, buckets and --shape, and the errors; and on
// the real architectures of scripts/make_models.py when a Python with onnx is found
// ($KESTREL_PYTHON, the source tree's .venv, python3; otherwise that test exits 77).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "model/onnx_builder.h"
#include "support/process.h"
#include "support/python.h"

using Catch::Matchers::Contains;
using kestrel::test::OnnxBuilder;
using kestrel::test::run_command;
using kestrel::test::TempDir;

namespace {

// x -> Conv(+bias) -> Relu -> MatMul over a symbolic sequence: conv tasks and a gemm.
OnnxBuilder small_model() {
  OnnxBuilder b;
  b.input("x", {1, "seq", 16}).output("y");
  b.weight("w", {16, 24}).weight("bias", {24});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"a"});
  b.node("Relu", {"a"}, {"r"});
  b.node("Softmax", {"r"}, {"s"}).i("axis", -1);
  b.ints("shape", {-1});
  b.node("Reshape", {"s", "shape"}, {"y"});
  return b;
}

}  // namespace

TEST_CASE("e2e: kestrel tasks lists a model's tasks per bucket, as a table and as JSON") {
  TempDir dir;
  small_model().save(dir.file("m.onnx"));
  std::string out;
  int code = run_command({KESTREL_BIN, "tasks", "--model", dir.file("m.onnx"), "--block", "8"}, out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("opset 17") && Contains("input x [1,seq,16]"));
  CHECK_THAT(out, Contains("bucket seq=8") && Contains("bucket seq=32") && Contains("bucket seq=128"));
  CHECK_THAT(out, Contains("M=32,N=24,K=16,bias=1,act=1") && Contains("MatMul+Add+Relu") && Contains("M=seq"));
  CHECK_THAT(out, Contains("rows=seq") && Contains("Reshape") && Contains("layout operator"));

  code = run_command({KESTREL_BIN, "tasks", "--model", dir.file("m.onnx"), "--buckets", "seq=4,64", "--json"}, out,
                     dir.file("log"));
  REQUIRE(code == 0);
  auto json = nlohmann::json::parse(out);
  CHECK(json["opset"] == 17);
  CHECK(json["symbols"] == nlohmann::json::array({"seq"}));
  REQUIRE(json["plans"].size() == 2);
  const auto& plan = json["plans"][1];
  CHECK(plan["symbols"]["seq"] == 64);
  REQUIRE(plan["tasks"].size() == 2);
  CHECK(plan["tasks"][0]["op"] == "gemm");
  CHECK(plan["tasks"][0]["params"]["M"] == 64);
  CHECK(plan["tasks"][0]["pattern"] == "MatMul+Add+Relu");
  CHECK(plan["tasks"][0]["dynamic"][0]["param"] == "M");
  CHECK(plan["tasks"][0]["dynamic"][0]["symbol"] == "seq");
  CHECK(plan["tasks"][1]["op"] == "softmax");
  CHECK(plan["untuned"][0]["op_type"] == "Reshape");
  double shares = 0;
  for (const auto& t : plan["tasks"]) shares += t["share"].get<double>();
  CHECK(shares == Approx(1.0));

  code = run_command({KESTREL_BIN, "tasks", "--model", dir.file("m.onnx"), "--shape", "seq=50", "--json"}, out,
                     dir.file("log"));
  REQUIRE(code == 0);
  json = nlohmann::json::parse(out);
  REQUIRE(json["plans"].size() == 1);
  CHECK(json["plans"][0]["tasks"][1]["params"]["cols"] == 24);
  CHECK(json["plans"][0]["tasks"][1]["params"]["rows"] == 50);
}

TEST_CASE("e2e: kestrel tasks explains a missing or corrupt model, an unsupported opset, nothing to tune") {
  TempDir dir;
  std::string out;
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("none.onnx")}, out, dir.file("log")) == 2);
  CHECK_THAT(out, Contains("none.onnx: no such file"));

  { std::ofstream(dir.file("bad.onnx")) << "\x08\x07garbage garbage garbage"; }
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("bad.onnx")}, out, dir.file("log")) == 2);
  CHECK_THAT(out, Contains("bad.onnx: not an ONNX model"));

  OnnxBuilder future(22);
  future.input("x", {1, 4}).output("y");
  future.node("Relu", {"x"}, {"y"});
  future.save(dir.file("future.onnx"));
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("future.onnx")}, out, dir.file("log")) == 2);
  CHECK_THAT(out, Contains("opset 22 is not supported: Kestrel reads opsets 11 to 21"));

  OnnxBuilder nothing;
  nothing.input("x", {1, 3, 8, 8}).output("y");
  nothing.ints("sizes", {1, 3, 16, 16});
  nothing.node("Resize", {"x", "", "", "sizes"}, {"r"});
  nothing.node("Identity", {"r"}, {"y"});
  nothing.save(dir.file("nothing.onnx"));
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("nothing.onnx"), "--json"}, out, dir.file("log")) == 1);
  CHECK_THAT(out, Contains("has no operator Kestrel can tune") && Contains("1 Resize (no Kestrel op)") &&
                      Contains("1 Identity (layout operator)"));

  small_model().save(dir.file("m.onnx"));
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("m.onnx"), "--shape", "len=3"}, out, dir.file("log")) ==
        2);
  CHECK_THAT(out, Contains("no symbolic dimension 'len'") && Contains("seq"));
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("m.onnx"), "--block", "5"}, out, dir.file("log")) == 2);
  CHECK_THAT(out, Contains("--block must be 4, 8 or 16"));
  CHECK(run_command({KESTREL_BIN, "tasks"}, out, dir.file("log")) == 2);
  CHECK_THAT(out, Contains("--model is required"));
  CHECK(run_command({KESTREL_BIN, "tasks", "--help"}, out, dir.file("log")) == 0);
  CHECK_THAT(out, Contains("--buckets") && Contains("untuned") && Contains("opsets 11 to 21"));
}

namespace {

using kestrel::test::python;

nlohmann::json tasks_json(const TempDir& dir, const std::string& name, std::vector<std::string> extra = {}) {
  std::string out;
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/scripts/make_models.py";
  if (!std::filesystem::exists(dir.file(name + ".onnx"))) {
    int made = run_command({python(), script, dir.path(), name}, out, dir.file("make.log"));
    INFO(out);
    REQUIRE(made == 0);
  }
  std::vector<std::string> argv = {KESTREL_BIN, "tasks", "--model", dir.file(name + ".onnx"), "--block", "8", "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  int code = run_command(argv, out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  return nlohmann::json::parse(out);
}

int instances(const nlohmann::json& plan) {
  int n = 0;
  for (const auto& t : plan["tasks"]) n += t["occurrences"].get<int>();
  return n;
}

}  // namespace

TEST_CASE("e2e: kestrel tasks on ResNet-18, MobileNetV2 and the BERT layer of scripts/make_models.py") {
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/scripts/make_models.py";
  REQUIRE(std::filesystem::exists(script));
  kestrel::test::require_python_modules("numpy, onnx");
  TempDir dir;
  // ResNet-18: every conv fused with its bias, residual and ReLU; only Flatten untuned.
  auto resnet = tasks_json(dir, "resnet18")["plans"][0];
  CHECK(resnet["tasks"].size() == 18);
  CHECK(instances(resnet) == 23);
  CHECK(resnet["total_flops"].get<double>() == Approx(3.63e9).epsilon(0.01));
  CHECK(resnet["tuned_flops"].get<double>() / resnet["total_flops"].get<double>() > 0.99);
  int residual = 0;
  for (const auto& t : resnet["tasks"]) {
    if (t["pattern"].get<std::string>().find("Add") != std::string::npos) residual += t["occurrences"].get<int>();
  }
  CHECK(residual == 8);
  for (const auto& u : resnet["untuned"]) CHECK(u["op_type"] != "Conv");

  // MobileNetV2: depthwise convs with ReLU6 (Clip), inverted residuals.
  auto mobilenet = tasks_json(dir, "mobilenetv2")["plans"][0];
  int depthwise = 0;
  for (const auto& t : mobilenet["tasks"]) {
    if (t["op"] == "depthwise_conv2d") {
      depthwise += t["occurrences"].get<int>();
      CHECK(t["params"]["act"] == 2);
    }
  }
  CHECK(depthwise == 17);
  CHECK(mobilenet["total_flops"].get<double>() == Approx(0.60e9).epsilon(0.02));
  for (const auto& u : mobilenet["untuned"]) CHECK(u["op_type"] != "Conv");

  // The BERT layer: gemms (one with GELU), attention, add & norm, all following seq.
  auto bert = tasks_json(dir, "bert_layer", {"--buckets", "seq=32"})["plans"][0];
  CHECK(bert["symbols"]["seq"] == 32);
  std::map<std::string, int> ops;
  bool gelu = false;
  for (const auto& t : bert["tasks"]) {
    ops[t["op"].get<std::string>()] += t["occurrences"].get<int>();
    gelu = gelu || (t["op"] == "gemm" && t["params"].value("act", 0) == 3);
    CHECK(!t["dynamic"].empty());
  }
  CHECK(ops["gemm"] == 6);
  CHECK(ops["batch_matmul"] == 2);
  CHECK(ops["softmax"] == 1);
  CHECK(ops["layernorm"] == 2);
  CHECK(gelu);
}
