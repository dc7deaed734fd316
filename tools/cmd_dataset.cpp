// `kestrel dataset`: features and measured costs of records across workloads, ops and
// devices, as CSV or (through pyarrow, scripts/to_parquet.py) Parquet, for training and
// studying models outside Kestrel. Written atomically: a temporary file renamed over the
// output, so an error leaves nothing.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/deploy/python_tool.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/dataset.h"
#include "kestrel/records/records.h"

namespace kestrel::tools {
namespace {

namespace fs = std::filesystem;

// A failure after the arguments were accepted (exit 1).
struct DatasetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// Runs `command`, its stderr captured; the exit status, and the captured text in `err`.
int run_captured(const std::string& command, const fs::path& err_file, std::string& err) {
  const int status = std::system((command + " 2> " + deploy::shell_quote(err_file.string())).c_str());
  std::ifstream in(err_file);
  err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  std::error_code ignored;
  fs::remove(err_file, ignored);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

int run_dataset(int argc, char** argv) {
  Args args("kestrel dataset",
            "Writes one row per usable record of the databases (Kestrel's own kernels of known ops and\n"
            "targets): op, workload, target, target_class, device_key, device_model, config, status,\n"
            "cost_s (empty unless ok), gflops, relative (the best ok cost of the record's op, workload,\n"
            "target and device class / its cost; 0 unless ok), final, then the cross-workload model's\n"
            "features (as the tuner computes them; empty where an op has no such feature) and the target's\n"
            "traits (trait.*). CSV, or Parquet for an output ending in .parquet (pyarrow, which\n"
            "scripts/setup-python.sh installs). Exit status: 0; 1 when a database cannot be read, no record\n"
            "is usable or the output cannot be written (nothing is written); 2 usage.");
  args.multi_option("db", "FILE|URI", "records database (SQLite file or PostgreSQL URI)");
  args.option("o,out", "FILE", "the output: .csv or .parquet");
  args.multi_option("op", "NAME", "only this op");
  args.flag("ok-only", "only records that ran correctly");
  args.option("python", "PATH", "Python with pyarrow, for .parquet (default: $KESTREL_PYTHON, .venv, python3)");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    if (!args.has("db")) throw UsageError("--db is required (the records to export)");
    if (!args.has("out")) throw UsageError("-o is required (the .csv or .parquet file to write)");
    const std::string out = args.get("out");
    const bool parquet = ends_with(out, ".parquet");
    if (!parquet && !ends_with(out, ".csv")) throw UsageError("-o must end in .csv or .parquet, got '" + out + "'");

    std::vector<records::Record> records;
    for (const std::string& path : args.get_all("db")) {
      auto db = records::open_records(path, records::OpenMode::existing);
      auto more = db->all();
      records.insert(records.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
    const ops::Registry registry = ops::builtin_ops();
    const tuner::CrossTable table = tuner::make_cross_table(records, registry, args.get_all("op"), args.has("ok-only"));
    if (table.rows.empty()) {
      throw DatasetError("no usable records in the databases (" + std::to_string(records.size()) + " records, " +
                         std::to_string(table.skipped) +
                         " of vendor libraries, unknown ops or targets, or knobs the op no longer has)" +
                         (args.has("op") || args.has("ok-only") ? " with the --op / --ok-only filters" : "") +
                         ": nothing written");
    }

    std::string python;
    if (parquet) {
      python = deploy::find_python(args.has("python") ? std::optional(args.get("python")) : std::nullopt);
      std::string err;
      const int code = run_captured(deploy::shell_quote(python) + " -c 'import pyarrow.parquet, pyarrow.csv' > /dev/null",
                                    fs::temp_directory_path() / ("kestrel-dataset-" + std::to_string(::getpid())), err);
      if (code != 0) {
        throw DatasetError(python + (code == 127 ? " was not found" : code == 126 ? " cannot be run" : " cannot import pyarrow") +
                           ": .parquet needs pyarrow (install it with scripts/setup-python.sh or give --python a "
                           "Python that has it); nothing written");
      }
    }

    const fs::path target(out);
    const std::string stem = "." + target.filename().string() + ".tmp" + std::to_string(::getpid());
    const fs::path csv_tmp = target.parent_path() / (stem + ".csv");
    const fs::path parquet_tmp = target.parent_path() / (stem + ".parquet");
    auto cleanup = [&] {
      std::error_code ignored;
      fs::remove(csv_tmp, ignored);
      fs::remove(parquet_tmp, ignored);
    };
    {
      std::ofstream file(csv_tmp, std::ios::binary | std::ios::trunc);
      if (file) tuner::write_csv(table, file);
      file.flush();
      if (!file) {
        cleanup();
        throw DatasetError("cannot write '" + out + "': " + std::strerror(errno));
      }
    }
    fs::path written = csv_tmp;
    if (parquet) {
      const fs::path script = fs::path(KESTREL_SOURCE_DIR) / "scripts" / "to_parquet.py";
      std::string err;
      const int code = run_captured(deploy::shell_quote(python) + " " + deploy::shell_quote(script.string()) + " " +
                                        deploy::shell_quote(csv_tmp.string()) + " " + deploy::shell_quote(parquet_tmp.string()),
                                    parquet_tmp.string() + ".err", err);
      if (code != 0) {
        cleanup();
        throw DatasetError("cannot write '" + out + "': " + script.string() + " failed" +
                           (err.empty() ? "" : ": " + err.substr(err.rfind('\n') == std::string::npos ? 0 : err.rfind('\n') + 1)));
      }
      written = parquet_tmp;
    }
    std::error_code ec;
    fs::rename(written, target, ec);
    if (ec) {
      cleanup();
      throw DatasetError("cannot write '" + out + "': " + ec.message());
    }
    cleanup();
    std::cerr << "wrote " << table.rows.size() << " rows of " << table.columns.size() << " columns to " << out;
    if (table.skipped) std::cerr << " (" << table.skipped << " records skipped: not usable)";
    std::cerr << "\n";
    return 0;
  } catch (...) {
    return report_error("kestrel dataset", std::current_exception());
  }
}

}  // namespace kestrel::tools
