// Which kernels run a planned model in this process (`kestrel run`): an exported library,
// whose manifest fixes the plan's NCHWc block, or kernels compiled here for the native
// target, each task at its best record of a records database (chosen as `kestrel export`
// chooses: records::choose_config among the records of the target's triple, the exact
// target first), else at a cost model's zero-shot pick when one is given, else at the
// op's default configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/deploy/kernel_provider.h"
#include "kestrel/host/target.h"
#include "kestrel/model/tasks.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cross_model.h"

namespace kestrel::deploy {

// Where the kernels come from.
struct KernelSource {
  std::optional<std::string> exported;  // an exported library's directory (kestrel export -o DIR); none: compile here
  std::optional<std::string> records;   // compiling here: the records (a path or URI) whose best configurations
                                        // to use; none: the ops' defaults
  std::string device_key;               // with records: only records measured on devices of this pool key
  // Compiling here: tasks without a record get this cost model's zero-shot pick.
  std::shared_ptr<const tuner::CrossModel> cost_model;
};

// The NCHWc block the model must be planned at: the exported library's (its
// manifest.json), else model::default_block(traits). Throws UsageError when the manifest
// is missing or holds no block.
std::int64_t plan_block(const KernelSource& source, const ops::TargetTraits& traits);

struct ModelKernels {
  std::unique_ptr<KernelProvider> provider;
  // For the report: the library's path, or how many tasks were compiled at a record of
  // which database, for which target.
  std::string description;
  // "<task key>: <note>": records passed over and why.
  std::vector<std::string> notes;
};

// The kernels of `plan`'s tasks, run on a pool of `threads` threads; `target` is this
// machine's (host::parse_target("native")). Throws
// ModelError when the exported library cannot be loaded, RecordsError when the records
// cannot be opened (they are never created).
ModelKernels model_kernels(const KernelSource& source, const model::Plan& plan, const host::Target& target, unsigned threads);

}  // namespace kestrel::deploy
