// A test-only op for the tuner's tests: given knob domains and a constraint, nothing
// else (no kernels).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::test {

class ToyOp final : public ops::Op {
 public:
  ToyOp(std::vector<ops::Knob> knobs, std::function<bool(const ops::Config&)> ok)
      : knobs_(std::move(knobs)), ok_(std::move(ok)) {}

  std::string_view name() const override { return "toy"; }
  std::string_view description() const override { return "test-only op"; }
  std::vector<ops::ParamSpec> params() const override { return {}; }
  void validate(const ops::Params&) const override {}
  std::vector<ops::TensorSpec> tensors(const ops::Params&) const override { return {}; }
  double flops(const ops::Params&) const override { return 1; }
  std::vector<ops::Knob> knobs(const ops::Params&) const override { return knobs_; }
  std::string check(const ops::Params&, const ops::Config& config, const ops::TargetTraits&) const override {
    for (const auto& knob : knobs_) {
      auto it = config.find(knob.name);
      if (it == config.end()) return "missing " + knob.name;
      if (std::find(knob.values.begin(), knob.values.end(), it->second) == knob.values.end()) return "domain";
    }
    return ok_(config) ? "" : "constraint";
  }
  ops::Config default_config(const ops::Params&, const ops::TargetTraits&) const override {
    ops::Config out;
    for (const auto& knob : knobs_) out[knob.name] = knob.values.front();
    return out;
  }
  std::vector<ops::Backend> backends() const override { return {ops::Backend::cpu}; }
  ops::KernelSource source(ops::Backend, const ops::Params&, const ops::Config&) const override {
    throw ops::OpError("toy has no kernel");
  }
  ops::KernelSource reference(const ops::Params&) const override { throw ops::OpError("toy has no kernel"); }
  double tolerance(const ops::Params&) const override { return 0; }
  // Vendor kernels by implementation name (no source: only an evaluator that does not
  // compile, the synthetic one, can measure them).
  void set_vendors(std::vector<std::string> implementations) { vendors_ = std::move(implementations); }
  std::vector<ops::VendorKernel> vendor_kernels(const ops::Params&) const override {
    std::vector<ops::VendorKernel> out;
    for (const auto& name : vendors_) out.push_back({name, "test vendor " + name, {}});
    return out;
  }

 private:
  std::vector<ops::Knob> knobs_;
  std::function<bool(const ops::Config&)> ok_;
  std::vector<std::string> vendors_;
};

}  // namespace kestrel::test
