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

TEST_CASE("the MobileNetV2 and ResNeXt-50 sets hold their depthwise and grouped layers", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  auto dw = resolve_workload_sets(registry, "mobilenetv2-dw");
  REQUIRE(dw.size() == 10);
  for (const auto& w : dw) {
    CHECK(w.op->name() == "depthwise_conv2d");
    CHECK(w.params.at("R") == 3);
    CHECK(w.params.at("pad") == 1);
  }
  CHECK(dw.front().params.at("C") == 32);
  CHECK(dw.front().params.at("H") == 112);
  CHECK(dw.back().params.at("C") == 960);
  CHECK(dw.back().params.at("H") == 7);
  auto grouped = resolve_workload_sets(registry, "resnext50-grouped");
  REQUIRE(grouped.size() == 7);
  for (const auto& w : grouped) {
    CHECK(w.params.at("groups") == 32);
    CHECK(w.op->tensors(w.params)[1].shape[1] == w.params.at("C") / 32);  // 4, 8, 16, 32 channels per group
  }
  // The same layers in the blocked layout, where a group holds whole blocks of 16.
  CHECK(resolve_workload_sets(registry, "resnext50-grouped", "layer3.conv2", "conv2d_nchwc").size() == 1);
  CHECK_THROWS_WITH(resolve_workload_sets(registry, "resnext50-grouped", "layer2.conv2", "conv2d_nchwc"),
                    Catch::Contains("multiples of block=16"));
}

TEST_CASE("the BERT glue and CNN pooling sets hold their softmax, add & norm, GELU and pools", "[ops][workload-sets]") {
  Registry registry = builtin_ops();
  auto bert = resolve_workload_sets(registry, "bert-glue");
  REQUIRE(bert.size() == 6);
  CHECK(bert[0].op->name() == "softmax");
  CHECK(bert[0].params.at("rows") == 12 * 128);  // 12 heads x 128 queries
  CHECK(bert[1].op->name() == "layernorm");
  CHECK(bert[1].op->tensors(bert[1].params).size() == 5);  // x, gamma, beta, residual, y
  CHECK(bert[1].params.at("eps") == 12);
  CHECK(bert[2].op->name() == "elementwise");
  CHECK(bert[2].params.at("n") == 128 * 3072);
  CHECK(bert[5].params.at("n") == 384 * 3072);
  auto pools = resolve_workload_sets(registry, "cnn-pool");
  REQUIRE(pools.size() == 3);
  CHECK(pools[0].op->tensors(pools[0].params)[1].shape == std::vector<std::int64_t>{1, 4, 56, 56, 16});
  CHECK(pools[1].op->tensors(pools[1].params)[1].shape == std::vector<std::int64_t>{1, 128, 1, 1, 16});
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

  auto attention = resolve_workload_sets(registry, "bert-attention");
  REQUIRE(attention.size() == 4);
  CHECK(find(attention, "qk-384").params ==
        Params{{"batch", 12}, {"M", 384}, {"N", 384}, {"K", 64}, {"trans_b", 1}});
  CHECK(find(attention, "pv-128").params == Params{{"batch", 12}, {"M", 128}, {"N", 64}, {"K", 128}});
  auto bert = resolve_workload_sets(registry, "bert-base");
  REQUIRE(bert.size() == 8);
  CHECK(find(bert, "ffn-up").params ==
        Params{{"M", 128}, {"N", 3072}, {"K", 768}, {"bias", 1}, {"act", 3}});
  CHECK(find(bert, "softmax").op->name() == "softmax");
  CHECK(find(bert, "norm").params.at("eps") == 12);

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
