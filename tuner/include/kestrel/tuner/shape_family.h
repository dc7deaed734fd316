// Families of workloads to build a records database from (`kestrel datagen`): shapes of
// an op drawn at random from the ranges real models use (layer widths, feature-map sizes,
// filter sizes, strides, batch-1 and batched fully connected layers), so that a
// cross-workload cost model (cross_model.h) sees the variety it must generalise over.
// Reproducible from a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::tuner {

struct FamilyOptions {
  std::size_t count = 24;        // distinct workloads wanted
  std::uint64_t seed = 1;
  std::int64_t block = 8;        // channels per block of the NCHWc ops (the target's floats per vector)
  double max_gflop = 1.6;        // larger workloads are redrawn: trials stay short
};

// The ops that have a family: gemm, batch_matmul, conv2d, conv2d_nchwc, depthwise_conv2d.
const std::vector<std::string>& family_ops();

// `count` distinct valid workloads of `op` (normalised as records store them). Throws
// ops::OpError for an op with no family (naming the ops that have one) and when the
// draws cannot find `count` distinct valid workloads under max_gflop.
std::vector<ops::Params> shape_family(const ops::Op& op, const FamilyOptions& options);

}  // namespace kestrel::tuner
