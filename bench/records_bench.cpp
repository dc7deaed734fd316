// kestrel-bench-records: the records database on both backends (SQLite file, PostgreSQL)
// at the size of a shared team database. For each backend it bulk-loads N synthetic
// records (import_jsonl, in chunks of 100,000 lines, each one transaction), then
// measures:
//   add:        records/s of autocommitted add() calls into the loaded database (each
//               one committed, as a tuning session adds them);
//   best(task): the latency of best(BestQuery) for one task (op, workload, target), the
//               `kestrel best --op --shape --target` query, median and p99 over random
//               tasks;
//   best(all):  one best() over the whole database.
// PostgreSQL: the server given by --pg URI (its tables must be new or Kestrel's; the
// records are added to it), else one of its own started as the tests do
// (tests/support/postgres.h: initdb + pg_ctl in a temporary directory, fsync off), else
// skipped with a note when PostgreSQL is not installed.
//
//   ./build/bench/kestrel-bench-records [--quick] [--records N] [--adds N] [--queries N]
//       [--pg URI] [--backend sqlite|postgres|both]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel/records/records.h"
#include "support/postgres.h"

namespace {

using namespace kestrel;
using Clock = std::chrono::steady_clock;

struct Settings {
  std::size_t records = 1'000'000;
  std::size_t adds = 5'000;
  std::size_t queries = 200;
  std::string pg;  // a server of the user's; empty: start one
  std::string backend = "both";
};

constexpr std::size_t kPerTask = 200;  // records of one (op, workload, target)
constexpr std::size_t kChunk = 100'000;
const char* const kTargets[] = {"x86_64-linux-gnu (znver4)", "x86_64-linux-gnu (skylake)", "aarch64-linux-gnu"};

// The workload of task `task`: a distinct gemm shape.
std::string workload_of(std::size_t task) {
  return "K=" + std::to_string(64 + 16 * (task % 64)) + ",M=" + std::to_string(64 + 16 * (task / 64 % 64)) +
         ",N=" + std::to_string(64 + 16 * (task / 4096));
}

// Synthetic record `i` as a JSON line of an export: ~kPerTask records per task, some
// failed, one final round per task with the default in it.
std::string json_line(std::size_t i, std::mt19937_64& random) {
  const std::size_t task = i / kPerTask, within = i % kPerTask;
  const bool final_round = within >= kPerTask - 4;
  const bool ok = within % 10 != 3;
  const double cost = 1e-4 * (1.0 + static_cast<double>(random() % 10000) / 1000.0);
  nlohmann::json j;
  j["op"] = "gemm";
  j["workload"] = workload_of(task / 3);
  j["target"] = kTargets[task % 3];
  j["device_key"] = "local/0";
  j["device_model"] = "AMD EPYC";
  j["device"] = "cpu0";
  j["device_fingerprint"] = "x86_64-linux-gnu|AMD EPYC|16";
  j["config"] = "mc=" + std::to_string(16 * (within % 16 + 1)) + ",nc=" + std::to_string(64 * (within / 16 + 1)) +
                ",kc=" + std::to_string(within);
  j["status"] = ok ? "ok" : "wrong answer";
  j["message"] = ok ? "" : "max error 3.5 at index 17";
  j["round_seconds"] = ok ? nlohmann::json::array({cost, cost * 1.01, cost * 0.99}) : nlohmann::json::array();
  j["cost"] = ok ? nlohmann::json(cost) : nlohmann::json(nullptr);
  j["gflops"] = ok ? 1.0 / cost : 0.0;
  j["compile_ms"] = 12.5;
  j["tool_version"] = "bench";
  j["time_unix_ms"] = 1'700'000'000'000 + static_cast<std::int64_t>(i);
  j["session"] = "bench-" + std::to_string(task) + (final_round ? "-final" : "");
  j["final_measurement"] = final_round;
  j["is_default"] = within == kPerTask - 1;
  j["implementation"] = "kestrel";
  return j.dump();
}

records::Record record_to_add(std::size_t i) {
  records::Record r;
  r.op = "gemm";
  r.workload = ops::parse_pairs("K=8,M=8,N=" + std::to_string(8 + i % 500));
  r.target = *ops::TargetId::parse(kTargets[0]);
  r.device_class = {"local/0", "AMD EPYC", "x86_64-linux-gnu|AMD EPYC|16"};
  r.device = "cpu0";
  r.config = ops::parse_pairs("mc=" + std::to_string(i));
  r.round_seconds = {1e-4, 1.1e-4, 0.9e-4};
  r.cost = 1e-4;
  r.gflops = 10;
  r.compile_ms = 3;
  r.tool_version = "bench";
  r.time_unix_ms = 1'800'000'000'000 + static_cast<std::int64_t>(i);
  r.session = "bench-adds";
  return r;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(at, values.size() - 1)];
}

