// Feature vectors for the cost model: Op::features() of a configuration, each value
// compressed with a signed log2(1 + |x|) so that tile sizes, byte counts and shares in
// [0, 1] all land on comparable scales (and the transform is monotone, which is all the
// tree model needs to split well).
#include "kestrel/tuner/features.h"

#include <cmath>

namespace kestrel::tuner {
float squash_feature(double x) {
  if (!std::isfinite(x)) return std::isnan(x) ? 0.0f : (x > 0 ? 64.0f : -64.0f);
  double magnitude = std::log2(1.0 + std::fabs(x));
  return static_cast<float>(x < 0 ? -magnitude : magnitude);
}

std::vector<float> feature_vector(const Space& space, std::uint64_t index) {
  return feature_vector(space.op(), space.params(), space.config(index));
}

std::vector<float> feature_vector(const ops::Op& op, const ops::Params& params, const ops::Config& config) {
  auto named = op.features(params, config);
  std::vector<float> out;
  out.reserve(named.size());
  for (const auto& entry : named) out.push_back(squash_feature(entry.second));
  return out;
}

std::vector<std::string> feature_names(const ops::Op& op, const ops::Params& params, const ops::Config& config) {
  auto named = op.features(params, config);
  std::vector<std::string> out;
  out.reserve(named.size());
  for (auto& entry : named) out.push_back(std::move(entry.first));
  return out;
}

}  // namespace kestrel::tuner
