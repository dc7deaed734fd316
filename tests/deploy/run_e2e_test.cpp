// End to end: the three test models built by scripts/make_models.py, run by `kestrel run`
// (kernels compiled here at the defaults) and checked against ONNX Runtime. Needs a Python
// with numpy, onnx and onnxruntime ($KESTREL_PYTHON, the source tree's .venv from
// scripts/setup-python.sh, or python3); without one each test says so and exits 77, which
// ctest reports as skipped.
#include <catch2/catch.hpp>

#include <sys/utsname.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "support/process.h"
#include "support/python.h"

using nlohmann::json;

namespace {

using kestrel::test::python;

// Exits 77 (skipped; a failure under KESTREL_REQUIRE_PYTHON=1) without onnxruntime, numpy, onnx.
void require_onnxruntime() { kestrel::test::require_python_modules("numpy, onnx, onnxruntime"); }

struct Result {
  int code = -1;
  std::string output;
};

Result run(std::vector<std::string> argv, const kestrel::test::TempDir& dir, const std::string& log) {
  std::filesystem::remove(dir.file(log));  // the process appends to its log
  kestrel::test::Process p(std::move(argv), dir.file(log));
  auto code = p.wait_exit(std::chrono::seconds(240));
  REQUIRE(code);
  return {*code, p.log()};
}

std::string make_model(const kestrel::test::TempDir& dir, const std::string& name) {
  Result r = run({python(), std::string(KESTREL_SOURCE_DIR) + "/scripts/make_models.py", dir.path(), name}, dir,
                 "make_" + name + ".log");
  INFO(r.output);
  REQUIRE(r.code == 0);
  return dir.file(name + ".onnx");
}

json run_json(const kestrel::test::TempDir& dir, std::vector<std::string> extra, int expect_code) {
  std::vector<std::string> argv = {KESTREL_BIN, "run", "--json", "--repeat", "1", "--python", python()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Result r = run(argv, dir, "run.log");
  INFO(r.output);
  REQUIRE(r.code == expect_code);
  auto start = r.output.find('{');
  REQUIRE(start != std::string::npos);
  return json::parse(r.output.substr(start));
}

// A records database in `dir` holding one ok record (imported with kestrel records
// import, as a user would): `op` at `workload` on `target` (of `triple`) at `config`.
std::string records_with(const kestrel::test::TempDir& dir, const std::string& op, const std::string& workload,
                         const std::string& target, const std::string& triple, const std::string& config,
                         bool is_default) {
  const json record = {{"id", 1}, {"op", op}, {"workload", workload}, {"target", target},
                       {"device_key", "local"}, {"device_model", "test"}, {"device", "local-0"},
                       {"device_fingerprint", triple + "|test|1"}, {"config", config}, {"status", "ok"},
                       {"message", ""}, {"round_seconds", {0.001}}, {"cost", 0.001}, {"gflops", 0.5},
                       {"compile_ms", 1.0}, {"tool_version", "0.1.0"}, {"time_unix_ms", 1}, {"session", "test"},
                       {"final_measurement", false}, {"is_default", is_default}, {"implementation", "kestrel"}};
  {
    std::ofstream out(dir.file("records.jsonl"));
    out << record.dump() << "\n";
  }
  const std::string db = dir.file("tune.db");
  Result imported = run({KESTREL_BIN, "records", "import", "--db", db, dir.file("records.jsonl")}, dir, "import.log");
  INFO(imported.output);
  REQUIRE(imported.code == 0);
  return db;
}

void check_match(const json& j, std::size_t min_task_steps) {
  INFO(j.dump(2));
  CHECK(j["ok"] == true);
  CHECK(j["checked"] == true);
  CHECK(j["task_steps"].get<std::size_t>() >= min_task_steps);
  REQUIRE(j["outputs"].size() == 1);
  CHECK(j["outputs"][0]["relative_error"].get<double>() <= j["tolerance"].get<double>());
  CHECK(j["latency_ms"]["kestrel"]["median"].get<double>() > 0);
  CHECK(j["latency_ms"]["onnxruntime"]["median"].get<double>() > 0);
}

}  // namespace

TEST_CASE("model: kestrel run matches ONNX Runtime on ResNet-18", "[model][e2e]") {
  require_onnxruntime();
  kestrel::test::TempDir dir;
  std::string model = make_model(dir, "resnet18");
  json j = run_json(dir, {"--model", model, "--threads", "2"}, 0);
  // 20 convolutions (fused with bias, residual, ReLU), the max pool, the average pool, the Gemm.
  check_match(j, 20);
  CHECK(j["outputs"][0]["shape"] == json::array({1, 1000}));
}

TEST_CASE("model: kestrel run matches ONNX Runtime on MobileNetV2", "[model][e2e]") {
  require_onnxruntime();
  kestrel::test::TempDir dir;
  std::string model = make_model(dir, "mobilenetv2");
  check_match(run_json(dir, {"--model", model}, 0), 40);
}

TEST_CASE("model: kestrel run matches ONNX Runtime on a BERT encoder layer at two sequence lengths", "[model][e2e]") {
  require_onnxruntime();
  kestrel::test::TempDir dir;
  std::string model = make_model(dir, "bert_layer");
  for (const char* seq : {"7", "40"}) {
    json j = run_json(dir, {"--model", model, "--shape", std::string("seq=") + seq}, 0);
    check_match(j, 6);
    CHECK(j["outputs"][0]["shape"] == json::array({1, std::stoi(seq), 768}));
  }
}

TEST_CASE("model: kestrel run reports a mismatch, a missing symbol and a missing ONNX Runtime", "[model][e2e]") {
  require_onnxruntime();
  kestrel::test::TempDir dir;
  std::string model = make_model(dir, "bert_layer");
  // A tolerance no float computation meets: the check must fail, with exit status 1.
  json j = run_json(dir, {"--model", model, "--shape", "seq=3", "--tolerance", "1e-30"}, 1);
  CHECK(j["ok"] == false);
  CHECK(j["outputs"][0]["ok"] == false);

  Result r = run({KESTREL_BIN, "run", "--model", model}, dir, "nosym.log");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("seq"));

