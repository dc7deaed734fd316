// `kestrel dataset` and `kestrel cost-model train|show|eval` as a user runs them: the real
// binary on records databases written by the test (gemm and depthwise workloads with a
// synthetic cost), the CSV's header and rows, the model file and its quality table, and
// the errors (missing, empty and single-workload databases: exit 2, nothing written).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/space.h"
#include "support/process.h"
#include "support/python.h"

using Catch::Matchers::Contains;
using kestrel::test::read_text;
using kestrel::test::run_command;
using kestrel::test::TempDir;
using namespace kestrel;

namespace {

namespace fs = std::filesystem;

const char* kTarget = "x86_64-linux-gnu (znver3)";

// Records of `per_workload` random valid configurations of each shape, with a cost that
// favours 8-lane vectors and large micro-tiles, and every seventh one failed.
void write_records(const std::string& path, const std::string& op_name, const std::vector<std::string>& shapes,
                   int per_workload) {
  auto registry = ops::builtin_ops();
  const ops::Op& op = registry.get(op_name);
  auto db = records::open_records(path);
  tuner::Rng rng(11);
  const ops::TargetTraits traits = ops::TargetTraits::of(ops::Isa::avx2);
  for (const auto& shape : shapes) {
    const ops::Params params = ops::parse_params(op, shape);
    tuner::Space space(op, params, traits);
    for (int i = 0; i < per_workload; ++i) {
      auto index = space.sample_valid(rng);
      REQUIRE(index);
      records::Record r;
      r.op = op_name;
      r.workload = params;
      r.target = *kestrel::ops::TargetId::parse(kTarget);
      r.device_class = {"local", "AMD EPYC", "fp"};
      r.device = "local";
      r.config = space.config(*index);
      double quality = 1;
      for (const auto& [name, value] : r.config) quality *= 1.0 + 0.1 * std::fabs(std::log2(1.0 + static_cast<double>(value)) - 3);
      r.cost = op.flops(params) / 50e9 * quality;
      r.gflops = op.flops(params) / r.cost / 1e9;
      r.status = kernel::Status::ok;
      if (i % 7 == 3) {
        r.status = kernel::Status::wrong_answer;
        r.cost = std::numeric_limits<double>::infinity();
        r.gflops = 0;
      }
      r.session = "s";
      r.time_unix_ms = 1000 + i;
      db->add(r);
    }
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("e2e: kestrel dataset writes one CSV row per usable record with features and traits") {
  TempDir dir;
  write_records(dir.file("a.db"), "gemm", {"64x128x256", "96x96x96"}, 14);
  write_records(dir.file("b.db"), "depthwise_conv2d", {"C=32,H=28,W=28,R=3,S=3,pad=1,block=8"}, 10);
  std::string out;
  int code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("a.db"), "--db", dir.file("b.db"), "-o",
                          dir.file("data.csv")},
                         out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("wrote 38 rows"));
  const auto lines = lines_of(read_text(dir.file("data.csv")));
  REQUIRE(lines.size() == 39);
  const std::string& header = lines[0];
  CHECK(header.rfind("op,workload,target,target_class,device_key,device_model,config,status,cost_s,gflops,relative,"
                     "final,",
                     0) == 0);
  CHECK_THAT(header, Contains("cross.gemm.b_block_bytes/l2") && Contains("cross.depthwise_conv2d.tile_input_bytes/l1d") &&
                         Contains("target.vector_floats") && Contains(",trait.isa,") && Contains("trait.cores"));
  // A gemm row: the workload quoted (it has commas), the class, a relative throughput.
  CHECK(lines[1].rfind("gemm,\"K=256,M=64,N=128\",x86_64-linux-gnu (znver3),avx2,local,AMD EPYC,\"", 0) == 0);
  bool failed_row = false, best_row = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].find(",wrong answer,,") != std::string::npos) failed_row = true;
    if (lines[i].find(",ok,") != std::string::npos && lines[i].find(",1,0,") != std::string::npos) best_row = true;
  }
  CHECK(failed_row);
  CHECK(best_row);

  // --ok-only and --op filter; an empty result is an error and writes nothing.
  code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("a.db"), "--db", dir.file("b.db"), "--op",
                      "depthwise_conv2d", "--ok-only", "-o", dir.file("dw.csv")},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  const auto dw = lines_of(read_text(dir.file("dw.csv")));
  CHECK(dw.size() == 1 + 10 - 1);  // the 4th record failed
  code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("a.db"), "--op", "softmax", "-o", dir.file("none.csv")},
                     out, dir.file("log"));
  CHECK(code == 1);
  CHECK_THAT(out, Contains("no usable records"));
  CHECK_FALSE(fs::exists(dir.file("none.csv")));
  code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("missing.db"), "-o", dir.file("m.csv")}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("missing.db"));
  CHECK_FALSE(fs::exists(dir.file("m.csv")));
  code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("a.db"), "-o", dir.file("x.txt")}, out,
                     dir.file("log"));
  CHECK(code == 2);
  // Parquet needs a Python with pyarrow: a missing one is an error and nothing is written.
  code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("a.db"), "-o", dir.file("d.parquet"), "--python",
                      dir.file("no-python")},
                     out, dir.file("log"));
  CHECK(code == 1);
  CHECK_THAT(out, Contains("no-python was not found") && Contains("pyarrow"));
  CHECK_FALSE(fs::exists(dir.file("d.parquet")));
  for (const auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
}

