// The built-in ops' kernels and references compile for every supported target, and
// the objects carry the right machine type.
#include <catch2/catch.hpp>

#include "support/traits.h"
#include "kestrel/host/compiler.h"
#include "kestrel/ops/op.h"

using namespace kestrel;

TEST_CASE("gemm and conv2d compile for every supported triple", "[host][ops]") {
  const std::map<std::string, std::string> machine = {{"x86_64-linux-gnu", "x86_64"},
                                                      {"aarch64-linux-gnu", "aarch64"},
                                                      {"armv7a-linux-gnueabihf", "arm"},
                                                      {"riscv64-linux-gnu", "riscv64"}};
  ops::Registry registry = ops::builtin_ops();
  const std::vector<std::pair<std::string, std::string>> workloads = {
      {"gemm", "M=128,N=96,K=64"}, {"conv2d", "N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1"}};
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
