// Canonical forms of operators (see canonical_ops.h).
#include "canonical_ops.h"

#include <set>

namespace kestrel::model {

int canonicalize_ops(Graph& graph) {
  int rewritten = 0;
  for (auto& node : graph.nodes) {
    const bool mean = node.op_type == "ReduceMean", max = node.op_type == "ReduceMax";
    if (!node.domain.empty() || !(mean || max) || node.inputs.size() != 1 || node.outputs.size() != 1) continue;
    if (node.attr_int("keepdims", 1) != 1) continue;
    const ValueInfo* in = graph.value(node.inputs[0]);
    if (!in || in->type != ElemType::f32 || !in->shape || in->shape->size() != 4) continue;
    std::set<std::int64_t> axes;
    for (auto a : node.attr_ints("axes")) axes.insert(a < 0 ? a + 4 : a);
    if (axes != std::set<std::int64_t>{2, 3}) continue;
    node.op_type = mean ? "GlobalAveragePool" : "GlobalMaxPool";
    node.attributes.clear();
    ++rewritten;
  }
  return rewritten;
}

}  // namespace kestrel::model
