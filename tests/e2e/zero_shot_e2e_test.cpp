// `kestrel tune --zero-shot` and `kestrel export --cost-model` as a user runs them: the
// real binary, a cost model trained by the test on synthetic records of this host's
// target class (tests/tuner/synthetic_gemm.h) and saved as a .kcm file. Zero-shot picks
// without a device (no pool even with an unreachable --tracker when the target is named),
// nothing recorded; verification on the embedded device, recorded as a final round; the
// export's picks for tasks without records; and the errors (no model file, a garbage one,
// --zero-shot where no model is shipped, an op the model lacks). Then the model Kestrel
// ships, found without --cost-model: picks for each op and x86 class, and a whole ONNX
// model's tasks through `tune --model --zero-shot` and `export --model --zero-shot`.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/records/records.h"
#include "model/onnx_builder.h"
#include "support/process.h"
#include "tuner/synthetic_gemm.h"

using Catch::Matchers::Contains;
using kestrel::test::run_command;
using kestrel::test::TempDir;

namespace {

using namespace kestrel;

// A cost model of the synthetic machine's gemm for this host's target class.
void save_native_model(const std::string& path) {
  const ops::Registry registry = ops::builtin_ops();
  tuner::TrainOptions options;
  options.folds = 2;
  const auto records = test::synthetic_gemm_records(registry.get("gemm"), test::synthetic_training_workloads(),
                                                    host::parse_target("native"), 100);
  tuner::CrossModel::train(records, registry, options).save(path);
}

nlohmann::json parse_json(const std::string& output) {
  auto brace = output.find('{');
  REQUIRE(brace != std::string::npos);
  return nlohmann::json::parse(output.substr(brace));
}

std::vector<std::string> zero_shot_args(const std::string& model, const std::string& db, const std::string& shape) {
  return {KESTREL_BIN, "tune", "--op", "gemm", "--shape", shape, "--zero-shot", "--cost-model", model, "--db", db};
}

}  // namespace

