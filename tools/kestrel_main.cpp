// kestrel: the host-side command. Dispatches to subcommands.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "kestrel/base/suggest.h"
#include "kestrel/host/version.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

int run_version(int, char**) {
  std::cout << kestrel::host::version_text() << "\n";
  return 0;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"tracker", "run a tracker: the broker devices register with and clients lease from", kestrel::tools::run_tracker},
      {"query", "show a tracker's pool: keys, free/busy/queued, devices and lease holders", kestrel::tools::run_query},
      {"ops", "list the built-in ops, their parameters and knob spaces", kestrel::tools::run_ops},
      {"profile", "compile one kernel configuration and time it on a device", kestrel::tools::run_profile},
      {"tune", "tune a workload on a device pool (or this machine) and record every result", kestrel::tools::run_tune},
      {"export", "write a kernel library for a target from a model's tuned tasks (header, .so, .a)",
       kestrel::tools::run_export},
      {"best", "print the best recorded configuration per workload, target and device class", kestrel::tools::run_best},
      {"records", "export, import or migrate records (JSON lines; SQLite <-> PostgreSQL)", kestrel::tools::run_records},
      {"bench", "time the best kernels against OpenBLAS and oneDNN, side by side", kestrel::tools::run_bench},
      {"run", "run a model with Kestrel's kernels and check it against ONNX Runtime", kestrel::tools::run_model},
      {"cost-model", "train, show or evaluate the cross-workload (zero-shot) cost model", kestrel::tools::run_cost_model},
      {"dataset", "export features and measured costs of records as CSV or Parquet", kestrel::tools::run_dataset},
      {"plot", "draw best-so-far curves (GFLOP/s against trials or time) from records as SVG or PNG",
       kestrel::tools::run_plot},
      {"tasks", "list the tunable tasks of an ONNX model and what stays untuned", kestrel::tools::run_tasks},
      {"datagen", "tune a family of workloads into a database to train a cost model on", kestrel::tools::run_datagen},
      {"version", "print the version and protocol version", run_version},
  };
  return list;
}

std::string usage() {
  std::string out =
      "usage: kestrel <command> [options]\n"
      "\n"
      "Kestrel tunes deep-learning kernels on real devices.\n"
      "\n"
      "commands:\n";
  for (const Command& c : commands()) {
    std::string name = c.name;
    out += "  " + name + std::string(12 - name.size(), ' ') + c.summary + "\n";
  }
  out += "\n`kestrel <command> --help` explains each command; `kestrel --version` prints the version.\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  if (command == "--version") return run_version(argc, argv);
  if (command == "model") command = "cost-model";  // its earlier name (an ONNX model is --model)
  std::vector<std::string> names;
  for (const Command& c : commands()) {
    if (command == c.name) return c.run(argc, argv);
    names.emplace_back(c.name);
  }
  std::cerr << "kestrel: unknown command '" << command << "'" << kestrel::did_you_mean(command, names)
            << "\n(see kestrel --help)\n";
  return 2;
}