TEST_CASE("e2e: kestrel dataset writes Parquet through pyarrow with text and number columns") {
  test::require_python_modules("pyarrow.parquet, pyarrow.csv");  // else skipped (77)
  TempDir dir;
  write_records(dir.file("a.db"), "gemm", {"64x128x256", "96x96x96"}, 10);
  std::string out;
  int code = run_command({KESTREL_BIN, "dataset", "--db", dir.file("a.db"), "-o", dir.file("d.parquet"), "--python",
                          test::python()},
                         out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  code = run_command({test::python(), "-c",
                      "import pyarrow.parquet as pq; t = pq.read_table('" + dir.file("d.parquet") +
                          "'); print(t.num_rows, t.schema.field('workload').type, t.schema.field('cost_s').type, "
                          "t.column('cost_s').null_count, t.column('workload')[0])"},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  // 20 rows, workloads as text, costs as numbers with the failed ones (every 7th from the 4th) null.
  CHECK_THAT(out, Contains("20 string double 2 K=256,M=64,N=128"));
}

TEST_CASE("e2e: kestrel cost-model train writes a model file and prints its held-out quality, and show and eval read it") {
  TempDir dir;
  write_records(dir.file("train.db"), "gemm",
                {"64x128x256", "96x96x96", "128x64x512", "200x300x100", "32x512x128", "256x256x64"}, 24);
  write_records(dir.file("held.db"), "gemm", {"160x96x192", "48x640x320"}, 24);
  std::string out;
  int code = run_command({KESTREL_BIN, "cost-model", "train", "--db", dir.file("train.db"), "-o", dir.file("m.kcm"),
                          "--folds", "3"},
                         out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK(fs::exists(dir.file("m.kcm")));
  CHECK_THAT(out, Contains("gemm") && Contains("avx2") && Contains("HELD-OUT") && Contains("TOP-1") &&
                      Contains("wrote " + dir.file("m.kcm")));
  CHECK_THAT(out, Contains("fold 1/3"));  // progress on stderr

  code = run_command({KESTREL_BIN, "cost-model", "train", "--db", dir.file("train.db"), "-o", dir.file("j.kcm"), "--json"},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  {
    // stdout and stderr share the log: the JSON document starts at the first '{'.
    auto json = nlohmann::json::parse(out.substr(out.find("\n{") + 1));
    REQUIRE(json["models"].size() == 1);
    CHECK(json["models"][0]["op"] == "gemm");
    CHECK(json["models"][0]["workloads"] == 6);
    CHECK(json["models"][0]["holdout"]["workloads"] == 6);
    CHECK(json["models"][0]["holdout"]["kendall_tau"].get<double>() > 0.3);
  }

  code = run_command({KESTREL_BIN, "cost-model", "show", dir.file("m.kcm")}, out, dir.file("log"));
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("feature schema") && Contains("gemm") && Contains("avx2"));
  code = run_command({KESTREL_BIN, "cost-model", "show", dir.file("m.kcm"), "--json"}, out, dir.file("log"));
  REQUIRE(code == 0);
  auto shown = nlohmann::json::parse(out);
  CHECK(shown["models"][0]["trained_workloads"].size() == 6);
  CHECK(shown["models"][0]["feature_names"].size() == shown["models"][0]["features"].get<std::size_t>());

  code = run_command({KESTREL_BIN, "cost-model", "eval", "--cost-model", dir.file("m.kcm"), "--db", dir.file("held.db"),
                      "--json"},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  auto evaluated = nlohmann::json::parse(out);
  REQUIRE(evaluated["results"].size() == 1);
  CHECK(evaluated["results"][0]["quality"]["workloads"] == 2);
  CHECK(evaluated["results"][0]["quality"]["kendall_tau"].get<double>() > 0.3);
  code = run_command({KESTREL_BIN, "cost-model", "eval", "--cost-model", dir.file("m.kcm"), "--db", dir.file("held.db")},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("WORKLOADS") && Contains("gemm"));

  // Errors: a missing model file, a usage error.
  code = run_command({KESTREL_BIN, "cost-model", "show", dir.file("nope.kcm")}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("no model file") && Contains("nope.kcm"));
  code = run_command({KESTREL_BIN, "cost-model", "eval", "--db", dir.file("held.db")}, out, dir.file("log"));
  CHECK(code == 2);
  code = run_command({KESTREL_BIN, "model", "fit"}, out, dir.file("log"));
  CHECK(code == 2);
}

TEST_CASE("e2e: kestrel cost-model train refuses a missing, empty or single-workload database and writes nothing") {
  TempDir dir;
  records::open_records(dir.file("empty.db"));
  write_records(dir.file("one.db"), "gemm", {"64x128x256"}, 20);
  std::string out;
  int code = run_command({KESTREL_BIN, "cost-model", "train", "--db", dir.file("missing.db"), "-o", dir.file("m.kcm")}, out,
                         dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("missing.db"));
  code = run_command({KESTREL_BIN, "cost-model", "train", "--db", dir.file("empty.db"), "-o", dir.file("m.kcm")}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("no usable records"));
  code = run_command({KESTREL_BIN, "cost-model", "train", "--db", dir.file("one.db"), "-o", dir.file("m.kcm")}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("gemm/x86: 1 workload") && Contains("at least 2 workloads"));
  CHECK_FALSE(fs::exists(dir.file("m.kcm")));
  // No model and no temporary file beside the databases.
  for (const auto& e : fs::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    CHECK(name.find(".kcm") == std::string::npos);
    CHECK(name.find(".tmp") == std::string::npos);
  }
}
