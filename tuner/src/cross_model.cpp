// The cross-workload cost model: target classes, cross features, training with
// leave-workloads-out folds, the held-out ranking quality, scoring. The .kcm file is in
// kcm_file.cpp.
//
// Training data: each usable record becomes a row of cross_features in the ranking group
// of its (workload, target, device class): a pairwise ranking only compares rows of one
// group, so costs of different shapes and machines never meet. A configuration measured
// more than once in a group (resumed sessions, the final re-measurement round) is one
// row: the median of its final re-measurements when there are any (more repeats,
// interleaved), else the median of its ok measurements; it counts as failed only when no
// measurement of it was ok. Repeats would otherwise weigh a configuration by how often
// the search revisited it and put pairs of equal configurations in the ranking.
//
// Booster parameters (cross_params) were chosen on held-out quality of records of many
// workloads measured on an AVX2 EPYC (the comment there has the numbers).
#include "kestrel/base/stats.h"
#include "kestrel/tuner/cross_model.h"

#include "kestrel/tuner/evaluator.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>

#include "cross_model_impl.h"
#include "kestrel/tuner/features.h"

namespace kestrel::tuner {
namespace {

bool ends_with(std::string_view text, std::string_view tail) {
  return text.size() >= tail.size() && text.substr(text.size() - tail.size()) == tail;
}

// The op's named features followed by the cross-workload ones, unsquashed.
std::vector<std::pair<std::string, double>> named_cross_features(const ops::Op& op, const ops::Params& workload,
                                                                 const ops::Config& config,
                                                                 const ops::TargetTraits& target) {
  auto out = op.features(workload, config);
  const std::size_t own = out.size();
  // Footprints against the caches: what decides whether a tile stays in a cache level is
  // its share of that level, on any machine. A target without an L3 gets its L2 as the
  // last level.
  const double l1 = static_cast<double>(std::max<std::int64_t>(target.l1d_bytes, 1));
  const double l2 = static_cast<double>(std::max<std::int64_t>(target.l2_bytes, 1));
  const double l3 = target.l3_bytes > 0 ? static_cast<double>(target.l3_bytes) : l2;
  for (std::size_t i = 0; i < own; ++i) {
    const auto [name, value] = out[i];
    if (!ends_with(name, "_bytes")) continue;
    out.emplace_back("cross." + name + "/l1d", value / l1);
    out.emplace_back("cross." + name + "/l2", value / l2);
    out.emplace_back("cross." + name + "/l3", value / l3);
  }
  // The vector register file, and the op's vector length (a knob "vec" or a layout's
  // "block") in registers of this target.
  const double lanes = config.contains("vec")     ? static_cast<double>(config.at("vec"))
                       : workload.contains("block") ? static_cast<double>(workload.at("block"))
                                                    : 0.0;
  out.emplace_back("target.vector_floats", target.vector_floats);
  out.emplace_back("target.vector_registers", target.vector_registers);
  out.emplace_back("target.fma", target.fma ? 1.0 : 0.0);
  out.emplace_back("cross.vector_lanes/vector_floats", lanes / std::max(target.vector_floats, 1));
  // The ops count register pressure in vectors of their own lanes against a budget of 32
  // registers (kRegisterBudget); on this target such a vector takes registers_per_vector
  // registers, out of vector_registers. Above 1 the micro-kernel spills, whatever the
  // class: the feature a model trained on AVX-512's 32 x 16 floats can carry to AVX2's
  // 16 x 8.
  const double per_vector = lanes > 0 ? target.registers_per_vector(static_cast<std::int64_t>(lanes)) : 1.0;
  const double registers = static_cast<double>(std::max(target.vector_registers, 1));
  for (std::size_t i = 0; i < own; ++i) {
    const auto [name, value] = out[i];
    if (!ends_with(name, "register_share") && !ends_with(name, "accumulator_share")) continue;
    out.emplace_back("cross." + name + "/registers", value * 32.0 * per_vector / registers);
  }
  // The absolute forms of what now has a relative one leave: the vector length in floats
  // (knob.vec, param.block, *vector_width_share: cross.vector_lanes/vector_floats), the
  // register shares against a fixed 32 (their /registers forms) and footprints in bytes
  // (their cache shares). Within one class each is its relative form times a constant,
  // so no ranking loses anything; across classes only the relative form means the same,
  // and a model trained on one class cannot learn a threshold that holds on its register
  // file and caches alone (vec=16 is one register on AVX-512 and two on AVX2).
  std::erase_if(out, [](const std::pair<std::string, double>& f) {
    const std::string& name = f.first;
    if (name.starts_with("cross.")) return false;
    return name == "knob.vec" || name == "param.block" || ends_with(name, "vector_width_share") ||
           ends_with(name, "register_share") || ends_with(name, "accumulator_share") || ends_with(name, "_bytes");
  });
  return out;
}

std::string device_class_key(const records::DeviceClass& c) { return c.key + "\x1f" + c.model + "\x1f" + c.fingerprint; }

bool same_knobs(const std::vector<ops::Knob>& knobs, const ops::Config& config) {
  if (knobs.size() != config.size()) return false;
  for (const auto& knob : knobs) {
    if (!config.contains(knob.name)) return false;
  }
  return true;
}

// Kendall's tau-b between two orders of the same items.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = i + 1; j < a.size(); ++j) {
      const double da = a[i] - a[j], db = b[i] - b[j];
      if (da == 0 && db == 0) continue;
      if (da == 0) {
        ++ties_a;
      } else if (db == 0) {
        ++ties_b;
      } else if ((da > 0) == (db > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  }
  const double denominator = std::sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
  return denominator > 0 ? (concordant - discordant) / denominator : 0.0;
}

}  // namespace

// ---- target classes -------------------------------------------------------------------

std::string target_class(const host::Target& target) {
  if (target.backend == ops::Backend::cuda) return "cuda";
  if (target.backend == ops::Backend::opencl) return "opencl";
  return std::string(ops::to_string(target.traits.isa));
}

namespace detail {

ops::Backend backend_of_class(std::string_view target_class) {
  if (target_class == "cuda") return ops::Backend::cuda;
  if (target_class == "opencl") return ops::Backend::opencl;
  return ops::Backend::cpu;
}

ops::TargetTraits traits_of_class(std::string_view target_class) {
  for (ops::Isa isa : {ops::Isa::scalar, ops::Isa::sse, ops::Isa::avx2, ops::Isa::avx512, ops::Isa::neon,
                       ops::Isa::neon32}) {
    if (ops::to_string(isa) == target_class) return ops::TargetTraits::of(isa);
  }
  return ops::TargetTraits{};
}

}  // namespace detail

std::string class_family(std::string_view cls) {
  if (cls == "sse" || cls == "avx2" || cls == "avx512") return "x86";
  if (cls == "neon" || cls == "neon32") return "arm";
  return {};
}

ops::TargetTraits model_traits(const host::Target& target) {
  if (target.is_gpu()) return target.traits;
  const auto parsed = host::target_of(target.id());
  return parsed ? parsed->traits : target.traits;
}

std::string target_class(const ops::TargetId& record_target) {
  const auto target = host::target_of(record_target);
  return target ? target_class(*target) : std::string();
}

ops::TargetTraits traits_of_record_target(const ops::TargetId& record_target) {
  const auto target = host::target_of(record_target);
  if (!target) throw std::invalid_argument("'" + record_target.to_string() + "' names no target kestrel knows");
  return target->traits;
}

// ---- features -------------------------------------------------------------------------

std::vector<float> cross_features(const ops::Op& op, const ops::Params& workload, const ops::Config& config,
                                  const ops::TargetTraits& target) {
  auto named = named_cross_features(op, workload, config, target);
  std::vector<float> out;
  out.reserve(named.size());
  for (const auto& entry : named) out.push_back(squash_feature(entry.second));
  return out;
}

std::vector<std::string> cross_feature_names(const ops::Op& op, const ops::Params& workload,
                                             const ops::Config& config, const ops::TargetTraits& target) {
  auto named = named_cross_features(op, workload, config, target);
  std::vector<std::string> out;
  out.reserve(named.size());
  for (auto& entry : named) out.push_back(std::move(entry.first));
  return out;
}

// ---- training data --------------------------------------------------------------------

namespace detail {

std::map<std::pair<std::string, std::string>, OpClassData> collect(const std::vector<records::Record>& records,
                                                                   const ops::Registry& registry,
                                                                   const std::vector<std::string>& only_ops,
                                                                   const std::vector<std::string>& only_classes) {
  struct Measured {
    std::vector<double> ok, final_ok;
    bool seen_final = false;
  };
  struct RawGroup {
    std::string workload_text;
    ops::Params workload;
    ops::TargetTraits traits;
    std::map<std::string, std::pair<ops::Config, Measured>> configs;  // by format_config
  };
  std::map<std::pair<std::string, std::string>, std::map<std::string, RawGroup>> raw;
  std::map<std::pair<std::string, std::string>, const ops::Op*> op_of;
  std::map<std::string, std::optional<host::Target>> targets;  // parse each target text once
  for (const records::Record& r : records) {
    if (r.implementation != records::kKestrelImplementation || r.workload.empty() || r.config.empty()) continue;
    if (!only_ops.empty() && std::find(only_ops.begin(), only_ops.end(), r.op) == only_ops.end()) continue;
    auto [it, fresh] = targets.try_emplace(r.target.to_string());
    if (fresh) it->second = host::target_of(r.target);
    if (!it->second) continue;
    const std::string cls = target_class(*it->second);
    if (!only_classes.empty() && std::find(only_classes.begin(), only_classes.end(), cls) == only_classes.end()) {
      continue;
    }
    const ops::Op* op = registry.find(r.op, it->second->backend);
    if (!op) continue;
    try {
      if (!same_knobs(op->knobs(r.workload), r.config)) continue;
    } catch (const std::exception&) {
      continue;  // a workload the op refuses
    }
    const auto key = std::make_pair(r.op, cls);
    op_of[key] = op;
    const std::string workload_text = ops::format_params(r.workload);
    RawGroup& group = raw[key][workload_text + "\x1e" + r.target.to_string() + "\x1e" + device_class_key(r.device_class)];
    if (group.workload_text.empty()) {
      group.workload_text = workload_text;
      group.workload = r.workload;
      group.traits = it->second->traits;
    }
    auto& [config, measured] = group.configs[ops::format_config(r.config)];
    config = r.config;
    const bool ok = r.ok() && std::isfinite(r.cost) && r.cost > 0;
    if (ok) (r.final_measurement ? measured.final_ok : measured.ok).push_back(r.cost);
  }

  std::map<std::pair<std::string, std::string>, OpClassData> out;
  for (auto& [key, groups] : raw) {
    OpClassData& data = out[key];
    data.op = op_of.at(key);
    data.op_name = key.first;
    data.target_class = key.second;
    data.classes = {key.second};
    for (auto& [group_key, g] : groups) {
      Group group;
      group.target_class = key.second;
      group.workload_text = g.workload_text;
      group.workload = g.workload;
      std::set<double> distinct_ok;
      for (auto& [text, entry] : g.configs) {
        auto& [config, measured] = entry;
        double cost = std::numeric_limits<double>::infinity();
        if (!measured.final_ok.empty()) {
          cost = stats::median(measured.final_ok);
        } else if (!measured.ok.empty()) {
          cost = stats::median(measured.ok);
        }
        std::vector<float> row;
        try {
          row = cross_features(*data.op, g.workload, config, g.traits);
        } catch (const std::exception&) {
          continue;
        }
        if (data.feature_names.empty()) {
          data.feature_names = cross_feature_names(*data.op, g.workload, config, g.traits);
          data.probe_workload = g.workload;
          data.probe_config = config;
        }
        if (std::isfinite(cost)) distinct_ok.insert(cost);
        group.configs.push_back(config);
        group.rows.push_back(std::move(row));
        group.costs.push_back(cost);
      }
      group.rankable = distinct_ok.size() >= 2;
      if (!group.rows.empty()) data.groups.push_back(std::move(group));
    }
  }
  return out;
}

std::map<std::pair<std::string, std::string>, OpClassData> pool_families(
    std::map<std::pair<std::string, std::string>, OpClassData> data) {
  std::map<std::pair<std::string, std::string>, OpClassData> out;
  for (auto& [key, d] : data) {
    const std::string family = class_family(key.second);
    if (family.empty()) {
      out.emplace(key, std::move(d));
      continue;
    }
    OpClassData& pooled = out[{key.first, family}];
    if (pooled.op == nullptr) {
      pooled.op = d.op;
      pooled.op_name = d.op_name;
      pooled.target_class = family;
      pooled.feature_names = d.feature_names;
      pooled.probe_workload = d.probe_workload;
      pooled.probe_config = d.probe_config;
    } else if (pooled.feature_names != d.feature_names) {
      continue;  // cannot happen: cross_feature_names does not depend on the target
    }
    pooled.classes.push_back(key.second);
    std::sort(pooled.classes.begin(), pooled.classes.end());
    for (auto& g : d.groups) pooled.groups.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> rankable_workloads(const OpClassData& data) {
  std::set<std::string> names;
  for (const Group& g : data.groups) {
    if (g.rankable) names.insert(g.workload_text);
  }
  return {names.begin(), names.end()};
}

GroupQuality group_quality(const std::vector<float>& scores, const std::vector<double>& costs) {
  // Only the ok configurations are ranked: a failed one has no cost to compare.
  std::vector<std::size_t> ok;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    if (std::isfinite(costs[i])) ok.push_back(i);
  }
  GroupQuality q;
  if (ok.size() < 2) return q;
  std::vector<std::size_t> by_score = ok;
  std::stable_sort(by_score.begin(), by_score.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t i : ok) best = std::min(best, costs[i]);
  q.valid = true;
  q.top1 = costs[by_score[0]] == best;
  for (std::size_t k = 0; k < std::min<std::size_t>(5, by_score.size()); ++k) {
    if (costs[by_score[k]] == best) q.top5 = true;
  }
  q.pick_ratio = best / costs[by_score[0]];
  std::vector<double> predicted, measured;
  for (std::size_t i : ok) {
    predicted.push_back(scores[i]);
    measured.push_back(-costs[i]);  // higher = faster, as scores
  }
  q.tau = kendall_tau(predicted, measured);
  return q;
}

RankingQuality summarise(const std::vector<GroupQuality>& groups) {
  RankingQuality out;
  double log_ratio = 0;
  for (const GroupQuality& g : groups) {
    if (!g.valid) continue;
    ++out.workloads;
    out.top1_recall += g.top1 ? 1 : 0;
    out.top5_recall += g.top5 ? 1 : 0;
    out.kendall_tau += g.tau;
    log_ratio += std::log(g.pick_ratio);
  }
  if (out.workloads == 0) return out;
  const double n = static_cast<double>(out.workloads);
  out.top1_recall /= n;
  out.top5_recall /= n;
  out.kendall_tau /= n;
  out.pick_ratio = std::exp(log_ratio / n);
  return out;
}

// Fits a booster on the rankable groups of `data` whose workload `use` accepts.
std::unique_ptr<XgboostCostModel> fit(const OpClassData& data, const std::function<bool(const Group&)>& use,
                                      std::uint64_t seed, const XgboostParams& params, std::size_t* rows_out) {
  std::vector<std::vector<float>> rows;
  std::vector<double> costs;
  std::vector<unsigned> sizes;
  for (const Group& g : data.groups) {
    if (!g.rankable || !use(g)) continue;
    rows.insert(rows.end(), g.rows.begin(), g.rows.end());
    costs.insert(costs.end(), g.costs.begin(), g.costs.end());
    sizes.push_back(static_cast<unsigned>(g.rows.size()));
  }
  auto model = std::make_unique<XgboostCostModel>(seed, params);
  model->fit(rows, costs, sizes, {});
  if (rows_out) *rows_out = rows.size();
  return model;
}

XgboostParams cross_params() {
  // More, smaller steps than the per-session model's 80 rounds at eta 0.3: across 30
  // workloads of gemm and of conv2d_nchwc (AVX2 EPYC, 48 sa trials each; mean of 4
  // fold seeds) Kendall's tau went from 0.41 to 0.42 (gemm) and 0.22 to 0.25 (conv),
  // the pick ratio from 0.70 to 0.73 and 0.54 to 0.56. Row and feature subsampling
  // (0.8 / 0.8), depth 4 or 8, min_child_weight 5 and 16 pairs per row made no
  // difference beyond the folds' noise; rank:ndcg (tau 0.16 / 0.18) and a regression
  // on log(best / cost) (0.33 / 0.17) were worse.
  XgboostParams p;
  p.rounds = 300;
  p.eta = 0.05;
  return p;
}

}  // namespace detail

// ---- CrossModel -----------------------------------------------------------------------

CrossModel::CrossModel() : impl_(std::make_unique<Impl>()) {}
CrossModel::~CrossModel() = default;
CrossModel::CrossModel(CrossModel&&) noexcept = default;
CrossModel& CrossModel::operator=(CrossModel&&) noexcept = default;

CrossModel CrossModel::train(const std::vector<records::Record>& records, const ops::Registry& registry,
                             const TrainOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  auto data = detail::collect(records, registry, options.ops, options.classes);
  if (options.pool_families) data = detail::pool_families(std::move(data));
  const XgboostParams params = detail::cross_params();
  CrossModel out;
  std::vector<std::string> too_few;
  for (auto& [key, d] : data) {
    const std::string name = key.first + "/" + key.second;
    std::vector<std::string> workloads = detail::rankable_workloads(d);
    if (workloads.size() < 2) {
      too_few.push_back(name + ": " + std::to_string(workloads.size()) +
                        (workloads.size() == 1 ? " workload" : " workloads") + " with 2 distinct ok costs");
      continue;
    }
    // Leave-workloads-out folds: every workload is held out once, its groups (on every
    // device class) all in the same fold.
    std::vector<std::string> shuffled = workloads;
    std::mt19937_64 rng(options.seed);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const std::size_t folds = std::min(options.folds, shuffled.size());
    std::map<std::string, std::size_t> fold_of;
    for (std::size_t i = 0; i < shuffled.size(); ++i) fold_of[shuffled[i]] = i % std::max<std::size_t>(folds, 1);
    std::vector<detail::GroupQuality> held;
    std::map<std::string, std::vector<detail::GroupQuality>> held_by_class;
    std::size_t rows = 0;
    for (const auto& g : d.groups) rows += g.rankable ? g.rows.size() : 0;
    if (folds >= 2) {
      for (std::size_t fold = 0; fold < folds; ++fold) {
        say(name + ": " + std::to_string(workloads.size()) + " workloads, " + std::to_string(rows) + " rows, fold " +
            std::to_string(fold + 1) + "/" + std::to_string(folds));
        auto model = detail::fit(
            d, [&](const detail::Group& g) { return fold_of.at(g.workload_text) != fold; }, options.seed, params,
            nullptr);
        for (const auto& g : d.groups) {
          if (!g.rankable || fold_of.at(g.workload_text) != fold) continue;
          held.push_back(detail::group_quality(model->predict(g.rows), g.costs));
          held_by_class[g.target_class].push_back(held.back());
        }
      }
    }
    say(name + ": " + std::to_string(workloads.size()) + " workloads, " + std::to_string(rows) +
        " rows, final model");
    Impl::Entry entry;
    entry.info.op = key.first;
    entry.info.target_class = key.second;
    entry.info.trained_classes = d.classes;
    entry.info.feature_names = d.feature_names;
    entry.info.workloads = workloads.size();
    entry.info.trained_workloads = workloads;
    for (const auto& g : d.groups) {
      if (!g.rankable) continue;
      auto best = std::min_element(g.costs.begin(), g.costs.end());
      std::string text = ops::format_config(g.configs[static_cast<std::size_t>(best - g.costs.begin())]);
      auto& list = entry.info.exemplars;
      if (std::find(list.begin(), list.end(), text) == list.end()) list.push_back(std::move(text));
    }
    // The register pressure of each workload's fastest configuration, at most.
    for (std::size_t j = 0; j < d.feature_names.size(); ++j) {
      const std::string& feature = d.feature_names[j];
      if (!feature.starts_with("cross.") || !ends_with(feature, "/registers")) continue;
      float limit = -std::numeric_limits<float>::infinity();
      for (const auto& g : d.groups) {
        if (!g.rankable) continue;
        const auto best = std::min_element(g.costs.begin(), g.costs.end()) - g.costs.begin();
        limit = std::max(limit, g.rows[static_cast<std::size_t>(best)][j]);
      }
      if (std::isfinite(limit)) entry.info.register_limits.emplace_back(feature, limit);
    }
    entry.info.holdout = detail::summarise(held);
    for (const auto& [cls, groups] : held_by_class) {
      entry.info.holdout_by_class.emplace_back(cls, detail::summarise(groups));
    }
    entry.probe_workload = d.probe_workload;
    entry.probe_config = d.probe_config;
    entry.booster = detail::fit(d, [](const detail::Group&) { return true; }, options.seed, params, &entry.info.rows);
    out.impl_->entries.push_back(std::move(entry));
  }
  if (out.impl_->entries.empty()) {
    std::string why;
    if (data.empty()) {
      why = "no usable records (" + std::to_string(records.size()) +
            " records; a model learns from Kestrel's own records of a known op and target)";
    } else {
      for (const auto& line : too_few) why += (why.empty() ? "" : "; ") + line;
      why += "; a model needs records of at least 2 workloads";
    }
    throw ModelFileError("nothing to train a cross-workload model on: " + why);
  }
  for (const auto& line : too_few) say("skipped " + line);
  out.impl_->sync_infos();
  return out;
}

const std::vector<OpModelInfo>& CrossModel::models() const { return impl_->infos; }

const OpModelInfo* CrossModel::find(std::string_view op, std::string_view cls) const {
  for (const auto& info : impl_->infos) {
    if (info.op == op && info.target_class == cls) return &info;
  }
  return nullptr;
}

const OpModelInfo* CrossModel::serving(std::string_view op, std::string_view cls) const {
  const Impl::Entry* e = impl_->serving(op, cls);
  return e ? find(op, e->info.target_class) : nullptr;  // models()'s copy, as find() gives
}

std::vector<float> CrossModel::score(const ops::Op& op, const ops::Params& workload,
                                     const std::vector<ops::Config>& configs, const host::Target& target) const {
  const std::string cls = target_class(target);
  const Impl::Entry& entry = impl_->entry(op.name(), cls);
  const ops::TargetTraits traits = model_traits(target);
  std::vector<std::vector<float>> rows;
  rows.reserve(configs.size());
  for (const auto& config : configs) {
    if (rows.empty() && cross_feature_names(op, workload, config, traits) != entry.info.feature_names) {
      throw std::invalid_argument("the " + std::string(op.name()) + "/" + entry.info.target_class +
                                  " cost model was trained on other features than this op has: retrain with "
                                  "kestrel cost-model train");
    }
    rows.push_back(cross_features(op, workload, config, traits));
  }
  return entry.booster->predict(rows);
}

std::vector<float> CrossModel::score_rows(std::string_view op, std::string_view cls,
                                          const std::vector<std::vector<float>>& rows) const {
  return impl_->entry(op, cls).booster->predict(rows);
}

const CrossModel::Impl::Entry* CrossModel::Impl::serving(std::string_view op, std::string_view cls) const {
  const std::string family = class_family(cls);
  const Entry* pooled = nullptr;
  for (const auto& e : entries) {
    if (e.info.op != op) continue;
    if (e.info.target_class == cls) return &e;
    if (!family.empty() && e.info.target_class == family) pooled = &e;
  }
  return pooled;
}

const CrossModel::Impl::Entry& CrossModel::Impl::entry(std::string_view op, std::string_view cls) const {
  if (const Entry* e = serving(op, cls)) return *e;
  std::string there;
  for (const auto& e : entries) there += (there.empty() ? "" : ", ") + e.info.op + "/" + e.info.target_class;
  throw std::invalid_argument("no cost model for " + std::string(op) + "/" + std::string(cls) +
                              " in this model file (it has " + (there.empty() ? "none" : there) + ")");
}

void CrossModel::Impl::sync_infos() {
  infos.clear();
  for (const auto& e : entries) infos.push_back(e.info);
}

std::vector<std::pair<std::string, std::string>> record_classes(const std::vector<records::Record>& records,
                                                                const ops::Registry& registry) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, data] : detail::collect(records, registry, {})) {
    if (!detail::rankable_workloads(data).empty()) out.push_back(key);
  }
  return out;
}

RankingQuality evaluate(const CrossModel& model, const std::vector<records::Record>& records, const ops::Registry& registry,
                        std::string_view op, std::string_view cls) {
  auto data = detail::collect(records, registry, {std::string(op)});
  auto it = data.find({std::string(op), std::string(cls)});
  if (it == data.end()) return {};
  const OpModelInfo* info = model.serving(op, cls);
  if (info && info->feature_names != it->second.feature_names) {
    throw std::invalid_argument("the " + std::string(op) + "/" + info->target_class +
                                " cost model was trained on other features than this op has: retrain with "
                                "kestrel cost-model train");
  }
  std::vector<detail::GroupQuality> groups;
  for (const auto& g : it->second.groups) {
    if (!g.rankable) continue;
    groups.push_back(detail::group_quality(model.score_rows(op, cls, g.rows), g.costs));
  }
  return detail::summarise(groups);
}

}  // namespace kestrel::tuner
