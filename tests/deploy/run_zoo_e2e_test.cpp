// End to end, issue 28: `kestrel run` on the torch exports checked in under
// tests/data/zoo/ (HardSwish/HardSigmoid of MobileNetV3, int64 token ids generated or
// from the .npz beside the model), a corrupt --inputs file, a model with operators that
// cannot run (all listed before any kernel is compiled; `kestrel tasks` marks them) and
// one whose output is all zeros (a warning). Needs a Python with numpy, onnx and
// onnxruntime; without one each test exits 77 (skipped).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/python.h"

using nlohmann::json;

namespace {

using kestrel::test::python;

struct Result {
  int code = -1;
  std::string output;
};

Result run(std::vector<std::string> argv, const kestrel::test::TempDir& dir, const std::string& log) {
  std::filesystem::remove(dir.file(log));
  kestrel::test::Process p(std::move(argv), dir.file(log));
  auto code = p.wait_exit(std::chrono::seconds(240));
  REQUIRE(code);
  return {*code, p.log()};
}

std::string zoo(const std::string& file) { return std::string(KESTREL_SOURCE_DIR) + "/tests/data/zoo/" + file; }

json run_json(const kestrel::test::TempDir& dir, std::vector<std::string> extra, int expect_code, std::string* log = nullptr) {
  std::vector<std::string> argv = {KESTREL_BIN, "run", "--json", "--repeat", "1", "--python", python()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Result r = run(argv, dir, "run.log");
  INFO(r.output);
  REQUIRE(r.code == expect_code);
  if (log) *log = r.output;
  auto start = r.output.find("{\n");
  REQUIRE(start != std::string::npos);
  return json::parse(r.output.substr(start));
}

// A model written by onnx.helper (opset 17, IR 8): x [1,8] -> MatMul by a constant
// [8,8] (a Kestrel task) -> `tail` (Python building nodes from "h", ending in "y").
std::string helper_model(const kestrel::test::TempDir& dir, const std::string& name, const std::string& tail) {
  const std::string script = dir.file(name + ".py");
  {
    std::ofstream out(script);
    out << "import sys\nimport numpy as np\nimport onnx\nfrom onnx import helper, numpy_helper, TensorProto\n"
           "w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), 'w')\n"
           "inits = [w]\nnodes = [helper.make_node('MatMul', ['x', 'w'], ['h'])]\n"
        << tail
        << "g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 8])],\n"
           "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 8])], inits)\n"
           "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)\n"
           "onnx.checker.check_model(m)\nonnx.save(m, sys.argv[1])\n";
  }
  const std::string model = dir.file(name + ".onnx");
  Result r = run({python(), script, model}, dir, name + ".log");
  INFO(r.output);
  REQUIRE(r.code == 0);
  return model;
}

}  // namespace

TEST_CASE("deploy: kestrel run on the zoo's MobileNetV3 (HardSwish, HardSigmoid) matches ONNX Runtime", "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnxruntime");
  kestrel::test::TempDir dir;
  json j = run_json(dir, {"--model", zoo("mobilenet_v3_small_w025.legacy.onnx")}, 0);
  INFO(j.dump(2));
  CHECK(j["ok"] == true);
  CHECK(j["checked"] == true);
  CHECK(j["task_steps"].get<int>() > 40);
  CHECK(j["constant_outputs"] == json::array());
  // The activations live in the plan's arena: less than without reuse, at least the live
  // peak, every planned buffer placed in every run.
  const json& memory = j["memory"];
  CHECK(memory["arena_bytes"].get<std::int64_t>() < memory["sum_of_buffers_bytes"].get<std::int64_t>());
  CHECK(memory["arena_bytes"].get<std::int64_t>() >= memory["peak_live_bytes"].get<std::int64_t>());
  CHECK(memory["placed"].get<std::int64_t>() > 0);
  CHECK(memory["refused"] == 0);
  CHECK(!j.contains("profile"));
  // Its own inputs too, with every step's time.
  j = run_json(dir, {"--model", zoo("mobilenet_v3_small_w025.legacy.onnx"), "--inputs", zoo("mobilenet_v3_small_w025.legacy.npz"),
                     "--profile"}, 0);
  CHECK(j["ok"] == true);
  REQUIRE(j.contains("profile"));
  const json& steps = j["profile"]["steps"];
  CHECK(steps.size() == j["task_steps"].get<std::size_t>() + j["portable_steps"].get<std::size_t>());
  double ms = 0;
  for (const auto& step : steps) ms += step["ms"].get<double>();
  CHECK(ms > 0);
}

