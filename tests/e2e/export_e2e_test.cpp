// `kestrel export` as a user runs it: the real binary on a model file written by the test
// (onnx_builder.h) and a records database filled with `kestrel records import`: default
// kernels, then a tuned one, the files and the report; and the errors (no database, no
// records for the target, no model, an output folder that cannot be written).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/onnx_builder.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using kestrel::test::gemm_softmax_model;
using kestrel::test::run_command;
using kestrel::test::TempDir;

namespace {


// One record as `kestrel records export` writes it.
std::string record_line(const std::string& op, const std::string& workload, const std::string& target,
                        const std::string& config, double gflops, const std::string& session) {
  nlohmann::json r = {{"op", op},
                      {"workload", workload},
                      {"target", target},
                      {"device_key", "local"},
                      {"device_model", "test cpu"},
                      {"device", "cpu0"},
                      {"device_fingerprint", target + "|test cpu|2"},
                      {"config", config},
                      {"status", "ok"},
                      {"message", ""},
                      {"round_seconds", {1e-3, 1e-3, 1e-3}},
                      {"cost", 1e-3},
                      {"gflops", gflops},
                      {"compile_ms", 10.0},
                      {"tool_version", "0.1.0"},
                      {"time_unix_ms", 1795446543004},
                      {"session", session},
                      {"final_measurement", false},
                      {"is_default", false},
                      {"implementation", "kestrel"}};
  return r.dump() + "\n";
}

int import_record(const TempDir& dir, const std::string& line) {
  std::ofstream(dir.file("r.jsonl")) << line;
  std::string out;
  return run_command({KESTREL_BIN, "records", "import", "--db", dir.file("tune.db"), dir.file("r.jsonl")}, out,
                     dir.file("log"));
}

}  // namespace

#if defined(__x86_64__)
TEST_CASE("e2e: kestrel export writes a library of default and tuned kernels, and says what is wrong") {
  TempDir dir;
  gemm_softmax_model().save(dir.file("m.onnx"));
  const std::string model = dir.file("m.onnx"), db = dir.file("tune.db"), out_dir = dir.file("out");
  std::string out;

  int code = run_command({KESTREL_BIN, "export", "--db", db, "--model", model, "-o", out_dir}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("no records database at"));

  REQUIRE(import_record(dir, record_line("gemm", "K=8,M=8,N=8", "aarch64-linux-gnu (cortex-a72)", "", 1, "a")) == 0);
  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", model, "-o", out_dir}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("no records for x86_64-linux-gnu in " + db + ": tune for it first"));

  // A record for the target (of another workload): every task at the op's default.
  REQUIRE(import_record(dir, record_line("gemm", "K=8,M=8,N=8", "x86_64-linux-gnu", "", 1, "b")) == 0);
  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", model, "-o", out_dir, "--buckets", "seq=32",
                      "--json"},
                     out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  auto report = nlohmann::json::parse(out);
  REQUIRE(report["kernels"].size() == 2);
  CHECK(report["kernels"][0]["op"] == "gemm");
  CHECK(report["kernels"][0]["origin"] == "default");
  CHECK(report["kernels"][0]["dynamic"][0]["param"] == "M");
  CHECK(report["kernels"][1]["op"] == "softmax");
  CHECK(report["runtime_copied"] == true);
  for (const char* file : {"libkestrel_kernels.so", "libkestrel_kernels.a", "kestrel_kernels.h", "kestrel_abi.h",
                           "kestrel_runtime.h", "libkestrel_rt.a", "libkestrel_rt.so", "manifest.json"}) {
    INFO(file);
    CHECK(std::filesystem::exists(std::filesystem::path(out_dir) / file));
  }

  // A record of the gemm task itself: it is exported tuned, with the record's speed.
  const std::string gemm_params = report["kernels"][0]["params"];
  const std::string gemm_config = report["kernels"][0]["config"];
  REQUIRE(import_record(dir, record_line("gemm", gemm_params, "x86_64-linux-gnu", gemm_config, 42.5, "c")) == 0);
  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", model, "-o", out_dir, "--buckets", "seq=32"}, out,
                     dir.file("log"));
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("tuned") && Contains("42.5") && Contains("[M=seq]") && Contains("kestrel_k0") &&
                      Contains("2 kernels (1 tuned, 1 at the op's default)"));

  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", dir.file("missing.onnx"), "-o", out_dir}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("missing.onnx"));
  std::ofstream(dir.file("file")) << "x";
  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", model, "-o", dir.file("file") + "/out"}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("cannot write to the output folder"));
  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", model}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("-o/--out is required"));
}
#endif
