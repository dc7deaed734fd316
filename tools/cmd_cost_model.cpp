// `kestrel cost-model train|show|eval`: the cross-workload ("zero-shot") cost model. train fits
// one ranking model per op and CPU family (or per target class) on records databases and
// writes a .kcm file with its held-out ranking quality; show prints what a file holds; eval
// measures a file's ranking quality on other records (workloads it never saw).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/frontend/tune_setup.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/records/records.h"

namespace kestrel::tools {
namespace {

const char* kUsage =
    "usage: kestrel cost-model train --db FILE [--db FILE ...] -o MODEL.kcm [--op NAME ...] [--class CLASS ...]\n"
    "                                [--per-class] [--folds N] [--seed N] [--json]\n"
    "       kestrel cost-model show MODEL.kcm [--json]\n"
    "       kestrel cost-model eval --cost-model MODEL.kcm --db FILE [--db FILE ...] [--op NAME ...] [--json]\n"
    "\n"
    "The cross-workload cost model: one ranking model per op and CPU family (x86: sse, avx2,\n"
    "avx512; arm: neon, neon32) or GPU backend, trained on the records of many workloads, that\n"
    "orders the configurations of a workload it never saw (kestrel tune --zero-shot, kestrel\n"
    "export --zero-shot). Kestrel ships one (kestrel cost-model show without a file).\n"
    "`kestrel cost-model ACTION --help` explains each action.\n";

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text += std::string(width - text.size(), ' ');
  return text + " ";
}

nlohmann::json quality_json(const tuner::RankingQuality& q) {
  return {{"workloads", q.workloads},
          {"top1_recall", q.top1_recall},
          {"top5_recall", q.top5_recall},
          {"kendall_tau", q.kendall_tau},
          {"pick_ratio", q.pick_ratio}};
}

std::string quality_columns(const tuner::RankingQuality& q) {
  if (q.workloads == 0) return pad("-", 9) + pad("-", 7) + pad("-", 7) + pad("-", 6) + "-";
  return pad(std::to_string(q.workloads), 9) + pad(fixed(q.top1_recall, 2), 7) + pad(fixed(q.top5_recall, 2), 7) +
         pad(fixed(q.kendall_tau, 2), 6) + fixed(q.pick_ratio, 3);
}

const char* kQualityHeader = "HELD-OUT TOP-1  TOP-5  TAU    PICK";

std::vector<records::Record> read_records(const std::vector<std::string>& paths) {
  std::vector<records::Record> out;
  for (const std::string& path : paths) {
    auto db = records::open_records(path, records::OpenMode::existing);
    auto records = db->all();
    out.insert(out.end(), std::make_move_iterator(records.begin()), std::make_move_iterator(records.end()));
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// One line per model, and for a model pooled over several classes one more per class
// with that class's share of the held-out quality.
void print_models(const std::vector<tuner::OpModelInfo>& models) {
  std::cout << pad("OP", 18) << pad("CLASS", 7) << pad("TRAINED ON", 12) << pad("WORKLOADS", 9) << pad("ROWS", 7)
            << kQualityHeader << "\n";
  for (const auto& m : models) {
    std::cout << pad(m.op, 18) << pad(m.target_class, 7) << pad(joined(m.trained_classes), 12)
              << pad(std::to_string(m.workloads), 9) << pad(std::to_string(m.rows), 7) << quality_columns(m.holdout)
              << "\n";
    if (m.holdout_by_class.size() < 2) continue;
    for (const auto& [cls, q] : m.holdout_by_class) {
      std::cout << pad("", 18) << pad("", 7) << pad("  " + cls, 12) << pad("", 9) << pad("", 7) << quality_columns(q)
                << "\n";
    }
  }
}

nlohmann::json models_json(const std::vector<tuner::OpModelInfo>& models, bool with_workloads) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& m : models) {
    nlohmann::json one = {{"op", m.op},
                          {"target_class", m.target_class},
                          {"trained_classes", m.trained_classes},
                          {"features", m.feature_names.size()},
                          {"rows", m.rows},
                          {"workloads", m.workloads},
                          {"holdout", quality_json(m.holdout)}};
    nlohmann::json by_class = nlohmann::json::object();
    for (const auto& [cls, q] : m.holdout_by_class) by_class[cls] = quality_json(q);
    one["holdout_by_class"] = std::move(by_class);
    if (with_workloads) {
      nlohmann::json limits = nlohmann::json::object();
      for (const auto& [name, value] : m.register_limits) limits[name] = value;
      one["register_limits"] = std::move(limits);
      one["feature_names"] = m.feature_names;
      one["trained_workloads"] = m.trained_workloads;
    }
    out.push_back(std::move(one));
  }
  return out;
}

int train(int argc, char** argv) {
  Args args("kestrel cost-model train",
            "Trains a cross-workload ranking model per op and CPU family on the records of the databases\n"
            "(Kestrel's own kernels; vendor records are skipped), measures its ranking quality on workloads\n"
            "held out of training (leave-workloads-out folds) and writes the model file. Progress on stderr.\n"
            "A family's model pools the records of its classes (x86: sse, avx2, avx512; arm: neon, neon32)\n"
            "and answers for every class of the family, also one it has no records of; --per-class trains\n"
            "one model per class instead. Needs records of at least 2 workloads of an op, each with 2\n"
            "distinct ok costs.\n"
            "Exit status: 0; 1 when the records cannot be read or are too few (nothing is written); 2 usage.");
  args.multi_option("db", "FILE|URI", "records database (SQLite file or PostgreSQL URI)");
  args.option("o,out", "FILE", "the model file to write (.kcm)");
  args.multi_option("op", "NAME", "only this op");
  args.multi_option("class", "CLASS", "only records of this target class (avx2, avx512, neon, ...)");
  args.flag("per-class", "one model per target class instead of one per CPU family");
  args.option("folds", "N", "leave-workloads-out folds for the held-out quality (0: none)", "5");
  args.option("seed", "N", "seed of the folds and the booster", "1");
  args.flag("json", "print JSON instead of a table");
  if (!args.parse(argc, argv, 3)) {
    std::cout << args.help();
    return 0;
  }
  if (!args.has("db")) throw UsageError("--db is required (the records to train on)");
  if (!args.has("out")) throw UsageError("-o is required (the model file to write)");
  tuner::TrainOptions options;
  options.ops = args.get_all("op");
  options.classes = args.get_all("class");
  options.pool_families = !args.has("per-class");
  options.folds = static_cast<std::size_t>(args.get_int("folds", 5, 0, 100));
  if (options.folds == 1) throw UsageError("--folds must be 0 (none) or at least 2");
  options.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0, INT64_MAX));
  options.progress = [](const std::string& line) { std::cerr << "kestrel cost-model train: " << line << "\n"; };
  const auto records = read_records(args.get_all("db"));
  const ops::Registry registry = ops::builtin_ops();
  const tuner::CrossModel model = tuner::CrossModel::train(records, registry, options);
  const std::string out = args.get("out");
  model.save(out);
  if (args.has("json")) {
    std::cout << nlohmann::json{{"model_file", out}, {"models", models_json(model.models(), false)}}.dump(2) << "\n";
    return 0;
  }
  print_models(model.models());
  std::cout << "wrote " << out << " (" << model.models().size() << (model.models().size() == 1 ? " model" : " models")
            << "; held-out: ranking of workloads left out of training, pick = best / the model's first pick)\n";
  return 0;
}

