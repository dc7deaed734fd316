// The built-in workload sets and their resolution against an op registry.
#include "kestrel/ops/workload_sets.h"

#include <algorithm>
#include <set>

namespace kestrel::ops {
namespace {

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  std::string item;
  auto flush = [&] {
    auto first = item.find_first_not_of(" \t");
    auto last = item.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(item.substr(first, last - first + 1));
    item.clear();
  };
  for (char c : text) {
    if (c == ',') flush();
    else item += c;
  }
  flush();
  return out;
}

std::string set_names(const std::vector<WorkloadSet>& sets) {
  std::string out;
  for (const auto& s : sets) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

// im2col view of a convolution as gemm: weights [K][C*R*S] times columns [C*R*S][P*Q].
WorkloadEntry im2col(const std::string& label, std::int64_t k, std::int64_t crs, std::int64_t pq) {
  return {label, "gemm", "M=" + std::to_string(k) + ",N=" + std::to_string(pq) + ",K=" + std::to_string(crs)};
}

}  // namespace

std::vector<WorkloadSet> builtin_workload_sets() {
  std::vector<WorkloadSet> sets;
  sets.push_back({"gemm-square", "square fp32 gemm, M=N=K from 256 to 2048",
                  {{"256", "gemm", "256x256x256"},
                   {"512", "gemm", "512x512x512"},
                   {"1024", "gemm", "1024x1024x1024"},
                   {"2048", "gemm", "2048x2048x2048"}}});
  sets.push_back({"gemm-skinny",
                  "the skinny gemm of inference: batch-1 fully connected layers (ResNet's 512->1000 classifier, "
                  "a 4096->4096 layer), the same layer at batch 16, and the im2col gemm of ResNet-18's 3x3 "
                  "convolutions (M = output channels, N = output pixels, K = C*R*S)",
                  {{"fc-1x1000x512", "gemm", "M=1,N=1000,K=512"},
                   {"fc-1x4096x4096", "gemm", "M=1,N=4096,K=4096"},
                   {"fc-16x4096x4096", "gemm", "M=16,N=4096,K=4096"},
                   im2col("im2col-layer1", 64, 64 * 9, 56 * 56),
                   im2col("im2col-layer2", 128, 128 * 9, 28 * 28),
                   im2col("im2col-layer3", 256, 256 * 9, 14 * 14),
                   im2col("im2col-layer4", 512, 512 * 9, 7 * 7)}});
  // Every distinct convolution of ResNet-18 (224x224 input, batch 1); the labels name
  // the first layer of torchvision's model that has the shape.
  sets.push_back({"resnet18-conv", "the 11 distinct convolution layers of ResNet-18 at batch 1 (224x224 input)",
                  {{"conv1", "conv2d", "N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3"},
                   {"layer1.conv", "conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1"},
                   {"layer2.0.conv1", "conv2d", "N=1,C=64,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1"},
                   {"layer2.0.downsample", "conv2d", "N=1,C=64,H=56,W=56,K=128,R=1,S=1,stride=2,pad=0"},
                   {"layer2.conv", "conv2d", "N=1,C=128,H=28,W=28,K=128,R=3,S=3,stride=1,pad=1"},
                   {"layer3.0.conv1", "conv2d", "N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1"},
                   {"layer3.0.downsample", "conv2d", "N=1,C=128,H=28,W=28,K=256,R=1,S=1,stride=2,pad=0"},
                   {"layer3.conv", "conv2d", "N=1,C=256,H=14,W=14,K=256,R=3,S=3,stride=1,pad=1"},
                   {"layer4.0.conv1", "conv2d", "N=1,C=256,H=14,W=14,K=512,R=3,S=3,stride=2,pad=1"},
                   {"layer4.0.downsample", "conv2d", "N=1,C=256,H=14,W=14,K=512,R=1,S=1,stride=2,pad=0"},
                   {"layer4.conv", "conv2d", "N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1"}}});
  // Every distinct convolution of ResNet-50 v1.5 (torchvision: the stride on the 3x3),
  // 224x224 input, batch 1; the labels name the first layer of torchvision's model with
  // the shape (layer1.0.downsample has layer1.0.conv3's shape).
  sets.push_back({"resnet50-conv", "the 23 distinct convolution layers of ResNet-50 v1.5 at batch 1 (224x224 input)",
                  {
                   {"conv1", "conv2d", "N=1,C=3,H=224,W=224,K=64,R=7,S=7,stride=2,pad=3"},
                   {"layer1.0.conv1", "conv2d", "N=1,C=64,H=56,W=56,K=64,R=1,S=1,stride=1,pad=0"},
                   {"layer1.0.conv2", "conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1"},
                   {"layer1.0.conv3", "conv2d", "N=1,C=64,H=56,W=56,K=256,R=1,S=1,stride=1,pad=0"},
                   {"layer1.1.conv1", "conv2d", "N=1,C=256,H=56,W=56,K=64,R=1,S=1,stride=1,pad=0"},
                   {"layer2.0.conv1", "conv2d", "N=1,C=256,H=56,W=56,K=128,R=1,S=1,stride=1,pad=0"},
                   {"layer2.0.conv2", "conv2d", "N=1,C=128,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1"},
                   {"layer2.0.conv3", "conv2d", "N=1,C=128,H=28,W=28,K=512,R=1,S=1,stride=1,pad=0"},
                   {"layer2.0.downsample", "conv2d", "N=1,C=256,H=56,W=56,K=512,R=1,S=1,stride=2,pad=0"},
                   {"layer2.1.conv1", "conv2d", "N=1,C=512,H=28,W=28,K=128,R=1,S=1,stride=1,pad=0"},
                   {"layer2.1.conv2", "conv2d", "N=1,C=128,H=28,W=28,K=128,R=3,S=3,stride=1,pad=1"},
                   {"layer3.0.conv1", "conv2d", "N=1,C=512,H=28,W=28,K=256,R=1,S=1,stride=1,pad=0"},
                   {"layer3.0.conv2", "conv2d", "N=1,C=256,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1"},
                   {"layer3.0.conv3", "conv2d", "N=1,C=256,H=14,W=14,K=1024,R=1,S=1,stride=1,pad=0"},
                   {"layer3.0.downsample", "conv2d", "N=1,C=512,H=28,W=28,K=1024,R=1,S=1,stride=2,pad=0"},
                   {"layer3.1.conv1", "conv2d", "N=1,C=1024,H=14,W=14,K=256,R=1,S=1,stride=1,pad=0"},
                   {"layer3.1.conv2", "conv2d", "N=1,C=256,H=14,W=14,K=256,R=3,S=3,stride=1,pad=1"},
                   {"layer4.0.conv1", "conv2d", "N=1,C=1024,H=14,W=14,K=512,R=1,S=1,stride=1,pad=0"},
                   {"layer4.0.conv2", "conv2d", "N=1,C=512,H=14,W=14,K=512,R=3,S=3,stride=2,pad=1"},
                   {"layer4.0.conv3", "conv2d", "N=1,C=512,H=7,W=7,K=2048,R=1,S=1,stride=1,pad=0"},
                   {"layer4.0.downsample", "conv2d", "N=1,C=1024,H=14,W=14,K=2048,R=1,S=1,stride=2,pad=0"},
                   {"layer4.1.conv1", "conv2d", "N=1,C=2048,H=7,W=7,K=512,R=1,S=1,stride=1,pad=0"},
                   {"layer4.1.conv2", "conv2d", "N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1"}}});
  sets.push_back({"smoke", "two tiny workloads (a gemm and a conv2d) for quick checks of the tools",
                  {{"gemm-tiny", "gemm", "M=48,N=40,K=32"},
                   {"conv-tiny", "conv2d", "N=1,C=8,H=10,W=10,K=8,R=3,S=3,stride=1,pad=1"}}});
  return sets;
}

std::vector<Workload> resolve_workload_sets(const Registry& registry, std::string_view names, std::string_view only,
                                            std::string_view op_override) {
  auto sets = builtin_workload_sets();
  auto wanted = split_list(names);
  if (wanted.empty()) throw OpError("no workload set given (sets: " + set_names(sets) + ")");
  const Op* override_op = op_override.empty() ? nullptr : &registry.get(op_override);

  struct Candidate {
    std::string set;
    const WorkloadEntry* entry;
  };
  std::vector<Candidate> candidates;
  for (const auto& name : wanted) {
    auto it = std::find_if(sets.begin(), sets.end(), [&](const WorkloadSet& s) { return s.name == name; });
    if (it == sets.end()) throw OpError("unknown workload set '" + name + "' (sets: " + set_names(sets) + ")");
    for (const auto& entry : it->entries) candidates.push_back({it->name, &entry});
  }

  auto filters = split_list(only);
  std::set<std::string> unused(filters.begin(), filters.end());
  std::vector<Workload> out;
  std::set<std::pair<std::string, Params>> seen;
  for (const auto& c : candidates) {
    if (!filters.empty()) {
      std::string qualified = c.set + ":" + c.entry->label;
      bool keep = false;
      for (const auto& f : filters) {
        if (f == c.entry->label || f == qualified) {
          keep = true;
          unused.erase(f);
        }
      }
      if (!keep) continue;
    }
    const Op& op = override_op ? *override_op : registry.get(c.entry->op);
    Params params;
    try {
      params = parse_params(op, c.entry->shape);
      op.validate(params);
    } catch (const OpError& e) {
      throw OpError("workload " + c.set + ":" + c.entry->label + " (" + c.entry->shape + ") for op " +
                    std::string(op.name()) + ": " + e.what());
    }
    if (!seen.insert({std::string(op.name()), params}).second) continue;
    out.push_back({c.entry->label, &op, std::move(params)});
  }
  if (!unused.empty()) {
    std::string labels;
    for (const auto& c : candidates) labels += (labels.empty() ? "" : ", ") + c.entry->label;
    throw OpError("no workload labelled '" + *unused.begin() + "' in " + std::string(names) + " (labels: " + labels +
                  ")");
  }
  return out;
}

std::string describe_workload(const Op& op, const Params& params) {
  auto specs = op.params();
  std::string out(op.name());
  if (specs.size() <= 3) {
    out += " ";
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto it = params.find(specs[i].name);
      out += (i ? "x" : "") + (it == params.end() ? std::string("?") : std::to_string(it->second));
    }
    return out;
  }
  std::string items;
  for (const auto& spec : specs) {
    auto it = params.find(spec.name);
    if (it == params.end()) continue;
    // Parameters at their fallback (batch 1, stride 1, no dilation) are left out.
    if (spec.fallback >= spec.min && it->second == spec.fallback) continue;
    items += (items.empty() ? "" : ",") + spec.name + "=" + std::to_string(it->second);
  }
  return out + " " + items;
}

}  // namespace kestrel::ops