#if defined(__x86_64__)
TEST_CASE("e2e: kestrel tune --zero-shot picks in seconds without measuring or recording, and says what is wrong") {
  TempDir dir;
  const std::string model = dir.file("m.kcm"), db = dir.file("t.db");
  save_native_model(model);
  std::string out;

  // The pick, printed; no database written.
  int code = run_command(zero_shot_args(model, db, "384x384x384"), out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("zero-shot pick (0 measurements, ") && Contains(" s): ") && Contains("kc=") &&
                      Contains("nothing was measured or recorded"));
  CHECK_FALSE(std::filesystem::exists(db));

  // --json, with a named target and a tracker that is not there: no pool is started.
  auto args = zero_shot_args(model, db, "384x384x384");
  for (const char* extra : {"--json", "--target", "native", "--tracker", "127.0.0.1:9"}) args.push_back(extra);
  code = run_command(args, out, dir.file("log"));
  REQUIRE(code == 0);
  auto json = parse_json(out);
  CHECK(json["stop_reason"] == "zero-shot");
  CHECK(json["trials"] == 0);
  CHECK(json["this_session"] == 0);
  CHECK(json["final"].empty());
  CHECK(json["db"].is_null());
  CHECK(json["model_file"] == model);
  const std::string pick = json["zero_shot"]["pick"];
  CHECK_THAT(pick, Contains("mc=") && Contains("nr=") && Contains("vec="));
  CHECK(json["zero_shot"]["picks"].size() == 1);
  CHECK(json["zero_shot"]["scored"].get<int>() > 1000);
  CHECK(json["zero_shot"]["seconds"].get<double>() < 5.0);
  CHECK(json["zero_shot"]["fallback"] == "");
  CHECK_FALSE(std::filesystem::exists(db));

  // --workloads: one pick per workload; a workload of an op the model lacks (conv2d)
  // gets the op's default and says so.
  code = run_command({KESTREL_BIN, "tune", "--workloads", "gemm-square,resnet18-conv", "--only", "256,layer1.conv",
                      "--zero-shot", "--cost-model", model, "--db", db, "--json"},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  json = parse_json(out);
  REQUIRE(json["workloads"].size() == 2);
  CHECK(json["workloads"][0]["label"] == "256");
  CHECK(json["workloads"][0]["zero_shot"]["fallback"] == "");
  CHECK(json["workloads"][1]["label"] == "layer1.conv");
  CHECK_THAT(json["workloads"][1]["zero_shot"]["fallback"].get<std::string>(), Contains("no model for conv2d"));
  CHECK(json["workloads"][1]["zero_shot"]["pick"] != "");
  CHECK_FALSE(std::filesystem::exists(db));
  code = run_command({KESTREL_BIN, "tune", "--workloads", "resnet18-conv", "--only", "layer1.conv", "--zero-shot",
                      "--cost-model", model, "--db", db},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("no zero-shot pick: the cost model has no model for conv2d") &&
                      Contains("the op's default stands in: "));

  // An op the model has no model for: an error naming what it has.
  code = run_command({KESTREL_BIN, "tune", "--op", "conv2d_nchwc", "--shape",
                      "N=1,C=16,H=14,W=14,K=16,R=3,S=3,pad=1,block=8", "--zero-shot", "--cost-model", model, "--db",
                      db},
                     out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("no model for conv2d_nchwc") && Contains("gemm/"));

  // A missing or garbage model file fails first; --zero-shot needs one.
  code = run_command(zero_shot_args(dir.file("missing.kcm"), db, "64x64x64"), out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("missing.kcm"));
  std::ofstream(dir.file("garbage.kcm")) << "not a model";
  code = run_command(zero_shot_args(dir.file("garbage.kcm"), db, "64x64x64"), out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("garbage.kcm"));
  // --zero-shot alone takes the shipped model; where it is not, the error says where it looked.
  code = run_command({"/usr/bin/env", "KESTREL_COST_MODEL=" + dir.file("absent.kcm"), KESTREL_BIN, "tune", "--shape",
                      "64x64x64", "--zero-shot", "--db", db},
                     out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("uses the cost model Kestrel ships") && Contains("absent.kcm"));
  code = run_command({KESTREL_BIN, "tune", "--shape", "64x64x64", "--zero-shot-verify", "2", "--db", db}, out,
                     dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("--zero-shot-verify goes with --zero-shot"));
  CHECK_FALSE(std::filesystem::exists(db));
}

TEST_CASE("e2e: kestrel tune --zero-shot-verify measures the model's top picks and the default once") {
  TempDir dir;
  const std::string model = dir.file("m.kcm"), db = dir.file("t.db");
  save_native_model(model);
  std::string out;
  auto args = zero_shot_args(model, db, "48x48x48");
  for (const char* extra : {"--zero-shot-verify", "2", "--repeat", "2", "--min-repeat-ms", "1", "--final-repeat", "2",
                            "--vendors", "none", "--json"}) {
    args.push_back(extra);
  }
  int code = run_command(args, out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  auto json = parse_json(out);
  CHECK(json["stop_reason"] == "zero-shot");
  REQUIRE(json["zero_shot"]["picks"].size() == 2);
  // Expected: the picks and the default, nothing else.
  std::set<std::string> measured;
  for (const auto& p : json["zero_shot"]["picks"]) measured.insert(p.get<std::string>());
  bool has_default = false;
  for (const auto& f : json["final"]) {
    if (f["is_default"].get<bool>()) {
      measured.insert(f["config"].get<std::string>());
      has_default = true;
    }
  }
  CHECK(has_default);
  CHECK(json["final"].size() == measured.size());
  for (const auto& f : json["final"]) CHECK(measured.contains(f["config"].get<std::string>()));
  CHECK(json["trials"] == measured.size());

  auto records = records::open_records(db, records::OpenMode::existing);
  CHECK(records->count() == measured.size());
  for (const auto& r : records->all()) {
    CHECK(r.final_measurement);
    CHECK(measured.contains(ops::format_config(r.config)));
  }
  CHECK(records->best().size() == 1);
}

TEST_CASE("e2e: kestrel export --cost-model gives tasks without records the model's pick") {
  TempDir dir;
  const std::string cost_model = dir.file("m.kcm"), db = dir.file("t.db"), out_dir = dir.file("out");
  save_native_model(cost_model);
  kestrel::test::gemm_softmax_model().save(dir.file("m.onnx"));
  const std::string onnx = dir.file("m.onnx");
  std::string out;

  // Without records for the target and without a cost model: refused, as before.
  {
    auto records = records::open_records(db);
    (void)records;
  }
  int code = run_command({KESTREL_BIN, "export", "--db", db, "--model", onnx, "-o", out_dir}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("tune for it first"));

  // With one: every task without a record gets the model's pick (gemm) or, for an op the
  // model has none for (softmax), the default, saying so.
  auto export_json = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {KESTREL_BIN, "export", "--db", db, "--model", onnx, "-o", out_dir,
                                     "--buckets", "seq=8,32", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    int status = run_command(args, out, dir.file("log"));
    INFO(out);
    REQUIRE(status == 0);
    return parse_json(out);
  };
  auto report = export_json({"--cost-model", cost_model});
  std::string gemm_params;
  std::size_t picked = 0;
  for (const auto& k : report["kernels"]) {
    INFO(k.dump());
    if (k["op"] == "gemm") {
      CHECK(k["origin"] == "zero-shot");
      ++picked;
      gemm_params = k["params"];
    } else {
      CHECK(k["origin"] == "default");
    }
  }
  CHECK(picked == 2);  // the gemm at both buckets
  CHECK(report["cost_model"] == cost_model);
  bool noted = false;
  for (const auto& note : report["notes"]) noted = noted || note.get<std::string>().find("softmax") != std::string::npos;
  CHECK(noted);
  std::ifstream manifest_file(std::filesystem::path(out_dir) / "manifest.json");
  const auto manifest = nlohmann::json::parse(manifest_file);
  CHECK(manifest["cost_model"] == cost_model);
  std::size_t manifest_picks = 0;
  for (const auto& k : manifest["kernels"]) manifest_picks += k["origin"] == "zero-shot" ? 1 : 0;
  CHECK(manifest_picks == 2);

  // A record of one gemm task: that one is tuned, the other still picked.
  {
    const ops::Registry registry = ops::builtin_ops();
    const ops::Op& gemm = registry.get("gemm");
    const host::Target native = host::parse_target("native");
    const ops::Params params = ops::parse_params(gemm, gemm_params);
    records::Record r;
    r.op = "gemm";
    r.workload = params;
    r.target = native.id();
    r.device_class = {"local", "test cpu", "x86_64-linux-gnu|test cpu|2"};
    r.config = gemm.default_config(params, native.traits);
    r.cost = 1e-3;
    r.round_seconds = {1e-3};
    r.gflops = 42.5;
    r.session = "s";
    records::open_records(db)->add(r);
  }
  report = export_json({"--cost-model", cost_model});
  std::multiset<std::string> origins;
  for (const auto& k : report["kernels"]) origins.insert(k["op"].get<std::string>() + ":" + k["origin"].get<std::string>());
  CHECK(origins.count("gemm:tuned") == 1);
  CHECK(origins.count("gemm:zero-shot") == 1);

  // Without --cost-model, as before: the op's default.
  report = export_json({});
  for (const auto& k : report["kernels"]) CHECK(k["origin"] != "zero-shot");
  CHECK(report["cost_model"].is_null());

  // A bad model file fails before anything is written.
  std::filesystem::remove_all(out_dir);
  code = run_command({KESTREL_BIN, "export", "--db", db, "--model", onnx, "-o", out_dir, "--cost-model",
                      dir.file("missing.kcm")},
                     out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("missing.kcm"));
  CHECK_FALSE(std::filesystem::exists(out_dir));
}
#endif

#if defined(__x86_64__)
// The model Kestrel ships (share/cost-model/kestrel.kcm: kestrel cost-model train on the
// records of share/cost-model/data, `kestrel datagen` runs of gemm, conv2d_nchwc and
// depthwise_conv2d workloads; share/cost-model/README.md): it still loads (its feature
// schema is this Kestrel's: a change to the features must retrain it), it is found without
// --cost-model, and it picks a valid configuration for unseen shapes of each op on an AVX2
// and an AVX-512 target, with nothing measured and no device.
TEST_CASE("e2e: the shipped model picks for unseen workloads of each op and x86 class without measuring") {
  TempDir dir;
  const ops::Registry registry = ops::builtin_ops();
  const std::vector<std::pair<std::string, std::string>> unseen = {
      {"gemm", "M=200,N=300,K=100"},
      {"conv2d_nchwc", "C=48,H=20,W=20,K=80,R=3,S=3,pad=1,block=%"},
      {"depthwise_conv2d", "C=40,H=30,W=30,stride=2,pad=1,block=%"}};
  const std::vector<std::pair<std::string, std::string>> classes = {{"+avx2,+fma", "8"},
                                                                    {"+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl", "16"}};
  for (const auto& [features, block] : classes) {
    for (auto [op, shape] : unseen) {
      if (auto at = shape.find('%'); at != std::string::npos) shape.replace(at, 1, block);
      INFO(op << " " << shape << " " << features);
      std::string out;
      int code = run_command({KESTREL_BIN, "tune", "--op", op, "--shape", shape, "--zero-shot", "--target",
                              "x86_64-linux-gnu", "--features", features, "--db", dir.file("none.db"), "--json"},
                             out, dir.file("log"));
      INFO(out);
      REQUIRE(code == 0);
      auto json = parse_json(out);
      CHECK(json["stop_reason"] == "zero-shot");
      CHECK(json["this_session"] == 0);
      CHECK(json["zero_shot"]["fallback"] == "");
      CHECK_THAT(json["model_file"].get<std::string>(), Contains("share/cost-model/kestrel.kcm"));
      const ops::Op& o = registry.get(op);
      const ops::Params params = ops::parse_params(o, shape);
      const ops::Config config = ops::parse_pairs(json["zero_shot"]["pick"].get<std::string>());
      host::Target target = host::parse_target("x86_64-linux-gnu", "", features);
      CHECK(o.check(params, config, target.traits).empty());
    }
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("none.db")));

  // What it covers, without naming the file.
  std::string out;
  REQUIRE(run_command({KESTREL_BIN, "cost-model", "show", "--json"}, out, dir.file("log")) == 0);
  auto shown = parse_json(out);
  std::set<std::string> covered;
  for (const auto& m : shown["models"]) covered.insert(m["op"].get<std::string>() + "/" + m["target_class"].get<std::string>());
  CHECK(covered == std::set<std::string>{"conv2d_nchwc/x86", "depthwise_conv2d/x86", "gemm/x86"});

  // Where no model is shipped, show and export say where they looked; export writes nothing.
  const std::string absent = "KESTREL_COST_MODEL=" + dir.file("absent.kcm");
  int code = run_command({"/usr/bin/env", absent, KESTREL_BIN, "cost-model", "show"}, out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("absent.kcm"));
  kestrel::test::gemm_softmax_model().save(dir.file("m.onnx"));
  code = run_command({"/usr/bin/env", absent, KESTREL_BIN, "export", "--model", dir.file("m.onnx"), "--zero-shot", "-o",
                      dir.file("out")},
                     out, dir.file("log"));
  CHECK(code == 2);
  CHECK_THAT(out, Contains("uses the cost model Kestrel ships") && Contains("absent.kcm"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));
}

// A whole model zero-shot: `kestrel tune --model --zero-shot` picks every task in seconds
// and records nothing; `kestrel export --model --zero-shot` compiles those picks with no
// database at all.
TEST_CASE("e2e: a model's tasks get the shipped model's picks from tune and export, with no database") {
  TempDir dir;
  kestrel::test::gemm_softmax_model().save(dir.file("m.onnx"));
  const std::string onnx = dir.file("m.onnx"), db = dir.file("absent.db"), out_dir = dir.file("out");
  std::string out;
  int code = run_command({KESTREL_BIN, "tune", "--model", onnx, "--buckets", "seq=8,32", "--zero-shot", "--target",
                          "native", "--db", db},
                         out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Contains("ZERO-SHOT PICK") && Contains("tasks picked by") && Contains("nothing measured or recorded") &&
                      Contains("kestrel export --model"));
  CHECK_THAT(out, Contains("(default: no model)"));  // softmax: no model for its op
  CHECK_FALSE(std::filesystem::exists(db));

  code = run_command({KESTREL_BIN, "tune", "--model", onnx, "--buckets", "seq=8,32", "--zero-shot", "--target",
                      "native", "--db", db, "--json"},
                     out, dir.file("log"));
  REQUIRE(code == 0);
  auto tuned = parse_json(out);
  std::map<std::string, std::string> picks;  // gemm workload -> pick
  for (const auto& r : tuned["results"]) {
    CHECK(r["stop_reason"] == "zero-shot");
    if (r["op"] == "gemm") {
      CHECK(r["zero_shot"]["fallback"] == "");
      picks[r["workload"].get<std::string>()] = r["zero_shot"]["pick"].get<std::string>();
    }
  }
  REQUIRE_FALSE(picks.empty());

  code = run_command({KESTREL_BIN, "export", "--model", onnx, "--buckets", "seq=8,32", "--zero-shot", "-o", out_dir,
                      "--kernels-only", "--json"},
                     out, dir.file("log"));
  INFO(out);
  REQUIRE(code == 0);
  auto report = parse_json(out);
  CHECK_THAT(report["cost_model"].get<std::string>(), Contains("kestrel.kcm"));
  std::size_t gemms = 0;
  for (const auto& k : report["kernels"]) {
    if (k["op"] != "gemm") continue;
    ++gemms;
    CHECK(k["origin"] == "zero-shot");
    auto it = picks.find(k["params"].get<std::string>());
    REQUIRE(it != picks.end());
    CHECK(k["config"] == it->second);  // the export compiles tune's picks
  }
  CHECK(gemms == picks.size());
  CHECK(std::filesystem::exists(out_dir + "/libkestrel_kernels.so"));
  CHECK_FALSE(std::filesystem::exists(db));
}
#endif
