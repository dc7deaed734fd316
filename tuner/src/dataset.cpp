// Records -> (features, cost, ok) rows for the cost model.
#include "kestrel/tuner/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <ostream>

#include "cross_model_impl.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/tuner/features.h"

namespace kestrel::tuner {
namespace {

bool same_knobs(const std::vector<ops::Knob>& knobs, const ops::Config& config) {
  if (knobs.size() != config.size()) return false;
  for (const auto& knob : knobs) {
    if (!config.contains(knob.name)) return false;
  }
  return true;
}

std::string number(double value, int digits = 9) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
  return buffer;
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

Dataset make_dataset(const ops::Op& op, const std::vector<records::Record>& records) {
  Dataset out;
  out.rows.reserve(records.size());
  for (const records::Record& r : records) {
    // A vendor library's record has no configuration of the op's space: never a sample.
    if (r.op != op.name() || r.workload.empty() || r.config.empty() || r.implementation != records::kKestrelImplementation) {
      ++out.skipped;
      continue;
    }
    Sample row;
    try {
      // Rows of one op must have the same features: the record's knobs must be the op's.
      if (!same_knobs(op.knobs(r.workload), r.config)) {
        ++out.skipped;
        continue;
      }
      row.features = feature_vector(op, r.workload, r.config);
    } catch (const std::exception&) {
      ++out.skipped;  // a workload the op refuses
      continue;
    }
    row.ok = r.ok() && std::isfinite(r.cost) && r.cost > 0;
    row.cost = row.ok ? r.cost : std::numeric_limits<double>::infinity();
    out.rows.push_back(std::move(row));
  }
  return out;
}

std::vector<std::vector<float>> Dataset::features() const {
  std::vector<std::vector<float>> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back(row.features);
  return out;
}

std::vector<double> Dataset::costs() const {
  std::vector<double> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back(row.cost);
  return out;
}

CrossTable make_cross_table(const std::vector<records::Record>& records, const ops::Registry& registry,
                            const std::vector<std::string>& only_ops, bool ok_only) {
  struct Usable {
    const records::Record* record;
    std::string target_class;
    ops::TargetTraits traits;
    std::vector<std::string> names;
    std::vector<float> features;
    std::string group;
  };
  std::vector<Usable> usable;
  CrossTable table;
  std::map<std::string, std::optional<host::Target>> targets;
  std::map<std::string, double> best;  // by group
  for (const records::Record& r : records) {
    if (!only_ops.empty() && std::find(only_ops.begin(), only_ops.end(), r.op) == only_ops.end()) continue;
    auto [it, fresh] = targets.try_emplace(r.target.to_string());
    if (fresh) it->second = host::target_of(r.target);
    const ops::Op* op = it->second ? registry.find(r.op, it->second->backend) : nullptr;
    if (!op || r.implementation != records::kKestrelImplementation || r.workload.empty() || r.config.empty()) {
      ++table.skipped;
      continue;
    }
    Usable u{&r, target_class(*it->second), it->second->traits, {}, {}, {}};
    try {
      if (!same_knobs(op->knobs(r.workload), r.config)) {
        ++table.skipped;
        continue;
      }
      u.names = cross_feature_names(*op, r.workload, r.config, u.traits);
      u.features = cross_features(*op, r.workload, r.config, u.traits);
    } catch (const std::exception&) {
      ++table.skipped;
      continue;
    }
    u.group = r.op + "\x1e" + ops::format_params(r.workload) + "\x1e" + r.target.to_string() + "\x1e" + r.device_class.key +
              "\x1f" + r.device_class.model + "\x1f" + r.device_class.fingerprint;
    const bool ok = r.ok() && std::isfinite(r.cost) && r.cost > 0;
    if (ok) {
      auto [b, added] = best.try_emplace(u.group, r.cost);
      if (!added) b->second = std::min(b->second, r.cost);
    } else if (ok_only) {
      continue;
    }
    usable.push_back(std::move(u));
  }

  table.columns = {"op", "workload", "target", "target_class", "device_key", "device_model", "config",
                   "status", "cost_s", "gflops", "relative", "final"};
  std::map<std::string, std::size_t> feature_column;
  for (const Usable& u : usable) {
    for (const auto& name : u.names) {
      if (feature_column.try_emplace(name, table.columns.size()).second) table.columns.push_back(name);
    }
  }
  const std::size_t trait_begin = table.columns.size();
  for (const char* trait : {"trait.isa", "trait.vector_floats", "trait.vector_registers", "trait.fma",
                            "trait.l1d_bytes", "trait.l2_bytes", "trait.l3_bytes", "trait.cores"}) {
    table.columns.emplace_back(trait);
  }
  for (const Usable& u : usable) {
    const records::Record& r = *u.record;
    const bool ok = r.ok() && std::isfinite(r.cost) && r.cost > 0;
    std::vector<std::string> row(table.columns.size());
    row[0] = r.op;
    row[1] = ops::format_params(r.workload);
    row[2] = r.target.to_string();
    row[3] = u.target_class;
    row[4] = r.device_class.key;
    row[5] = r.device_class.model;
    row[6] = ops::format_config(r.config);
    row[7] = std::string(kernel::to_string(r.status));
    row[8] = ok ? number(r.cost) : "";
    row[9] = number(r.gflops, 6);
    row[10] = ok ? number(best.at(u.group) / r.cost, 6) : "0";
    row[11] = r.final_measurement ? "1" : "0";
    for (std::size_t i = 0; i < u.names.size(); ++i) row[feature_column.at(u.names[i])] = number(u.features[i], 7);
    const ops::TargetTraits& t = u.traits;
    row[trait_begin + 0] = std::string(ops::to_string(t.isa));
    row[trait_begin + 1] = std::to_string(t.vector_floats);
    row[trait_begin + 2] = std::to_string(t.vector_registers);
    row[trait_begin + 3] = t.fma ? "1" : "0";
    row[trait_begin + 4] = std::to_string(t.l1d_bytes);
    row[trait_begin + 5] = std::to_string(t.l2_bytes);
    row[trait_begin + 6] = std::to_string(t.l3_bytes);
    row[trait_begin + 7] = std::to_string(t.cores);
    table.rows.push_back(std::move(row));
  }
  return table;
}

void write_csv(const CrossTable& table, std::ostream& out) {
  auto line = [&out](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) out << (i ? "," : "") << csv_cell(cells[i]);
    out << "\n";
  };
  line(table.columns);
  for (const auto& row : table.rows) line(row);
}

}  // namespace kestrel::tuner
