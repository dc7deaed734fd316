// The built-in ops' kernels and references compile for every supported target, and
// the objects carry the right machine type.
#include <catch2/catch.hpp>

#include "support/traits.h"
#include "kestrel/host/compiler.h"
#include "kestrel/ops/op.h"

using namespace kestrel;

TEST_CASE("gemm and the convolutions compile for every supported triple", "[host][ops]") {
  const std::map<std::string, std::string> machine = {{"x86_64-linux-gnu", "x86_64"},
                                                      {"aarch64-linux-gnu", "aarch64"},
                                                      {"armv7a-linux-gnueabihf", "arm"},
                                                      {"riscv64-linux-gnu", "riscv64"}};
  ops::Registry registry = ops::builtin_ops();
  const std::vector<std::pair<std::string, std::string>> workloads = {
      {"gemm", "M=128,N=96,K=64"},
      {"conv2d", "N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1"},
      {"conv2d", "C=16,H=14,W=14,K=32,R=3,S=3,pad=1,groups=4"},
      // The epilogues include the kernel math header, which the compiler serves from memory.
      {"conv2d_nchwc", "C=32,H=14,W=14,K=32,R=3,S=3,pad=1,groups=2,block=8,residual=1,act=2"},
      {"depthwise_conv2d", "C=20,H=14,W=14,stride=2,pad=1,block=16,bias=1,act=3"},
      {"conv2d_winograd", "C=20,H=14,W=14,K=24,R=3,S=3,pad=1,block=4,bias=1,act=6"},
      {"conv2d_winograd", "C=32,H=28,W=28,K=32,R=3,S=3,pad=1,block=8,m=2,residual=1"}};
  host::Compiler compiler({2});
  std::vector<host::CompileRequest> requests;
  std::vector<std::string> expected;
  for (const auto& [name, shape] : workloads) {
    const ops::Op& op = registry.get(name);
    ops::Params params = ops::parse_params(op, shape);
    ops::Config config = op.default_config(params, test::fixed_traits());
    REQUIRE(op.check(params, config, test::fixed_traits()).empty());
    for (const auto& triple : host::supported_triples()) {
      host::Target target = host::parse_target(triple);
      requests.push_back({op.source(ops::Backend::cpu, params, config), target});
      requests.push_back({op.reference(params), target});
      expected.push_back(machine.at(triple));
      expected.push_back(machine.at(triple));
    }
  }
  // A CPU-specific build too, as --mcpu would give for a Raspberry Pi 4.
  requests.push_back({registry.get("gemm").source(ops::Backend::cpu, ops::parse_params(registry.get("gemm"), "64x64x64"),
                                                  registry.get("gemm").default_config(
                                                      ops::parse_params(registry.get("gemm"), "64x64x64"), test::fixed_traits())),
                      host::parse_target("aarch64-linux-gnu", "cortex-a72")});
  expected.push_back("aarch64");

  auto results = compiler.compile_all(requests);
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO(requests[i].source.file_name << " for " << requests[i].target.to_string() << ":\n" << results[i].diagnostics);
    REQUIRE(results[i].ok);
    CHECK(host::elf_machine(results[i].shared_object) == expected[i]);
    CHECK(results[i].hash.size() == 64);
  }
}

TEST_CASE("batch_matmul and gemm with an epilogue compile for every triple with that target's default", "[host][ops]") {
  // Each target's own default (its register file: NEON 8x12, ARMv7 6x8, ...), which the
  // kernels' compile-time register checks must accept, and the references.
  ops::Registry registry = ops::builtin_ops();
  const std::vector<std::pair<std::string, std::string>> workloads = {
      {"batch_matmul", "batch=12,M=128,N=128,K=64,trans_b=1"},
      {"batch_matmul", "batch=2,M=37,N=45,K=70,trans_a=1"},
      {"gemm", "M=37,N=70,K=100,bias=1,residual=1,act=3"}};
  host::Compiler compiler({2});
  std::vector<host::CompileRequest> requests;
  std::vector<std::string> labels;
  for (const auto& [name, shape] : workloads) {
    const ops::Op& op = registry.get(name);
    ops::Params params = ops::parse_params(op, shape);
    for (const auto& triple : host::supported_triples()) {
      host::Target target = host::parse_target(triple);
      ops::Config config = op.default_config(params, target.traits);
      INFO(name << " " << shape << " on " << target.traits.to_string() << ": " << ops::format_config(config));
      REQUIRE(op.check(params, config, target.traits).empty());
      requests.push_back({op.source(ops::Backend::cpu, params, config), target});
      requests.push_back({op.reference(params), target});
      labels.push_back(ops::format_config(config));
      labels.push_back("reference");
    }
  }
  auto results = compiler.compile_all(requests);
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO(requests[i].source.file_name << " [" << labels[i] << "] for " << requests[i].target.to_string() << ":\n"
                                      << results[i].diagnostics);
    CHECK(results[i].ok);
  }
}
