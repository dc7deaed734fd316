// The library contenders' problems: grouped and depthwise convolutions, and their fused
// epilogues, are recognised from the ops' parameters, and every library built in computes
// them (checked against a plain loop here, so a wrong group offset or epilogue shows).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "kestrel/compare/libraries.h"

using namespace kestrel;
using compare::Problem;

namespace {

// out[n][k][p][q] of a grouped convolution with its epilogue, straight from the definition.
std::vector<float> grouped_conv(const Problem& p, const std::vector<float>& in, const std::vector<float>& w,
                                const std::vector<float>& bias, const std::vector<float>& residual) {
  const std::int64_t cg = p.c / p.groups, kg = p.out_c / p.groups;
  std::vector<float> out(static_cast<std::size_t>(p.batch * p.out_c * p.p() * p.q()));
  for (std::int64_t n = 0; n < p.batch; ++n) {
    for (std::int64_t k = 0; k < p.out_c; ++k) {
      for (std::int64_t y = 0; y < p.p(); ++y) {
        for (std::int64_t x = 0; x < p.q(); ++x) {
          double sum = 0;
          for (std::int64_t c = 0; c < cg; ++c) {
            for (std::int64_t r = 0; r < p.r; ++r) {
              for (std::int64_t s = 0; s < p.s; ++s) {
                std::int64_t iy = y * p.stride - p.pad + r * p.dilation, ix = x * p.stride - p.pad + s * p.dilation;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                sum += static_cast<double>(in[static_cast<std::size_t>(((n * p.c + k / kg * cg + c) * p.h + iy) * p.w + ix)]) *
                       w[static_cast<std::size_t>(((k * cg + c) * p.r + r) * p.s + s)];
              }
            }
          }
          const auto at = static_cast<std::size_t>(((n * p.out_c + k) * p.p() + y) * p.q() + x);
          if (p.bias) sum += bias[static_cast<std::size_t>(k)];
          if (p.residual) sum += residual[at];
          if (p.act == 1) sum = std::max(sum, 0.0);
          if (p.act == 2) sum = std::min(std::max(sum, 0.0), 6.0);
          if (p.act == 3) sum = 0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0)));
          out[at] = static_cast<float>(sum);
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("grouped and depthwise convolutions are problems the libraries know", "[compare]") {
  ops::Registry registry = ops::builtin_ops();
  const ops::Op& conv = registry.get("conv2d");
  auto grouped = compare::problem_for(conv, ops::parse_params(conv, "C=8,H=9,W=9,K=12,R=3,S=3,pad=1,groups=4"));
  REQUIRE(grouped);
  CHECK(grouped->groups == 4);
  CHECK(grouped->input_shapes()[1] == std::vector<std::int64_t>{12, 2, 3, 3});
  // The op's own tensors are the canonical ones: the libraries read Kestrel's inputs.
  CHECK(compare::canonical_layout(conv, ops::parse_params(conv, "C=8,H=9,W=9,K=12,R=3,S=3,pad=1,groups=4"), *grouped));

  const ops::Op& dw = registry.get("depthwise_conv2d");
  auto depthwise = compare::problem_for(dw, ops::parse_params(dw, "C=24,H=14,W=14,stride=2,pad=1,block=8"));
  REQUIRE(depthwise);
  CHECK(depthwise->out_c == 24);
  CHECK(depthwise->groups == 24);
  CHECK(depthwise->p() == 7);
  CHECK(depthwise->input_shapes()[1] == std::vector<std::int64_t>{24, 1, 3, 3});

  // A fused epilogue is compared too (oneDNN's post-ops, OpenBLAS with one more pass).
  auto fused = compare::problem_for(dw, ops::parse_params(dw, "C=24,H=14,W=14,pad=1,act=2"));
  REQUIRE(fused);
  CHECK(fused->act == 2);
  CHECK(fused->input_shapes().size() == 2);
  const ops::Op& nchwc = registry.get("conv2d_nchwc");
  auto shortcut =
      compare::problem_for(nchwc, ops::parse_params(nchwc, "C=16,H=7,W=7,K=16,R=3,S=3,pad=1,bias=1,residual=1"));
  REQUIRE(shortcut);
  REQUIRE(shortcut->input_shapes().size() == 4);
  CHECK(shortcut->input_shapes()[2] == std::vector<std::int64_t>{16});
  CHECK(shortcut->input_shapes()[3] == std::vector<std::int64_t>{1, 16, 7, 7});
  CHECK_FALSE(compare::problem_for(nchwc, ops::parse_params(nchwc, "C=16,H=7,W=7,K=16,R=3,S=3,pad=1,block=8"))->bias);
}

TEST_CASE("every library built in computes grouped and depthwise convolutions, with epilogues",
          "[compare]") {
  compare::set_library_threads(1);
  for (const char* shape : {"grouped", "depthwise", "grouped+bias+residual+gelu", "depthwise+bias+relu6"}) {
    Problem p;
    p.kind = Problem::Kind::conv2d;
    const std::string name = shape;
    if (name.rfind("grouped", 0) == 0) {
      p.c = 8, p.h = 7, p.w = 9, p.out_c = 12, p.r = 3, p.s = 3, p.pad = 1, p.groups = 4;
    } else {
      p.c = 6, p.h = 9, p.w = 8, p.out_c = 6, p.r = 3, p.s = 3, p.stride = 2, p.pad = 1, p.groups = 6;
    }
    p.bias = name.find("bias") != std::string::npos;
    p.residual = name.find("residual") != std::string::npos;
    p.act = name.find("gelu") != std::string::npos ? 3 : name.find("relu6") != std::string::npos ? 2 : 0;
    INFO(shape);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> in(static_cast<std::size_t>(p.c * p.h * p.w)), w(static_cast<std::size_t>(p.out_c * p.c / p.groups * 9));
    std::vector<float> bias(static_cast<std::size_t>(p.out_c)), residual(static_cast<std::size_t>(p.out_c * p.p() * p.q()));
    for (auto* buffer : {&in, &w, &bias, &residual}) {
      for (auto& v : *buffer) v = dist(rng);
    }
    const auto want = grouped_conv(p, in, w, bias, residual);
    std::vector<const float*> inputs = {in.data(), w.data()};
    if (p.bias) inputs.push_back(bias.data());
    if (p.residual) inputs.push_back(residual.data());
    std::vector<std::string> notes;
    auto contenders = compare::make_contenders(p, inputs, notes);
    for (const auto& note : notes) WARN(note);
    auto status = compare::library_status();
    CHECK(contenders.size() == (status.openblas ? 1u : 0u) + (status.onednn ? 2u : 0u));
    for (auto& contender : contenders) {
      INFO(contender->name() << ": " << contender->description());
      contender->run();
      auto got = contender->output();
      REQUIRE(got.size() == want.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < want.size(); ++i) bad += std::fabs(got[i] - want[i]) > 1e-4f * (1 + std::fabs(want[i]));
      CHECK(bad == 0);
    }
  }
}
