// Random workload families for `kestrel datagen`. The value lists are the sizes real
// networks use: channel counts of ResNets, MobileNets and EfficientNets, feature maps
// from 112x112 down to 7x7, 1x1 to 7x7 filters, transformer widths (768, 1024, 3072,
// 4096) and batch-1 to batch-512 rows. Every draw is validated by the op; duplicates and
// workloads over the FLOP limit are redrawn.
#include "kestrel/tuner/shape_family.h"

#include <algorithm>
#include <random>
#include <set>

namespace kestrel::tuner {
namespace {

using Values = std::vector<std::int64_t>;

const Values kRows = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512};
const Values kCols = {64, 96, 128, 200, 256, 384, 512, 640, 768, 1000, 1024, 1536, 2048, 3072, 4096};
const Values kDepth = {64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};
const Values kChannels = {16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024};
const Values kDepthwiseChannels = {16, 24, 32, 48, 64, 72, 96, 120, 144, 192, 240, 256, 320, 384, 480, 512, 576, 672, 960};
const Values kMaps = {7, 14, 28, 56, 112};
const Values kFilters = {1, 1, 3, 3, 3, 5, 7};
const Values kStrides = {1, 1, 1, 2};
const Values kBatches = {1, 4, 8, 12, 16, 24, 48};
const Values kSeq = {16, 32, 64, 128, 256, 384};
const Values kHeadDim = {32, 64, 128};

}  // namespace

const std::vector<std::string>& family_ops() {
  static const std::vector<std::string> names = {"gemm", "batch_matmul", "conv2d", "conv2d_nchwc",
                                                 "depthwise_conv2d"};
  return names;
}

std::vector<ops::Params> shape_family(const ops::Op& op, const FamilyOptions& options) {
  const std::string name(op.name());
  bool known = false;
  for (const auto& n : family_ops()) known = known || n == name;
  if (!known) {
    std::string list;
    for (const auto& n : family_ops()) list += (list.empty() ? "" : ", ") + n;
    throw ops::OpError("no shape family for op " + name + " (families: " + list + ")");
  }
  std::mt19937_64 rng(options.seed);
  auto pick = [&rng](const Values& values) {
    return values[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng)];
  };
  auto draw = [&]() -> ops::Params {
    if (name == "gemm") return {{"M", pick(kRows)}, {"N", pick(kCols)}, {"K", pick(kDepth)}};
    if (name == "batch_matmul") {
      // Attention: QK^T (K = head dim, B transposed) or PV (N = head dim).
      std::int64_t seq = pick(kSeq), dim = pick(kHeadDim);
      bool qk = std::uniform_int_distribution<int>(0, 1)(rng) == 0;
      if (qk) return {{"batch", pick(kBatches)}, {"M", seq}, {"N", seq}, {"K", dim}, {"trans_b", 1}};
      return {{"batch", pick(kBatches)}, {"M", seq}, {"N", dim}, {"K", seq}};
    }
    const std::int64_t map = pick(kMaps), filter = pick(kFilters), stride = pick(kStrides);
    ops::Params p{{"H", map}, {"W", map}, {"R", filter}, {"S", filter}, {"stride", stride}, {"pad", filter / 2}};
    if (name == "depthwise_conv2d") {
      p["C"] = pick(kDepthwiseChannels);
      p["R"] = p["S"] = filter == 1 ? 3 : std::min<std::int64_t>(filter, 5);
      p["pad"] = p["R"] / 2;
    } else {
      p["C"] = pick(kChannels);
      p["K"] = pick(kChannels);
    }
    if (name != "conv2d") p["block"] = options.block;
    return p;
  };

  std::vector<ops::Params> out;
  std::set<std::string> seen;
  const std::size_t attempts = 200 * options.count + 1000;
  for (std::size_t i = 0; i < attempts && out.size() < options.count; ++i) {
    ops::Params params = draw();
    // Parameters not drawn take their fallback (as parse_params gives them).
    for (const auto& spec : op.params()) params.emplace(spec.name, spec.fallback);
    try {
      op.validate(params);
    } catch (const ops::OpError&) {
      continue;  // e.g. channels that are not a multiple of the block
    }
    if (op.flops(params) > options.max_gflop * 1e9) continue;
    params = ops::normalize_params(op, std::move(params));
    if (seen.insert(ops::format_params(params)).second) out.push_back(std::move(params));
  }
  if (out.size() < options.count) {
    throw ops::OpError("found only " + std::to_string(out.size()) + " distinct " + name + " workloads under " +
                       std::to_string(options.max_gflop) + " GFLOP; ask for fewer or raise the limit");
  }
  return out;
}

}  // namespace kestrel::tuner
