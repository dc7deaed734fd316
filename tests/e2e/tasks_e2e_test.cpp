// `kestrel tasks` as a user runs it: the real binary on ONNX model files written by the
// test (onnx_builder.h): the table, --json, buckets and --shape, and the errors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "model/onnx_builder.h"
#include "support/process.h"

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
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("none.onnx")}, out, dir.file("log")) == 1);
  CHECK_THAT(out, Contains("none.onnx: no such file"));

  { std::ofstream(dir.file("bad.onnx")) << "\x08\x07garbage garbage garbage"; }
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("bad.onnx")}, out, dir.file("log")) == 1);
  CHECK_THAT(out, Contains("bad.onnx: not an ONNX model"));

  OnnxBuilder future(18);
  future.input("x", {1, 4}).output("y");
  future.node("Relu", {"x"}, {"y"});
  future.save(dir.file("future.onnx"));
  CHECK(run_command({KESTREL_BIN, "tasks", "--model", dir.file("future.onnx")}, out, dir.file("log")) == 1);
  CHECK_THAT(out, Contains("opset 18 is not supported: Kestrel reads opsets 11 to 17"));

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
  CHECK_THAT(out, Contains("--buckets") && Contains("untuned") && Contains("opsets 11 to 17"));
}
