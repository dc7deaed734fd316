// Named sets of workloads ("gemm-square", "gemm-skinny", "resnet18-conv", "mobilenetv2-dw",
// "resnext50-grouped", "bert-glue", "cnn-pool", "smoke") that `kestrel tune --workloads` and `kestrel bench
// --workloads` accept, so that tuning and comparing run over the same, documented shapes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::ops {

// One entry of a set, as written in the set's table: the op and its shape text
// (parse_params syntax), with a short label unique within the set.
struct WorkloadEntry {
  std::string label;  // e.g. "layer2.0.conv1"
  std::string op;     // e.g. "conv2d"
  std::string shape;  // e.g. "C=64,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1"
};

struct WorkloadSet {
  std::string name;
  std::string description;
  std::vector<WorkloadEntry> entries;
};

// A resolved workload: the op found in a registry and its validated parameters.
struct Workload {
  std::string label;
  const Op* op = nullptr;  // borrowed from the registry, which must outlive it
  Params params;
};

// The built-in sets, in a fixed order (built on every call; no static state).
std::vector<WorkloadSet> builtin_workload_sets();

// Resolves a comma-separated list of set names ("gemm-square,gemm-skinny") against the
// built-in sets and `registry`, in the order given, dropping repeated workloads.
// `only`, when not empty, is a comma-separated list of labels (or set:label) that keeps
// just those workloads. `op_override`, when not empty, replaces every workload's op by
// that one (e.g. a conv op with another layout but the same parameters).
// Throws OpError naming the unknown set, label or op, or the parameter an override op rejects.
std::vector<Workload> resolve_workload_sets(const Registry& registry, std::string_view names,
                                            std::string_view only = {}, std::string_view op_override = {});

// "gemm 1024x1024x1024" style one-line description: op name and the parameters in the
// op's order, positional where all are given ("M=1,N=1000,K=512" otherwise kept in
// NAME=VALUE form for ops with more than three parameters).
std::string describe_workload(const Op& op, const Params& params);

}  // namespace kestrel::ops
