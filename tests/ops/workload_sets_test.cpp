// The named workload sets: every entry resolves against the built-in ops, labels are
// unique, the shapes are the ones documented, and bad names, labels and op overrides
// give clear errors.
#include <catch2/catch.hpp>

#include <set>

#include "kestrel/ops/workload_sets.h"

using namespace kestrel::ops;

TEST_CASE("every built-in workload set resolves, with unique labels and valid workloads", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  auto sets = builtin_workload_sets();
  std::set<std::string> names;
  for (const auto& set : sets) {
    INFO(set.name);
    CHECK(names.insert(set.name).second);
    CHECK(!set.description.empty());
    auto workloads = resolve_workload_sets(registry, set.name);
    REQUIRE(workloads.size() == set.entries.size());
    std::set<std::string> labels;
    for (const auto& w : workloads) {
      CHECK(labels.insert(w.label).second);
      REQUIRE(w.op != nullptr);
      CHECK_NOTHROW(w.op->validate(w.params));
      CHECK(w.op->flops(w.params) > 0);
    }
  }
  for (const char* expected : {"gemm-square", "gemm-skinny", "resnet18-conv", "smoke"}) CHECK(names.count(expected));
}

TEST_CASE("the workload sets hold the documented shapes", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  auto square = resolve_workload_sets(registry, "gemm-square");
  REQUIRE(square.size() == 4);
  CHECK(square.front().params == Params{{"M", 256}, {"N", 256}, {"K", 256}});
  CHECK(square.back().params == Params{{"M", 2048}, {"N", 2048}, {"K", 2048}});

  auto skinny = resolve_workload_sets(registry, "gemm-skinny");
  auto find = [&](const std::vector<Workload>& list, const std::string& label) -> const Workload& {
    for (const auto& w : list) {
      if (w.label == label) return w;
    }
    FAIL("no workload " << label);
    throw std::logic_error("unreachable");
  };
  CHECK(find(skinny, "fc-16x4096x4096").params == Params{{"M", 16}, {"N", 4096}, {"K", 4096}});
  CHECK(find(skinny, "fc-1x1000x512").params == Params{{"M", 1}, {"N", 1000}, {"K", 512}});
  // im2col of ResNet-18's layer2 3x3 convolution: 128 filters over 28x28 outputs, K = 128*3*3.
  CHECK(find(skinny, "im2col-layer2").params == Params{{"M", 128}, {"N", 784}, {"K", 1152}});

  auto resnet50 = resolve_workload_sets(registry, "resnet50-conv");
  REQUIRE(resnet50.size() == 23);
  // v1.5: the bottleneck's 3x3 convolution carries the stride.
  CHECK(find(resnet50, "layer3.0.conv2").params.at("stride") == 2);
  CHECK(find(resnet50, "layer3.0.conv2").params.at("C") == 256);
  CHECK(find(resnet50, "layer3.0.conv1").params.at("stride") == 1);
  CHECK(find(resnet50, "layer4.0.downsample").params.at("K") == 2048);

  auto resnet = resolve_workload_sets(registry, "resnet18-conv");
  REQUIRE(resnet.size() == 11);
  const auto& conv1 = find(resnet, "conv1");
  CHECK(conv1.op->name() == "conv2d");
  CHECK(conv1.params.at("C") == 3);
  CHECK(conv1.params.at("R") == 7);
  CHECK(conv1.params.at("stride") == 2);
  CHECK(conv1.params.at("pad") == 3);
  CHECK(conv1.params.at("dilation") == 1);
  // Output sizes of the ResNet-18 stages: 112 after conv1, 28/14/7 after the strided 3x3s.
  auto out = [](const Workload& w) { return w.op->tensors(w.params).back().shape; };
  CHECK(out(conv1) == std::vector<std::int64_t>{1, 64, 112, 112});
  CHECK(out(find(resnet, "layer2.0.conv1")) == std::vector<std::int64_t>{1, 128, 28, 28});
  CHECK(out(find(resnet, "layer3.0.downsample")) == std::vector<std::int64_t>{1, 256, 14, 14});
  CHECK(out(find(resnet, "layer4.conv")) == std::vector<std::int64_t>{1, 512, 7, 7});
}

TEST_CASE("workload sets combine, filter by label and drop repeats", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  auto both = resolve_workload_sets(registry, "smoke, gemm-square");
  CHECK(both.size() == 6);
  CHECK(both.front().label == "gemm-tiny");
  CHECK(resolve_workload_sets(registry, "smoke,smoke").size() == 2);

  auto only = resolve_workload_sets(registry, "gemm-square,resnet18-conv", "1024,resnet18-conv:layer3.conv");
  REQUIRE(only.size() == 2);
  CHECK(only[0].label == "1024");
  CHECK(only[1].label == "layer3.conv");
}

TEST_CASE("bad set names, labels and op overrides are clear errors", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  CHECK_THROWS_WITH(resolve_workload_sets(registry, "resnet50"),
                    Catch::Contains("unknown workload set 'resnet50'") && Catch::Contains("gemm-square"));
  CHECK_THROWS_WITH(resolve_workload_sets(registry, ""), Catch::Contains("no workload set given"));
  CHECK_THROWS_WITH(resolve_workload_sets(registry, "gemm-square", "4096"),
                    Catch::Contains("no workload labelled '4096'") && Catch::Contains("2048"));
  CHECK_THROWS_WITH(resolve_workload_sets(registry, "gemm-square", "", "nosuchop"), Catch::Contains("nosuchop"));
  // conv2d does not take gemm's parameters: the override names the workload and the parameter.
  CHECK_THROWS_WITH(resolve_workload_sets(registry, "gemm-square", "", "conv2d"),
                    Catch::Contains("gemm-square:256") && Catch::Contains("conv2d"));
  // The same op as an override is accepted.
  CHECK(resolve_workload_sets(registry, "resnet18-conv", "", "conv2d").size() == 11);
}

TEST_CASE("describe_workload prints gemm positionally and conv2d without its defaults", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  const Op& gemm = registry.get("gemm");
  CHECK(describe_workload(gemm, parse_params(gemm, "M=16,N=4096,K=4096")) == "gemm 16x4096x4096");
  const Op& conv = registry.get("conv2d");
  CHECK(describe_workload(conv, parse_params(conv, "C=64,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1")) ==
        "conv2d C=64,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1");
}