// Loads, adds and queries one backend at `location`; prints one block of figures.
void run(const std::string& name, const std::string& location, const Settings& s) {
  auto db = records::open_records(location);
  const std::size_t before = db->count();
  std::mt19937_64 random(17);

  auto start = Clock::now();
  double generating = 0;
  std::size_t loaded = 0;
  for (std::size_t first = 0; first < s.records; first += kChunk) {
    auto generate = Clock::now();
    std::string text;
    for (std::size_t i = first; i < std::min(s.records, first + kChunk); ++i) {
      text += json_line(i, random);
      text += '\n';
    }
    generating += seconds_since(generate);
    std::istringstream in(text);
    loaded += db->import_jsonl(in);
  }
  const double load_s = seconds_since(start) - generating;

  start = Clock::now();
  for (std::size_t i = 0; i < s.adds; ++i) db->add(record_to_add(i));
  const double add_s = seconds_since(start);

  const std::size_t tasks = (s.records + kPerTask - 1) / kPerTask;
  std::vector<double> latencies;
  std::size_t answers = 0;
  for (std::size_t q = 0; q < s.queries; ++q) {
    const std::size_t task = static_cast<std::size_t>(random() % tasks);
    records::BestQuery query;
    query.op = "gemm";
    query.workload = ops::parse_pairs(workload_of(task / 3));
    query.target = *ops::TargetId::parse(kTargets[task % 3]);
    auto t = Clock::now();
    answers += db->best(query).size();
    latencies.push_back(seconds_since(t) * 1e3);
  }
  start = Clock::now();
  const std::size_t all = db->best().size();
  const double best_all_s = seconds_since(start);

  std::printf("%s (%s)\n", name.c_str(), db->location().c_str());
  std::printf("  records:     %zu (%zu loaded, %zu there before)\n", db->count(), loaded, before);
  std::printf("  bulk load:   %.0f records/s (%zu in %.2f s, import_jsonl in chunks of %zu)\n",
              static_cast<double>(loaded) / load_s, loaded, load_s, kChunk);
  std::printf("  add():       %.0f records/s (%zu autocommitted adds in %.2f s)\n",
              static_cast<double>(s.adds) / add_s, s.adds, add_s);
  std::printf("  best(task):  median %.3f ms, p99 %.3f ms (%zu queries, %zu answers)\n", percentile(latencies, 0.5),
              percentile(latencies, 0.99), s.queries, answers);
  std::printf("  best(all):   %.2f s (%zu tasks)\n", best_all_s, all);
  std::fflush(stdout);
  if (answers != s.queries) throw std::runtime_error(name + ": a task query found no best record");
}

std::size_t positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value <= 0) throw std::invalid_argument(flag + " needs a positive number");
  return static_cast<std::size_t>(value);
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--quick") {
        s.records = 20'000;
        s.adds = 500;
        s.queries = 50;
      } else if (arg == "--records") {
        s.records = positive(arg, value());
      } else if (arg == "--adds") {
        s.adds = positive(arg, value());
      } else if (arg == "--queries") {
        s.queries = positive(arg, value());
      } else if (arg == "--pg") {
        s.pg = value();
      } else if (arg == "--backend") {
        s.backend = value();
        if (s.backend != "sqlite" && s.backend != "postgres" && s.backend != "both") {
          throw std::invalid_argument("--backend is sqlite, postgres or both");
        }
      } else if (arg == "--help" || arg == "-h") {
        std::cout << "usage: kestrel-bench-records [--quick] [--records N] [--adds N] [--queries N] [--pg URI]\n"
                     "                             [--backend sqlite|postgres|both]\n";
        return 0;
      } else {
        throw std::invalid_argument("unknown option " + arg);
      }
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "kestrel-bench-records: " << e.what() << "\n";
    return 2;
  }

  std::printf("kestrel-bench-records: %zu synthetic records (%zu per task), %zu adds, %zu task queries\n", s.records,
              kPerTask, s.adds, s.queries);
  try {
    if (s.backend != "postgres") {
      char pattern[] = "/tmp/kestrel-bench-records-XXXXXX";
      if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
      const std::string dir = pattern;
      try {
        run("sqlite", dir + "/records.db", s);
      } catch (...) {
        std::filesystem::remove_all(dir);
        throw;
      }
      std::filesystem::remove_all(dir);
    }
    if (s.backend != "sqlite") {
      if (!s.pg.empty()) {
        run("postgres", s.pg, s);
      } else if (!test::postgres_installed() && !test::postgres_required()) {
        std::printf("postgres: skipped (PostgreSQL is not installed; give --pg URI or run scripts/setup.sh)\n");
      } else {
        auto& server = test::postgres();
        run("postgres", server.create_database(), s);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "kestrel-bench-records: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
