// Private parts of the cross-workload model shared by cross_model.cpp (training,
// scoring) and kcm_file.cpp (the .kcm file).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/tuner/xgboost_cost_model.h"

namespace kestrel::tuner {

struct CrossModel::Impl {
  struct Entry {
    OpModelInfo info;
    // A workload and configuration the model trained on: the load checks that the op
    // still gives the stored feature names for them.
    ops::Params probe_workload;
    ops::Config probe_config;
    std::unique_ptr<XgboostCostModel> booster;
  };
  std::vector<Entry> entries;
  std::vector<OpModelInfo> infos;  // entries' infos, for models()

  // The entry serving (op, class) (CrossModel::serving); throws std::invalid_argument
  // naming the models there are.
  const Entry& entry(std::string_view op, std::string_view target_class) const;
  const Entry* serving(std::string_view op, std::string_view target_class) const;
  void sync_infos();
};

namespace detail {

ops::Backend backend_of_class(std::string_view target_class);
// The typical traits of a CPU class ("avx2"); default ones for GPU classes.
ops::TargetTraits traits_of_class(std::string_view target_class);

// One ranking group: the measured configurations of one workload on one target and
// device class, one row per distinct configuration (see cross_model.cpp).
struct Group {
  std::string target_class;   // of the records (a pooled model's groups differ)
  std::string workload_text;  // ops::format_params
  ops::Params workload;
  std::vector<ops::Config> configs;
  std::vector<std::vector<float>> rows;  // cross_features
  std::vector<double> costs;             // seconds; +inf: failed
  bool rankable = false;                 // at least 2 distinct ok costs
};

struct OpClassData {
  const ops::Op* op = nullptr;
  std::string op_name, target_class;  // a class, or a family once pooled
  std::vector<std::string> classes;   // of the groups, sorted
  std::vector<std::string> feature_names;
  ops::Params probe_workload;
  ops::Config probe_config;
  std::vector<Group> groups;
};

// The records' groups by (op, target class); only ops in `only_ops` and classes in
// `only_classes` when not empty.
std::map<std::pair<std::string, std::string>, OpClassData> collect(const std::vector<records::Record>& records,
                                                                   const ops::Registry& registry,
                                                                   const std::vector<std::string>& only_ops,
                                                                   const std::vector<std::string>& only_classes = {});
// The same with the CPU classes of each family merged into one (op, family) entry.
std::map<std::pair<std::string, std::string>, OpClassData> pool_families(
    std::map<std::pair<std::string, std::string>, OpClassData> data);
// Distinct workloads with at least one rankable group, sorted.
std::vector<std::string> rankable_workloads(const OpClassData& data);

struct GroupQuality {
  bool valid = false;  // at least 2 ok configurations
  bool top1 = false, top5 = false;
  double tau = 0, pick_ratio = 0;
};
GroupQuality group_quality(const std::vector<float>& scores, const std::vector<double>& costs);
RankingQuality summarise(const std::vector<GroupQuality>& groups);

// The booster parameters of the cross-workload model.
XgboostParams cross_params();
std::unique_ptr<XgboostCostModel> fit(const OpClassData& data, const std::function<bool(const Group&)>& use,
                                      std::uint64_t seed, const XgboostParams& params, std::size_t* rows_out);

}  // namespace detail
}  // namespace kestrel::tuner
