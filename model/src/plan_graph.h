// The node-to-task mapping of one bound graph (every shape concrete): which ONNX patterns
// become which Kestrel op with which workload and arguments (docs/architecture.md,
// "Model import"), the fused epilogues, and the portable rest. plan_model (plan.cpp)
// adds the symbols and the dynamic parameters.
#pragma once

#include "kestrel/model/tasks.h"

namespace kestrel::model {

// Plans `graph` (bound: every value's shape concrete) with NCHWc block `block`; `winograd`
// as PlanOptions::winograd; a constant B of a gemm in panels `gemm_panels` wide (0: none;
// PlanOptions::gemm_panels). Tasks are validated with `registry`'s ops; a refused workload
// leaves its node untuned with the op's message. Plan::symbols and ModelTask::dynamic are
// left empty.
Plan plan_graph(const Graph& graph, std::int64_t block, const ops::Registry& registry, bool winograd,
                std::int64_t gemm_panels);

}  // namespace kestrel::model
