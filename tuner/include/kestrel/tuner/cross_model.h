// The cross-workload cost model ("zero-shot"): ranking models trained on the records of
// many workloads that order the configurations of a workload they never saw. By default
// one model per op and CPU family, pooled over the target classes of the family that the
// records hold ("gemm/x86": the avx2 and avx512 records together), so that it also
// answers for a class of the family it saw little or nothing of; GPU backends and
// TrainOptions::pool_families false give one model per (op, target class). Files (".kcm")
// hold every model with the feature schema it was trained on, the classes and workloads
// it was trained on and its held-out ranking quality.
//
// Features (cross_features) are the op's own (Op::features, under features.cpp's signed
// log) plus quantities relative to the target, which carry across shapes and machines:
// the op's tile footprints as shares of the target's L1, L2 and L3; its register
// features against the target's register file (a vector of the op's lanes takes several
// registers where the target's are narrower); the target's vector width and register
// count. The op's absolute forms of these (its vector length in floats, register shares
// against a fixed 32, footprints in bytes) are left out: a model trained on one class
// then has only what means the same on another. The traits are those a record's target stands for (traits_of_record_target:
// the register file of its ISA and that ISA's typical caches), the same in training and
// in scoring. Any change to them changes kFeatureSchemaVersion, and a file of another
// schema is refused (retrain), never silently misread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/records/records.h"