int show(int argc, char** argv) {
  Args args("kestrel cost-model show", "Prints the models of a cost model file: op, target class or family, what each\n"
                                  "trained on and its held-out ranking quality. Without a file: the model Kestrel\n"
                                  "ships (what kestrel tune --zero-shot uses by default).");
  args.positional("file", "the model file (.kcm); default: the shipped model");
  args.flag("json", "print JSON (with the feature names and trained workloads)");
  if (!args.parse(argc, argv, 3)) {
    std::cout << args.help();
    return 0;
  }
  std::string file = args.get("file");
  if (file.empty()) {
    file = frontend::shipped_cost_model_path();
    if (file.empty()) {
      throw tuner::ModelFileError("no model file given, and the cost model Kestrel ships is not at " +
                                  frontend::shipped_cost_model_places());
    }
  }
  const tuner::CrossModel model = tuner::CrossModel::load(file);
  if (args.has("json")) {
    std::cout << nlohmann::json{{"model_file", file},
                                {"file_version", tuner::kModelFileVersion},
                                {"feature_schema", tuner::kFeatureSchemaVersion},
                                {"models", models_json(model.models(), true)}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << file << ": feature schema " << tuner::kFeatureSchemaVersion << "\n";
  print_models(model.models());
  return 0;
}

int eval(int argc, char** argv) {
  Args args("kestrel cost-model eval",
            "Measures a cost model file's ranking quality on the records of the databases, every workload\n"
            "treated as unseen: top-1 / top-5 recall of the measured best, Kendall's tau, and pick (measured\n"
            "best / cost of the model's first pick). Exit status: 0; 1 for an unreadable file or database, or\n"
            "records that none of the file's models can rank; 2 usage.");
  args.option("cost-model", "FILE", "the model file (.kcm)");
  args.multi_option("db", "FILE|URI", "records database (SQLite file or PostgreSQL URI)");
  args.multi_option("op", "NAME", "only this op");
  args.flag("json", "print JSON instead of a table");
  if (!args.parse(argc, argv, 3)) {
    std::cout << args.help();
    return 0;
  }
  if (!args.has("cost-model")) throw UsageError("--cost-model is required (the model to evaluate)");
  if (!args.has("db")) throw UsageError("--db is required (the records to evaluate on)");
  const tuner::CrossModel model = tuner::CrossModel::load(args.get("cost-model"));
  const auto records = read_records(args.get_all("db"));
  const ops::Registry registry = ops::builtin_ops();
  const std::vector<std::string> only = args.get_all("op");
  nlohmann::json results = nlohmann::json::array();
  // One row per (op, class) of the records that a model of the file serves.
  struct Row {
    std::string op, cls;
    const tuner::OpModelInfo* model;
    tuner::RankingQuality quality;
  };
  std::vector<Row> rows;
  for (const auto& [op, cls] : tuner::record_classes(records, registry)) {
    if (!only.empty() && std::find(only.begin(), only.end(), op) == only.end()) continue;
    const tuner::OpModelInfo* serving = model.serving(op, cls);
    if (!serving) continue;
    tuner::RankingQuality q;
    try {
      q = tuner::evaluate(model, records, registry, op, cls);
    } catch (const std::invalid_argument& e) {
      throw tuner::ModelFileError(e.what());
    }
    if (q.workloads == 0) continue;
    rows.push_back({op, cls, serving, q});
  }
  if (rows.empty()) {
    std::string have;
    for (const auto& m : model.models()) have += (have.empty() ? "" : ", ") + m.op + "/" + m.target_class;
    throw tuner::ModelFileError("no records to evaluate on: the databases hold no workload with 2 distinct ok costs "
                                "for the model's " + have);
  }
  if (args.has("json")) {
    for (const auto& row : rows) {
      results.push_back({{"op", row.op},
                         {"target_class", row.cls},
                         {"model", row.model->target_class},
                         {"trained_on_class", std::find(row.model->trained_classes.begin(),
                                                        row.model->trained_classes.end(),
                                                        row.cls) != row.model->trained_classes.end()},
                         {"quality", quality_json(row.quality)}});
    }
    std::cout << nlohmann::json{{"model_file", args.get("cost-model")}, {"results", results}}.dump(2) << "\n";
    return 0;
  }
  std::cout << pad("OP", 18) << pad("CLASS", 7) << pad("MODEL", 7) << "WORKLOADS TOP-1  TOP-5  TAU    PICK\n";
  for (const auto& row : rows) {
    std::cout << pad(row.op, 18) << pad(row.cls, 7) << pad(row.model->target_class, 7) << quality_columns(row.quality)
              << "\n";
  }
  return 0;
}

}  // namespace

int run_cost_model(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h") {
    std::cout << kUsage;
    return argc < 3 ? 2 : 0;
  }
  const std::string action = argv[2];
  const std::string program = "kestrel cost-model " + action;
  try {
    if (action == "train") return train(argc, argv);
    if (action == "show") return show(argc, argv);
    if (action == "eval") return eval(argc, argv);
    std::cerr << "kestrel cost-model: " << unknown_action(action, {"train", "show", "eval"}) << "\n\n" << kUsage;
    return 2;
  } catch (...) {
    return report_error(program, std::current_exception());
  }
}

}  // namespace kestrel::tools