TEST_CASE("deploy: kestrel run feeds the zoo's int64 token ids, generated inside the vocabulary or from its .npz",
          "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnxruntime");
  kestrel::test::TempDir dir;
  const std::string model = zoo("embedding_tiny.legacy.onnx");
  json j = run_json(dir, {"--model", model}, 0);
  INFO(j.dump(2));
  CHECK(j["ok"] == true);
  CHECK(j["inputs"]["input_ids"]["type"] == "int64");
  CHECK(j["inputs"]["input_ids"]["values"].get<std::string>().find("indices in [0, 100)") == 0);
  CHECK(j["constant_outputs"] == json::array());

  j = run_json(dir, {"--model", model, "--inputs", zoo("embedding_tiny.legacy.npz")}, 0);
  CHECK(j["ok"] == true);
  // The .npz's own outputs (ONNX Runtime's) are compared too.
  REQUIRE(j["npz_outputs"].size() == 1);
  CHECK(j["npz_outputs"][0]["name"] == "hidden");
  CHECK(j["npz_outputs"][0]["ok"] == true);
  CHECK(j["inputs"]["input_ids"]["values"].get<std::string>().find("embedding_tiny.legacy.npz") != std::string::npos);

  // Text output says what the integer input holds.
  Result r = run({KESTREL_BIN, "run", "--model", model, "--repeat", "1", "--python", python()}, dir, "text.log");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("input input_ids [1,16]: indices in [0, 100)"));
}

TEST_CASE("deploy: kestrel run refuses a corrupt or mismatched --inputs .npz before compiling, exit 2", "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnxruntime");
  kestrel::test::TempDir dir;
  const std::string model = zoo("embedding_tiny.legacy.onnx");
  {
    std::ofstream out(dir.file("corrupt.npz"), std::ios::binary);
    out << "PK\x03\x04 this is no archive";
  }
  Result r = run({KESTREL_BIN, "run", "--model", model, "--inputs", dir.file("corrupt.npz"), "--python", python()}, dir,
                 "corrupt.log");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("corrupt.npz") && Catch::Contains("not a .npz file"));
  CHECK_THAT(r.output, !Catch::Contains("preparing"));

  // Another model's inputs: the name and the input it lacks.
  r = run({KESTREL_BIN, "run", "--model", model, "--inputs", zoo("mobilenet_v3_small_w025.legacy.npz"), "--python", python()},
          dir, "other.log");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("no array for the model input input_ids"));
  r = run({KESTREL_BIN, "run", "--model", model, "--inputs", zoo("embedding_tiny.legacy.npz"), "--seed", "3"}, dir, "seed.log");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("--inputs and --seed"));
}

TEST_CASE("deploy: kestrel run lists every operator that cannot run before compiling, kestrel tasks marks them",
          "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnx");
  kestrel::test::TempDir dir;
  const std::string model = helper_model(dir, "trig",
                                         "nodes += [helper.make_node('Sin', ['h'], ['s']), helper.make_node('Relu', ['s'], ['r']),\n"
                                         "          helper.make_node('Cos', ['r'], ['c']), helper.make_node('Sin', ['c'], ['y'])]\n");
  Result r = run({KESTREL_BIN, "run", "--model", model, "--no-check"}, dir, "run.log");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK_THAT(r.output, Catch::Contains("cannot run") && Catch::Contains("no portable implementation of Sin (2 nodes") &&
                           Catch::Contains("Cos (1 node"));
  CHECK_THAT(r.output, !Catch::Contains("preparing"));

  Result t = run({KESTREL_BIN, "tasks", "--model", model}, dir, "tasks.log");
  INFO(t.output);
  CHECK(t.code == 0);
  CHECK_THAT(t.output, Catch::Contains("cannot run: no portable implementation"));
  Result tj = run({KESTREL_BIN, "tasks", "--model", model, "--json"}, dir, "tasks_json.log");
  const json plan = json::parse(tj.output.substr(tj.output.find('{')))["plans"][0];
  for (const auto& u : plan["untuned"]) {
    INFO(u.dump());
    CHECK(u["can_run"] == (u["op_type"] == "Relu"));
  }
}

