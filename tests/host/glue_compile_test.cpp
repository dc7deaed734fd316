// The glue ops' kernels (pool2d, softmax, layernorm, elementwise) and references compile
// for every supported target with the target's own default and its widest valid
// configuration, and their CUDA kernels compile with NVRTC (when built with it). This
// executable links libclang-cpp: it never loads OpenCL.
#include <catch2/catch.hpp>

#include "kestrel/host/compiler.h"
#include "kestrel/host/target.h"
#include "kestrel/kernel/gpu_module.h"
#include "kestrel/ops/op.h"

using namespace kestrel;

namespace {

const std::vector<std::pair<std::string, std::string>> kWorkloads = {
    {"pool2d", "N=2,C=13,H=9,W=11,R=3,S=3,stride=2,pad=1,kind=1,block=8"},
    {"pool2d", "C=40,H=7,W=7,kind=0,global=1,block=16"},
    {"softmax", "rows=7,cols=33"},
    {"layernorm", "rows=5,cols=37,eps=12,residual=1"},
    {"elementwise", "n=1037,kind=5"},
    {"elementwise", "n=1037,kind=6"},
    {"elementwise", "n=1037,kind=7"},
    {"elementwise", "n=1037,kind=1"},
};

}  // namespace

TEST_CASE("the glue ops compile for every supported triple", "[host][ops][glue]") {
  ops::Registry registry = ops::builtin_ops();
  host::Compiler compiler({2});
  std::vector<host::CompileRequest> requests;
  for (const auto& [name, shape] : kWorkloads) {
    const ops::Op& op = registry.get(name);
    ops::Params params = ops::parse_params(op, shape);
    for (const auto& triple : host::supported_triples()) {
      host::Target target = host::parse_target(triple);
      // The target's default, and 16-float vectors unrolled as far as its registers allow
      // (split into several registers where they are narrower).
      ops::Config config = op.default_config(params, target.traits);
      REQUIRE(op.check(params, config, target.traits).empty());
      requests.push_back({op.source(ops::Backend::cpu, params, config), target});
      ops::Config wide = config;
      if (wide.count("vec")) wide["vec"] = 16;
      if (wide.count("tw")) wide["tw"] = 8;
      for (auto unroll : {8, 4, 2, 1}) {
        if (wide.count("unroll")) wide["unroll"] = unroll;
        if (op.check(params, wide, target.traits).empty()) break;
      }
      if (op.check(params, wide, target.traits).empty()) requests.push_back({op.source(ops::Backend::cpu, params, wide), target});
      requests.push_back({op.reference(params), target});
    }
  }
  auto results = compiler.compile_all(requests);
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO(requests[i].source.file_name << " for " << requests[i].target.to_string() << ":\n" << results[i].diagnostics);
    CHECK(results[i].ok);
  }
}

TEST_CASE("the glue ops' CUDA kernels compile with NVRTC", "[host][compiler][gpu][cuda][glue]") {
  rpc::DeviceInfo device;
  device.name = "h100-a";
  device.hostname = "some-other-host";
  device.arch = "x86_64";
  device.triple = "x86_64-linux-gnu";
  device.gpus.push_back({"cuda", 0, "NVIDIA H100", "NVIDIA", "sm_90", "CUDA 13.0", 80ull << 30, 132, 1024, 227 * 1024, 50 << 20});
  host::Target sm90 = host::gpu_target_for_device("cuda", device);
  ops::Registry registry = ops::builtin_ops();
  host::Compiler compiler({1});
  for (const auto& [name, shape] : kWorkloads) {
    const ops::Op& op = registry.get(name, ops::Backend::cuda);
    ops::Params params = ops::parse_params(op, shape);
    ops::KernelSource source = op.source(ops::Backend::cuda, params, op.default_config(params, ops::TargetTraits{}));
    host::CompileResult r = compiler.compile({source, sm90});
    INFO(name << " " << shape << ": " << r.diagnostics);
#if KESTREL_HAVE_NVRTC
    REQUIRE(r.ok);
    kernel::GpuModule module;
    std::string error;
    REQUIRE(kernel::decode_gpu_module(r.shared_object, module, error));
    CHECK(module.entry == name);
    CHECK(module.code_kind == kernel::GpuCodeKind::cubin);
#else
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.diagnostics, Catch::Contains("without NVRTC"));
#endif
  }
}