  r = run({KESTREL_BIN, "run", "--model", model, "--shape", "seq=3", "--python", dir.file("no-such-python")}, dir,
          "nopython.log");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("ONNX Runtime is not available") && Catch::Contains("setup-python.sh"));
  r = run({KESTREL_BIN, "run", "--model", model, "--shape", "seq=3", "--python", dir.file("no-such-python"),
           "--no-check"},
          dir, "nocheck.log");
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("check: skipped"));

  r = run({KESTREL_BIN, "run", "--model", dir.file("missing.onnx")}, dir, "missing.log");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("missing.onnx"));
}

TEST_CASE("model: kestrel run on an exported library dispatches untuned sequence lengths to a bucket and matches",
          "[model][e2e]") {
  require_onnxruntime();
  kestrel::test::TempDir dir;
  // One record of this machine's triple (an unrelated gemm): every task of the model is
  // exported at its op's default.
  struct utsname host;
  REQUIRE(::uname(&host) == 0);
  const std::string triple = std::string(host.machine) + "-linux-gnu";
  const std::string db = records_with(dir, "gemm", "K=64,M=64,N=64", triple, triple, "", true);
  std::string model = make_model(dir, "bert_layer");
  Result exported = run({KESTREL_BIN, "export", "--db", db, "--model", model, "--buckets", "seq=8,32", "-o",
                         dir.file("out")},
                        dir, "export.log");
  INFO(exported.output);
  REQUIRE(exported.code == 0);
  json j = run_json(dir, {"--model", model, "--kernels", dir.file("out"), "--shape", "seq=20"}, 0);
  check_match(j, 6);
  bool bucket = false;
  for (const auto& used : j["kernels_used"]) bucket = bucket || used.get<std::string>().find("bucket seq=32") != std::string::npos;
  CHECK(bucket);
}

