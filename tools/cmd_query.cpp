// `kestrel query`: prints a tracker's pool as a table or as JSON.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "measure_args.h"
#include "report_error.h"
#include "commands.h"
#include "kestrel/base/log.h"
#include "kestrel/frontend/tracker_query.h"
#include "kestrel/host/summary_json.h"
#include "kestrel/rpc/tracker_client.h"

namespace kestrel::tools {
namespace {

std::string human_bytes(std::uint64_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (bytes >= (1ull << 30)) out << static_cast<double>(bytes) / (1ull << 30) << " GiB";
  else if (bytes >= (1ull << 20)) out << static_cast<double>(bytes) / (1ull << 20) << " MiB";
  else out << static_cast<double>(bytes) / (1ull << 10) << " KiB";
  return out.str();
}

std::string human_duration(std::uint64_t ms) {
  std::uint64_t s = ms / 1000;
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + std::to_string((s % 3600) / 60) + "m";
}

// Prints rows as left-aligned columns separated by two spaces.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

void print_summary(const rpc::TrackerSummary& s, const std::string& address) {
  std::cout << "tracker " << address << "  version " << s.tracker_version << "  up " << human_duration(s.uptime_ms)
            << "  clients " << s.clients << "\n\n";
  if (s.keys.empty()) {
    std::cout << "no devices registered and no requests queued\n";
    return;
  }
  std::vector<std::vector<std::string>> keys = {{"KEY", "FREE", "BUSY", "QUEUED"}};
  for (const auto& k : s.keys) {
    keys.push_back({k.key, std::to_string(k.free), std::to_string(k.busy), std::to_string(k.queued)});
  }
  print_table(std::cout, keys);
  if (s.devices.empty()) return;
  std::cout << "\n";
  std::vector<std::vector<std::string>> devices = {
      {"DEVICE", "KEY", "STATE", "TRIPLE", "CORES", "MEMORY", "CPU", "ADDRESS", "UP", "LEASE HOLDER"}};
  for (const auto& d : s.devices) {
    devices.push_back({d.info.name, d.key, d.busy ? "busy" : "free", d.info.triple, std::to_string(d.info.cores),
                       human_bytes(d.info.memory_bytes), d.info.cpu_model, d.address, human_duration(d.connected_ms),
                       d.busy ? d.lease_holder : "-"});
  }
  print_table(std::cout, devices);
  std::vector<std::vector<std::string>> gpus = {
      {"DEVICE", "BACKEND", "#", "GPU", "VERSION", "UNITS", "MAX GROUP", "SHARED", "MEMORY"}};
  for (const auto& d : s.devices) {
    for (const auto& g : d.info.gpus) {
      gpus.push_back({d.info.name, g.backend, std::to_string(g.index), g.name, g.version,
                      std::to_string(g.compute_units), std::to_string(g.max_threads_per_group),
                      human_bytes(g.max_shared_bytes), human_bytes(g.memory_bytes)});
    }
  }
  if (gpus.size() > 1) {
    std::cout << "\n";
    print_table(std::cout, gpus);
  }
}

}  // namespace

int run_query(int argc, char** argv) {
  Args args("kestrel query", "Shows a tracker's pool: per key the free, busy and queued counts, then every device\n"
                             "with its capabilities and the holder of its lease.");
  declare(args, frontend::query_option_specs());
  args.flag("json", "print JSON instead of tables (for scripts)");
  args.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
  try {
    if (!args.parse(argc, argv, 2)) {
      std::cout << args.help();
      return 0;
    }
    set_log_level(args, "warn");
    ArgsSource source(args);
    std::optional<rpc::Token> token;
    if (args.has("token-file")) token = rpc::Token::from_file(args.get("token-file"));
    const frontend::QueryOptions query = frontend::query_options(source, std::move(token), "kestrel query");
    const rpc::TrackerSummary summary = frontend::query_tracker(query.tracker, query.client, query.timeout);
    if (args.has("json")) {
      std::cout << host::to_json(summary, query.tracker.to_string()).dump(2) << "\n";
    } else {
      print_summary(summary, query.tracker.to_string());
    }
    return 0;
  } catch (...) {
    return report_error("kestrel query", std::current_exception());
  }
}

}  // namespace kestrel::tools