namespace kestrel::tuner {

// Bumped whenever cross_features() changes (names, order or meaning).
inline constexpr int kFeatureSchemaVersion = 3;
// Bumped whenever the .kcm layout changes.
inline constexpr int kModelFileVersion = 1;

// A user's error with a model or its training data: a missing, unreadable or foreign
// file, a file of a newer version or another feature schema, records too few to learn
// from. The message names the path and says what to do.
class ModelFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The class of targets that one model serves: the ISA the code is compiled for ("avx2",
// "avx512", "neon", "neon32", "sse", "scalar"), or the GPU backend ("cuda", "opencl").
std::string target_class(const host::Target& target);
// The same for a record's target; empty when it names no target Kestrel can compile for.
std::string target_class(const ops::TargetId& record_target);
// The traits a record's target stands for (host::parse_target's; typical caches of its
// ISA). Throws std::invalid_argument for a target Kestrel cannot compile for.
ops::TargetTraits traits_of_record_target(const ops::TargetId& record_target);
// The traits the model's features use for a target: those of its records
// (traits_of_record_target of target.id()), so that scoring sees what training saw;
// target.traits where the id names no target Kestrel can compile for.
ops::TargetTraits model_traits(const host::Target& target);
// The family a CPU class's models are pooled in: "x86" (sse, avx2, avx512), "arm" (neon,
// neon32); empty for other classes (scalar, GPU backends), which are not pooled.
std::string class_family(std::string_view target_class);

// Features of one configuration for the cross-workload model, and their names (the
// same names and order for every workload and target of the op).
std::vector<float> cross_features(const ops::Op& op, const ops::Params& workload, const ops::Config& config,
                                  const ops::TargetTraits& target);
std::vector<std::string> cross_feature_names(const ops::Op& op, const ops::Params& workload,
                                             const ops::Config& config, const ops::TargetTraits& target);

// Ranking quality on workloads the model did not train on. For each held-out workload
// with at least 2 distinct ok costs: whether its measured best is the model's first
// (top-1) or among its first five (top-5) of that workload's measured configurations;
// Kendall's tau between the model's order and the measured order of its ok configurations;
// and best cost / cost of the model's first pick among them (1 = the model found the
// measured best). Means over workloads (pick_ratio: geometric mean).
struct RankingQuality {
  std::size_t workloads = 0;
  double top1_recall = 0;
  double top5_recall = 0;
  double kendall_tau = 0;
  double pick_ratio = 0;
};

// One trained model of the file.
struct OpModelInfo {
  std::string op;
  std::string target_class;  // a class ("avx2"), or a family ("x86") for a pooled model
  // The target classes of the records it trained on (one for a per-class model).
  std::vector<std::string> trained_classes;
  std::vector<std::string> feature_names;
  std::size_t rows = 0;       // ok and failed records trained on
  std::size_t workloads = 0;  // distinct workloads (groups) trained on
  std::vector<std::string> trained_workloads;  // ops::format_params of each
  // The fastest configuration of each trained workload (ops::format_config, distinct):
  // configurations that were best for some shape, which zero-shot picks consider for a
  // new shape beside the model's own search (good tiles often carry over).
  std::vector<std::string> exemplars;
  // The highest register pressure (each cross.*/registers feature, squashed) of any
  // training workload's fastest configuration: zero-shot picks stay at or below it, where
  // the model has seen what is fast (cross features past it are extrapolation: the model
  // cannot tell a tile that spills on a smaller register file from one that fits).
  std::vector<std::pair<std::string, float>> register_limits;
  RankingQuality holdout;     // from leave-workloads-out folds; workloads == 0 if too few
  // The same folds' quality per trained class (a pooled model's classes apart).
  std::vector<std::pair<std::string, RankingQuality>> holdout_by_class;
};

struct TrainOptions {
  std::vector<std::string> ops;  // only these ops; empty: every op with enough records
  std::size_t folds = 5;         // leave-workloads-out folds for RankingQuality
  std::uint64_t seed = 1;
  // One model per op and CPU family (class_family) over the records of all its classes;
  // false: one per (op, target class).
  bool pool_families = true;
  // Only records of these target classes (empty: all).
  std::vector<std::string> classes;
  // Called with a line of progress ("gemm/avx2: 31 workloads, 1,488 rows, fold 2/5").
  std::function<void(const std::string&)> progress;
};

class CrossModel {
 public:
  CrossModel();
  ~CrossModel();
  CrossModel(CrossModel&&) noexcept;
  CrossModel& operator=(CrossModel&&) noexcept;

  // Fits one model per (op, target class) with at least 2 workloads that each have at
  // least 2 distinct ok costs (one ranking group per workload and device class; labels
  // relative to that group's best), after measuring its held-out quality with
  // leave-workloads-out folds. Vendor records, records of unknown ops and knobs the op
  // no longer has are skipped. Throws ModelFileError when nothing qualifies, saying
  // what was found ("gemm/avx2: 1 workload; a model needs records of at least 2").
  static CrossModel train(const std::vector<records::Record>& records, const ops::Registry& registry,
                          const TrainOptions& options);
  // Throws ModelFileError naming the path: no such file, not a Kestrel cost model, a
  // newer file version, another feature schema (retrain with `kestrel cost-model train`).
  static CrossModel load(const std::string& path);
  // Writes atomically (a temporary file renamed over `path`): on any failure nothing is
  // left at `path` and ModelFileError says why.
  void save(const std::string& path) const;

  const std::vector<OpModelInfo>& models() const;
  // The model stored under (op, class or family), or null.
  const OpModelInfo* find(std::string_view op, std::string_view target_class) const;
  // The model that answers for (op, target class): the class's own, else the model pooled
  // over its family (class_family); null when there is neither.
  const OpModelInfo* serving(std::string_view op, std::string_view target_class) const;

  // Scores of configurations of one workload, higher = faster; only their order means
  // anything. Throws std::invalid_argument when no model serves (op,
  // target_class(target)) (naming the ones there are).
  std::vector<float> score(const ops::Op& op, const ops::Params& workload, const std::vector<ops::Config>& configs,
                           const host::Target& target) const;
  // The same on precomputed cross_features rows, by the model serving (op, target_class).
  std::vector<float> score_rows(std::string_view op, std::string_view target_class,
                                const std::vector<std::vector<float>>& rows) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The (op, target class) pairs the records hold rankable workloads of (at least 2
// distinct ok costs), sorted: what a model can be evaluated on.
std::vector<std::pair<std::string, std::string>> record_classes(const std::vector<records::Record>& records,
                                                                const ops::Registry& registry);

// Evaluates `model` on the records' workloads of `target_class` (all treated as unseen),
// as in training, with the model that serves that class.
RankingQuality evaluate(const CrossModel& model, const std::vector<records::Record>& records, const ops::Registry& registry,
                        std::string_view op, std::string_view target_class);

}  // namespace kestrel::tuner