TEST_CASE("model: kestrel run --db compiles each task at its best record (the others at zero-shot picks with --zero-shot) and still matches",
          "[model][e2e]") {
  require_onnxruntime();
  kestrel::test::TempDir dir;
  std::string model = make_model(dir, "bert_layer");
  // The model's first task (from kestrel tasks), recorded for this machine's native target
  // at a valid configuration other than the op's default.
  Result tasks = run({KESTREL_BIN, "tasks", "--model", model, "--shape", "seq=3", "--json"}, dir, "tasks.log");
  INFO(tasks.output);
  REQUIRE(tasks.code == 0);
  const json plan = json::parse(tasks.output.substr(tasks.output.find('{')));
  REQUIRE(!plan["plans"].empty());
  REQUIRE(!plan["plans"][0]["tasks"].empty());
  const json& task = plan["plans"][0]["tasks"][0];
  std::string params;
  for (const auto& [name, value] : task["params"].items()) {
    params += (params.empty() ? "" : ",") + name + "=" + std::to_string(value.get<long long>());
  }
  const kestrel::host::Target native = kestrel::host::parse_target("native");
  const kestrel::ops::Registry registry = kestrel::ops::builtin_ops();
  const kestrel::ops::Op& op = registry.get(task["op"].get<std::string>());
  const kestrel::ops::Params workload = kestrel::ops::parse_params(op, params);
  const kestrel::ops::Config fallback = op.default_config(workload, native.traits);
  kestrel::ops::Config tuned = fallback;
  for (const auto& knob : op.knobs(workload)) {
    for (auto value : knob.values) {
      kestrel::ops::Config candidate = fallback;
      candidate[knob.name] = value;
      if (tuned == fallback && candidate != fallback && op.check(workload, candidate, native.traits).empty()) {
        tuned = candidate;
      }
    }
  }
  const std::string db = records_with(dir, task["op"].get<std::string>(), params, native.to_string(), native.triple,
                                      kestrel::ops::format_config(tuned), tuned == fallback);

  json j = run_json(dir, {"--model", model, "--shape", "seq=3", "--db", db}, 0);
  check_match(j, 6);
  CHECK_THAT(j["kernels"].get<std::string>(), Catch::StartsWith("compiled here: 1 of ") &&
                                                  Catch::Contains("at their best record in " + db));
  // The recorded configuration is the one compiled for that task.
  bool used = false;
  for (const auto& k : j["kernels_used"]) {
    used = used || k.get<std::string>().find("compiled " + kestrel::ops::format_config(tuned)) != std::string::npos;
  }
  CHECK(used);

  // With the shipped cost model too: the recorded task keeps its record, the others get
  // the model's picks (gemm and the like), and the outputs still match.
  j = run_json(dir, {"--model", model, "--shape", "seq=3", "--db", db, "--zero-shot"}, 0);
  check_match(j, 6);
  CHECK_THAT(j["kernels"].get<std::string>(), Catch::StartsWith("compiled here: 1 of ") &&
                                                  Catch::Contains("at the cost model's zero-shot pick"));
  used = false;
  for (const auto& k : j["kernels_used"]) {
    used = used || k.get<std::string>().find("compiled " + kestrel::ops::format_config(tuned)) != std::string::npos;
  }
  CHECK(used);
  Result zero = run({KESTREL_BIN, "run", "--model", model, "--zero-shot", "--kernels", dir.path()}, dir, "zero.log");
  CHECK(zero.code == 2);
  CHECK_THAT(zero.output, Catch::Contains("--kernels and --cost-model/--zero-shot contradict"));
  Result absent = run({"/usr/bin/env", "KESTREL_COST_MODEL=" + dir.file("absent.kcm"), KESTREL_BIN, "run", "--model",
                       model, "--shape", "seq=3", "--zero-shot", "--no-check"},
                      dir, "absent.log");
  CHECK(absent.code == 2);
  CHECK_THAT(absent.output, Catch::Contains("absent.kcm"));

  Result both = run({KESTREL_BIN, "run", "--model", model, "--db", db, "--kernels", dir.path()}, dir, "both.log");
  CHECK(both.code == 2);
  CHECK_THAT(both.output, Catch::Contains("--kernels and --db contradict"));
  Result missing = run({KESTREL_BIN, "run", "--model", model, "--shape", "seq=3", "--db", dir.file("none.db"), "--no-check"},
                       dir, "missing.log");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.output, Catch::Contains("none.db"));
}
