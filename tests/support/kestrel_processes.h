// Test support: the real kestrel binaries as processes (tracker, devices, query).
#pragma once

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/process.h"

namespace kestrel::test::e2e {

using test::Process;
using test::TempDir;

inline const std::string kKestrel = KESTREL_BIN;
inline const std::string kDevice = KESTREL_DEVICE_BIN;

// A tracker process on a free port.
struct TrackerProcess {
  TrackerProcess(const TempDir& dir, std::vector<std::string> extra = {}, std::uint16_t fixed_port = 0,
                 const std::string& log_name = "tracker.log") {
    std::string port_file = dir.file("port-" + log_name);
    std::remove(port_file.c_str());
    std::vector<std::string> argv = {kKestrel, "tracker", "--port", std::to_string(fixed_port), "--port-file",
                                     port_file};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<Process>(argv, dir.file(log_name));
    REQUIRE(test::wait_for([&] { return !test::read_text(port_file).empty() || !process->running(); }));
    INFO(process->log());
    REQUIRE(process->running());
    port = static_cast<std::uint16_t>(std::stoi(test::read_text(port_file)));
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  std::unique_ptr<Process> process;
  std::uint16_t port = 0;
};

inline std::unique_ptr<Process> start_device(const TempDir& dir, const TrackerProcess& tracker, const std::string& key,
                                      const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kDevice, "--tracker", tracker.address(), "--key", key, "--name", name,
                                   "--max-backoff-ms", "300"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, dir.file("device-" + name + ".log"));
}

// `kestrel query --json`, parsed; null json on failure.
inline nlohmann::json query(const TempDir& dir, const TrackerProcess& tracker, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kKestrel, "query", "--tracker", tracker.address(), "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::string output;
  if (test::run_command(argv, output, dir.file("query.out")) != 0) return nullptr;
  return nlohmann::json::parse(output, nullptr, false);
}

inline std::size_t device_count(const nlohmann::json& summary) {
  return summary.is_object() ? summary["devices"].size() : 0;
}

inline std::string write_token(const TempDir& dir, const std::string& name, const std::string& secret) {
  std::string path = dir.file(name);
  std::ofstream(path) << secret << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}


}  // namespace kestrel::test::e2e
