// kestrel: the host-side command. Dispatches to subcommands.
#include <cstring>
#include <iostream>

#include "commands.h"
#include "kestrel/rpc/handshake.h"

namespace {
constexpr const char* kUsage =
    "usage: kestrel <command> [options]\n"
    "\n"
    "Kestrel tunes deep-learning kernels on real devices.\n"
    "\n"
    "commands:\n"
    "  tracker   run a tracker: the broker devices register with and clients lease from\n"
    "  query     show a tracker's pool: keys, free/busy/queued, devices and lease holders\n"
    "  ops       list the built-in ops, their parameters and knob spaces\n"
    "  profile   compile one kernel configuration and time it on a device\n"
    "  tune      tune a workload on a device pool (or this machine) and record every result\n"
    "  best      print the best recorded configuration per workload and target\n"
    "  records   export or import records as JSON lines\n"
    "  bench     time the best kernels against OpenBLAS and oneDNN, side by side\n"
    "  version   print the version and protocol version\n"
    "\n"
    "`kestrel <command> --help` explains each command.\n";
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  if (command == "tracker") return kestrel::tools::run_tracker(argc, argv);
  if (command == "query") return kestrel::tools::run_query(argc, argv);
  if (command == "ops") return kestrel::tools::run_ops(argc, argv);
  if (command == "profile") return kestrel::tools::run_profile(argc, argv);
  if (command == "tune") return kestrel::tools::run_tune(argc, argv);
  if (command == "best") return kestrel::tools::run_best(argc, argv);
  if (command == "records") return kestrel::tools::run_records(argc, argv);
  if (command == "bench") return kestrel::tools::run_bench(argc, argv);
  if (command == "version" || command == "--version") {
    std::cout << "kestrel " << kestrel::software_version() << " (protocol " << kestrel::rpc::protocol_version()
              << ")\n";
    return 0;
  }
  std::cerr << "kestrel: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
