// Feature vectors of configurations for the cost model, from Op::features(): the same
// names and order for every workload of an op, so models transfer across shapes.
#pragma once

#include <string>
#include <vector>

#include "kestrel/tuner/space.h"

namespace kestrel::tuner {

// Features of the point `index`, as floats (log2(1 + x) of non-negative sizes, so tile
// sizes and shapes are on comparable scales; see features.cpp).
std::vector<float> feature_vector(const Space& space, std::uint64_t index);
// Features of any configuration of an op for a workload (used for transfer records).
std::vector<float> feature_vector(const ops::Op& op, const ops::Params& params, const ops::Config& config);
// The compression every feature goes through: sign(x) * log2(1 + |x|); +-64 for
// infinities, 0 for NaN.
float squash_feature(double x);
std::vector<std::string> feature_names(const ops::Op& op, const ops::Params& params, const ops::Config& config);

}  // namespace kestrel::tuner
