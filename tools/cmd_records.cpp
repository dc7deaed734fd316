// `kestrel best` and `kestrel records export|import|migrate`: reading the records
// database (an SQLite file or a PostgreSQL URI). The read-only commands (best, export,
// migrate's source) open it with OpenMode::existing: a mistyped path is an error, never a
// new empty database.
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/records/records.h"

namespace kestrel::tools {

int run_best(int argc, char** argv) {
  Args args("kestrel best",
            "Prints the best configuration recorded for every workload, target and device class (pool key and\n"
            "hardware model). Never one that measured slower than the op's default configuration in the same\n"
            "final re-measurement. Vendor libraries timed beside Kestrel's kernels (kestrel tune --vendors) compete:\n"
            "when one was fastest, its row names it and Kestrel's own best beside it.\n"
            "With --op and --shape (and --target), only that task, read from the database's index: quick on a\n"
            "large shared database.");
  args.option("db", "FILE|URI", "records database: an SQLite file or postgresql://user@host/db", "kestrel.db");
  args.option("op", "NAME", "only this op");
  args.option("shape", "SHAPE", "only this workload of --op, e.g. 512x512x512 or M=512,N=512,K=512");
  args.option("target", "TARGET", "only this target, as the TARGET column shows it, e.g. 'x86_64-linux-gnu (znver4)'");
  args.flag("json", "print JSON instead of a table");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    std::string path = args.get("db", "kestrel.db");
    records::BestQuery query;
    if (args.has("op")) query.op = args.get("op");
    if (args.has("shape")) {
      if (!args.has("op")) throw UsageError("--shape needs --op (the op whose workload it is)");
      ops::Registry registry = ops::builtin_ops();
      query.workload = ops::parse_params(registry.get(args.get("op")), args.get("shape"));
    }
    if (args.has("target")) {
      query.target = ops::TargetId::parse(args.get("target"));
      if (!query.target) throw UsageError("--target '" + args.get("target") + "' is not a target such as x86_64-linux-gnu (znver4)");
    }
    auto db = records::open_records(path, records::OpenMode::existing);
    std::vector<records::Best> best = db->best(query);
    if (args.has("json")) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& b : best) {
        nlohmann::json device_class = {
            {"key", b.device_class.key}, {"model", b.device_class.model}, {"fingerprint", b.device_class.fingerprint}};
        nlohmann::json one = {{"op", b.op},
                              {"workload", ops::format_params(b.workload)},
                              {"target", b.target.to_string()},
                              {"device_class", device_class},
                              {"config", ops::format_config(b.record.config)},
                              {"gflops", b.record.gflops},
                              {"median_s", b.record.cost},
                              {"trials", b.trials},
                              {"device", b.record.device},
                              {"final", b.record.final_measurement},
                              {"default_is_best", b.default_is_best},
                              {"implementation", b.record.implementation}};
        if (b.default_record) one["default_median_s"] = b.default_record->cost;
        if (b.own_record) {
          one["kestrel"] = {{"config", ops::format_config(b.own_record->config)},
                            {"gflops", b.own_record->gflops},
                            {"median_s", b.own_record->cost}};
        }
        out.push_back(std::move(one));
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (best.empty()) {
      std::cout << "no successful records in " << db->location() << "\n";
      return 0;
    }
    std::cout << std::left << std::setw(8) << "OP" << std::setw(44) << "WORKLOAD" << std::setw(30) << "TARGET"
              << std::setw(40) << "DEVICE CLASS" << std::setw(10) << "GFLOP/s" << std::setw(11) << "MEDIAN ms"
              << std::setw(8) << "TRIALS" << std::setw(10) << "IMPL" << "CONFIG\n";
    for (const auto& b : best) {
      std::string device_class = b.device_class.key;
      if (!b.device_class.model.empty()) device_class += " (" + b.device_class.model + ")";
      std::string config = ops::format_config(b.record.config);
      if (b.default_is_best) config += " (the default)";
      if (b.record.implementation != records::kKestrelImplementation) {
        char own[64] = "no ok record";
        if (b.own_record) std::snprintf(own, sizeof own, "%.1f GFLOP/s", b.own_record->gflops);
        config = "(vendor library) kestrel's best: " +
                 (b.own_record ? ops::format_config(b.own_record->config) + ", " : std::string()) + own;
      }
      std::cout << std::left << std::setw(8) << b.op << std::setw(44) << ops::format_params(b.workload)
                << std::setw(30) << b.target.to_string() << std::setw(40) << device_class << std::setw(10) << std::fixed
                << std::setprecision(1) << b.record.gflops << std::setw(11) << std::setprecision(3)
                << b.record.cost * 1e3 << std::setw(8) << b.trials << std::setw(10) << b.record.implementation
                << config << "\n";
    }
    return 0;
  } catch (...) {
    return report_error("kestrel best", std::current_exception());
  }
}

