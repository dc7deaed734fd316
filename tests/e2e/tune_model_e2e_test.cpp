// `kestrel tune --model` as a user runs it: the real binary, the embedded tracker and
// device, a model file written by the test (onnx_builder.h) with a symbolic sequence
// length: every task of every bucket tuned in one session, resumed, stopped by a time
// budget, and the errors.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/onnx_builder.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using kestrel::test::OnnxBuilder;
using kestrel::test::run_command;
using kestrel::test::TempDir;

namespace {

// x[1,seq,16] -> MatMul+Add+Relu (a gemm) -> Softmax: two tasks per bucket.
OnnxBuilder small_model() {
  OnnxBuilder b;
  b.input("x", {1, "seq", 16}).output("y");
  b.weight("w", {16, 24}).weight("bias", {24});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"a"});
  b.node("Relu", {"a"}, {"r"});
  b.node("Softmax", {"r"}, {"y"}).i("axis", -1);
  return b;
}

std::vector<std::string> tune_args(const std::string& model, const std::string& db, int trials_per_task) {
  return {KESTREL_BIN,   "tune",      "--model", model, "--buckets", "seq=4,16", "--trials-per-task",
          std::to_string(trials_per_task), "--batch", "3", "--repeat", "2", "--min-repeat-ms", "1",
          "--final-top", "1", "--final-repeat", "2", "--vendors", "none", "--db", db, "--json"};
}

nlohmann::json parse_json(const std::string& output) {
  auto brace = output.find('{');
  REQUIRE(brace != std::string::npos);
  return nlohmann::json::parse(output.substr(brace));
}

}  // namespace

TEST_CASE("e2e: kestrel tune --model tunes every task of every bucket in one session and resumes") {
  TempDir dir;
  small_model().save(dir.file("m.onnx"));
  std::string out;
  int code = run_command(tune_args(dir.file("m.onnx"), dir.file("t.db"), 5), out, dir.file("log1"));
  INFO(out);
  REQUIRE(code == 0);
  auto json = parse_json(out);
  CHECK(json["tasks"] == 4);
  CHECK(json["stop_reason"] == "trials");
  REQUIRE(json["results"].size() == 4);
  std::set<std::string> tasks;
  for (const auto& r : json["results"]) {
    tasks.insert(r["op"].get<std::string>() + " " + r["workload"].get<std::string>());
    CHECK(r["trials"].get<int>() >= 5);
    CHECK(r["this_session"].get<int>() >= 5);
    CHECK(r["final"].size() >= 1);
  }
  CHECK(tasks.count("gemm K=16,M=4,N=24,act=1,bias=1"));
  CHECK(tasks.count("gemm K=16,M=16,N=24,act=1,bias=1"));
  CHECK(tasks.count("softmax cols=24,rows=4"));
  CHECK(tasks.count("softmax cols=24,rows=16"));

  // Again with a larger budget: what is recorded is resumed, not measured again.
  code = run_command(tune_args(dir.file("m.onnx"), dir.file("t.db"), 8), out, dir.file("log2"));
  REQUIRE(code == 0);
  json = parse_json(out);
  REQUIRE(json["results"].size() == 4);
  for (const auto& r : json["results"]) {
    CHECK(r["resumed"].get<int>() >= 5);
    CHECK(r["this_session"].get<int>() <= 4);
    CHECK(r["trials"].get<int>() >= 8);
  }
}

TEST_CASE("e2e: kestrel tune --model stops at its time budget and keeps what it measured") {
  TempDir dir;
  small_model().save(dir.file("m.onnx"));
  auto argv = tune_args(dir.file("m.onnx"), dir.file("t.db"), 1);
  argv[7] = "100000";  // --trials-per-task: only the budget stops it
  argv.insert(argv.end(), {"--time-budget", "4s"});
  std::string out;
  int code = run_command(argv, out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  auto json = parse_json(out);
  CHECK(json["stop_reason"] == "time budget");
  REQUIRE(json["results"].size() >= 1);
  for (const auto& r : json["results"]) CHECK(r["trials"].get<int>() >= 1);
}

TEST_CASE("e2e: kestrel tune --model keeps to its time budget, the final round included, and shows its progress") {
  TempDir dir;
  small_model().save(dir.file("m.onnx"));
  // Only the budget stops the search; no --json: the progress on stderr and the summary.
  std::vector<std::string> argv = {KESTREL_BIN, "tune", "--model", dir.file("m.onnx"), "--buckets", "seq=4,16",
                                   "--trials-per-task", "100000", "--batch", "3", "--repeat", "2",
                                   "--min-repeat-ms", "1", "--final-top", "2", "--final-repeat", "6",
                                   "--vendors", "none", "--db", dir.file("t.db"), "--time-budget", "6s"};
  std::string out;
  const auto started = std::chrono::steady_clock::now();
  int code = run_command(argv, out, dir.file("log"));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(out);
  INFO("wall time " << wall << " s for a budget of 6 s");
  REQUIRE(code == 0);
  // The budget covers the final round: over it by at most a batch or a task's final pass,
  // plus starting the embedded tracker and device (generous for a loaded 2-core machine;
  // before, the final round came after the budget, unbounded).
  CHECK(wall < 6.0 + 10.0);
  CHECK_THAT(out, Contains("stopped by time budget"));
  // The final round's progress: a line when it starts, then one per task started (all 4
  // unless the machine is so loaded that the budget ran out first), with an ETA.
  const std::string started_line = "tune: final round: re-measuring the best of ";
  const auto at = out.find(started_line);
  REQUIRE(at != std::string::npos);
  const int tasks = std::atoi(out.c_str() + at + started_line.size());
  CHECK(tasks >= 1);
  CHECK(tasks <= 4);
  const std::string of = "/" + std::to_string(tasks) + " ";
  CHECK_THAT(out, Contains("tune: final 1" + of) && Contains("tune: final " + std::to_string(tasks) + of) &&
                      Contains("final round ETA"));
  // The summary says how the final round went: in full, cut, or skipped for time.
  CHECK_THAT(out, Contains("final round: ") && Contains("re-measured in full") && Contains("it took"));
  CHECK_THAT(out, Contains("FINAL"));
}

TEST_CASE("e2e: kestrel tune --model refuses bad input clearly") {
  TempDir dir;
  std::string out;
  // A model with nothing Kestrel tunes.
  OnnxBuilder b;
  b.input("x", {1, 8}).output("y");
  b.ints("shape", {8});
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.save(dir.file("none.onnx"));
  int code = run_command({KESTREL_BIN, "tune", "--model", dir.file("none.onnx"), "--db", dir.file("t.db")}, out,
                         dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("has no operator Kestrel tunes") && Contains("Reshape"));

  code = run_command({KESTREL_BIN, "tune", "--model", dir.file("missing.onnx")}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("missing.onnx"));

  small_model().save(dir.file("m.onnx"));
  code = run_command({KESTREL_BIN, "tune", "--model", dir.file("m.onnx"), "--trials", "5"}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("--trials-per-task"));
  code = run_command({KESTREL_BIN, "tune", "--model", dir.file("m.onnx"), "--buckets", "len=4"}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("no symbolic dimension 'len'") && Contains("seq"));
  code = run_command({KESTREL_BIN, "tune", "--op", "gemm", "--shape", "8x8x8", "--buckets", "4"}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("go with --model"));
  code = run_command({KESTREL_BIN, "tune", "--op", "gemm", "--shape", "8x8x8", "--trials-per-task", "4"}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("--trials-per-task goes with a model"));
}