TEST_CASE("deploy: kestrel run warns when an output is constant (all zeros matches at any error)", "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnx, onnxruntime");
  kestrel::test::TempDir dir;
  const std::string model = helper_model(dir, "zeros",
                                         "inits.append(numpy_helper.from_array(np.zeros((1, 8), np.float32), 'z'))\n"
                                         "nodes.append(helper.make_node('Mul', ['h', 'z'], ['y']))\n");
  std::string log;
  json j = run_json(dir, {"--model", model}, 0, &log);
  INFO(j.dump(2));
  CHECK(j["ok"] == true);
  CHECK(j["constant_outputs"] == json::array({"y"}));
  CHECK_THAT(log, Catch::Contains("warning: output y [1,8] is constant (every value is 0)"));
  Result r = run({KESTREL_BIN, "run", "--model", model, "--repeat", "1", "--python", python()}, dir, "text.log");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: output y is constant"));
}

TEST_CASE("deploy: kestrel run on the zoo's legacy BERT (int64 ids and mask, GatherElements/IsNaN/Where) matches",
          "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnxruntime");
  kestrel::test::TempDir dir;
  const std::string model = zoo("bert_tiny.legacy.onnx");
  json j = run_json(dir, {"--model", model}, 0);
  INFO(j.dump(2));
  CHECK(j["ok"] == true);
  CHECK(j["outputs"].size() == 2);
  CHECK(j["inputs"]["input_ids"]["values"].get<std::string>().find("indices in [0, 1000)") == 0);
  CHECK(j["inputs"]["attention_mask"]["values"] == "ones (a mask)");
  j = run_json(dir, {"--model", model, "--inputs", zoo("bert_tiny.legacy.npz")}, 0);
  CHECK(j["ok"] == true);
  REQUIRE(j["npz_outputs"].size() == 2);
  for (const auto& o : j["npz_outputs"]) CHECK(o["ok"] == true);
}

TEST_CASE("deploy: kestrel run on the zoo's dynamo exports of BERT and GPT-2 (bool constants, IR 10) matches",
          "[deploy][e2e]") {
  // The dynamo exporter writes masks as bool constants: the importer keeps their values
  // (as 0/1) for the portable And/Where/Not that read them.
  kestrel::test::require_python_modules("numpy, onnxruntime");
  kestrel::test::TempDir dir;
  for (const char* name : {"bert_tiny.dynamo", "gpt2_tiny.dynamo"}) {
    INFO(name);
    json j = run_json(dir, {"--model", zoo(std::string(name) + ".onnx"), "--inputs", zoo(std::string(name) + ".npz")}, 0);
    INFO(j.dump(2));
    CHECK(j["ok"] == true);
    REQUIRE_FALSE(j["npz_outputs"].empty());
    for (const auto& o : j["npz_outputs"]) CHECK(o["ok"] == true);
  }
}

TEST_CASE("deploy: kestrel run runs the zoo's residual blocks on Winograd kernels, or on direct ones with --no-winograd",
          "[deploy][e2e]") {
  kestrel::test::require_python_modules("numpy, onnxruntime");
  kestrel::test::TempDir dir;
  auto winograd_kernels = [](const json& j) {
    int n = 0;
    for (const auto& k : j["kernels_used"]) n += k.get<std::string>().rfind("conv2d_winograd/", 0) == 0;
    return n;
  };
  const std::vector<std::string> model = {"--model", zoo("resnet_blocks_tiny.legacy.onnx"), "--inputs",
                                          zoo("resnet_blocks_tiny.legacy.npz")};
  // Its two stride-1 3x3 layers at 16x16 run on F(2x2, 3x3), matching ONNX Runtime.
  json j = run_json(dir, model, 0);
  INFO(j.dump(2));
  CHECK(j["ok"] == true);
  CHECK(winograd_kernels(j) == 2);
  std::vector<std::string> direct = model;
  direct.push_back("--no-winograd");
  j = run_json(dir, direct, 0);
  CHECK(j["ok"] == true);
  CHECK(winograd_kernels(j) == 0);
  // An exported library's plan is fixed: --no-winograd beside --kernels is a usage error.
  Result r = run({KESTREL_BIN, "run", "--model", zoo("resnet_blocks_tiny.legacy.onnx"), "--kernels", dir.path(),
                  "--no-winograd"},
                 dir, "kernels.log");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("--kernels and --no-winograd contradict each other"));
}