namespace {

const char* kRecordsUsage =
    "usage: kestrel records export [--db DB] [--out FILE]\n"
    "       kestrel records import [--db DB] FILE.jsonl\n"
    "       kestrel records migrate --from DB --to DB\n"
    "\n"
    "Writes every record as one JSON object per line, or reads such a file into the\n"
    "database (records already present are skipped). migrate copies every record of one\n"
    "database into another, in either direction between SQLite and PostgreSQL, skipping\n"
    "those already there (a rerun copies 0); the destination is created if missing.\n"
    "DB: an SQLite file (default kestrel.db) or a URI postgresql://user:password@host:port/db.\n"
    "`kestrel records ACTION --help` explains each action.\n";

const char* kDbHelp = "records database: an SQLite file or postgresql://user:password@host:port/db";

int export_records(int argc, char** argv) {
  Args args("kestrel records export",
            "Writes every record of a database as one JSON object per line, to --out or to stdout: a backup,\n"
            "or records to carry into another database (kestrel records import). The database is only read: a\n"
            "mistyped --db is an error, never a new empty database, and then no output file is created.");
  args.option("db", "FILE|URI", kDbHelp, "kestrel.db");
  args.option("o,out", "FILE", "the JSON-lines file to write (- or none: stdout)");
  if (!args.parse(argc, argv, 3)) {
    std::cout << args.help();
    return 0;
  }
  const std::string file = args.get("out");
  // Opened before the output file is created: a mistyped --db leaves no empty export.
  auto db = records::open_records(args.get("db", "kestrel.db"), records::OpenMode::existing);
  if (file.empty() || file == "-") {
    db->export_jsonl(std::cout);
  } else {
    std::ofstream out(file);
    if (!out) throw UsageError("cannot write '" + file + "'");
    db->export_jsonl(out);
    std::cerr << "exported " << db->count() << " records to " << file << "\n";
  }
  return 0;
}

int import_records(int argc, char** argv) {
  Args args("kestrel records import",
            "Reads a JSON-lines file (as kestrel records export writes it) into a database, created if missing.\n"
            "Records already there (same session, configuration and time) are skipped, so importing a file twice\n"
            "adds nothing the second time. A malformed line refuses the whole file, naming the line.");
  args.option("db", "FILE|URI", kDbHelp, "kestrel.db");
  args.positional("file", "the JSON-lines file to read (FILE.jsonl)");
  if (!args.parse(argc, argv, 3)) {
    std::cout << args.help();
    return 0;
  }
  if (!args.has("file")) throw UsageError("import needs a FILE.jsonl");
  const std::string file = args.get("file");
  std::ifstream in(file);
  if (!in) throw UsageError("cannot read '" + file + "'");
  auto db = records::open_records(args.get("db", "kestrel.db"));
  std::size_t added = db->import_jsonl(in);
  std::cout << "imported " << added << " records into " << db->location() << " (" << db->count() << " in all)\n";
  return 0;
}

int migrate_records(int argc, char** argv) {
  Args args("kestrel records migrate",
            "Copies every record of one database into another, in either direction between SQLite and\n"
            "PostgreSQL, skipping those already there (a rerun copies 0). The source is only read; the\n"
            "destination is created if missing.");
  args.option("from", "FILE|URI", "the database to copy from (an SQLite file or a PostgreSQL URI)");
  args.option("to", "FILE|URI", "the database to copy into");
  if (!args.parse(argc, argv, 3)) {
    std::cout << args.help();
    return 0;
  }
  if (!args.has("from") || !args.has("to")) throw UsageError("migrate needs --from DB and --to DB");
  auto source = records::open_records(args.get("from"), records::OpenMode::existing);  // before the destination
  auto destination = records::open_records(args.get("to"));
  std::stringstream lines;
  source->export_jsonl(lines);
  std::size_t copied = destination->import_jsonl(lines);
  std::cout << "copied " << copied << " records from " << source->location() << " to " << destination->location()
            << " (" << destination->count() << " in all)\n";
  return 0;
}

}  // namespace

int run_records(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h") {
    std::cout << kRecordsUsage;
    return argc < 3 ? 2 : 0;
  }
  const std::string action = argv[2];
  const std::string program = "kestrel records " + action;
  try {
    if (action == "export") return export_records(argc, argv);
    if (action == "import") return import_records(argc, argv);
    if (action == "migrate") return migrate_records(argc, argv);
    std::cerr << "kestrel records: " << unknown_action(action, {"export", "import", "migrate"}) << "\n\n"
              << kRecordsUsage;
    return 2;
  } catch (...) {
    return report_error(program, std::current_exception());
  }
}

}  // namespace kestrel::tools
