// Target traits of compile targets: the register file LLVM enables for a triple and -mcpu,
// and what a registered device reports (its caches, cores, ARM core, x86 extensions).
#include <catch2/catch.hpp>

#include "kestrel/host/target.h"
#include "kestrel/kernel/abi.h"

using namespace kestrel;
using ops::Isa;

namespace {

rpc::DeviceInfo remote_board(const std::string& triple, const std::string& arch) {
  rpc::DeviceInfo info;
  info.name = "board-a";
  info.hostname = "not-this-host";
  info.arch = arch;
  info.triple = triple;
  info.cores = 4;
  info.caches = {{1, "data", 32 << 10, 64}, {1, "instruction", 48 << 10, 64}, {2, "unified", 1 << 20, 64}};
  return info;
}

}  // namespace

TEST_CASE("traits: the register file follows the triple, -mcpu and features", "[host][traits]") {
  auto isa = [](const char* triple, const char* cpu, const char* features = "") {
    return host::parse_target(triple, cpu, features).traits;
  };
  CHECK(isa("x86_64-linux-gnu", "").isa == Isa::sse);
  CHECK_FALSE(isa("x86_64-linux-gnu", "").fma);
  const ops::TargetTraits haswell = isa("x86_64-linux-gnu", "haswell");
  CHECK(haswell.isa == Isa::avx2);
  CHECK(haswell.vector_floats == 8);
  CHECK(haswell.vector_registers == 16);
  CHECK(haswell.fma);
  const ops::TargetTraits skx = isa("x86_64-linux-gnu", "skylake-avx512");
  CHECK(skx.isa == Isa::avx512);
  CHECK(skx.vector_floats == 16);
  CHECK(skx.vector_registers == 32);
  CHECK(isa("x86_64-linux-gnu", "", "+avx2,+fma").isa == Isa::avx2);
  CHECK(isa("x86_64-linux-gnu", "znver3").isa == Isa::avx2);
  CHECK(isa("aarch64-linux-gnu", "").isa == Isa::neon);
  CHECK(isa("aarch64-linux-gnu", "").vector_registers == 32);
  // ARMv7 without a CPU: -mfpu=neon (VFPv3, no fused multiply-add); Cortex-A7: VFPv4.
  CHECK(isa("armv7a-linux-gnueabihf", "").isa == Isa::neon32);
  CHECK_FALSE(isa("armv7a-linux-gnueabihf", "").fma);
  CHECK(isa("armv7a-linux-gnueabihf", "cortex-a7").fma);
  CHECK(isa("riscv64-linux-gnu", "").isa == Isa::scalar);
  CHECK(haswell.to_string().find("avx2: 16 x 8 floats, fma") == 0);
}

TEST_CASE("traits: this host's target has its own caches and cores", "[host][traits]") {
  const host::Target native = host::parse_target("native");
  CHECK(native.native);
  CHECK(native.traits.cores >= 1);
  CHECK(native.traits.l1d_bytes > 0);
  CHECK(native.traits.l2_bytes >= native.traits.l1d_bytes);
}

TEST_CASE("traits: a remote board compiles for the core and extensions it reports", "[host][traits]") {
  rpc::DeviceInfo pi = remote_board("aarch64-linux-gnu", "aarch64");
  pi.cpu_part = "0x41:0xd08";  // Arm Cortex-A72 (Raspberry Pi 4)
  const host::Target pi_target = host::target_for_device(pi);
  CHECK(pi_target.cpu == "cortex-a72");
  CHECK(pi_target.traits.isa == Isa::neon);
  CHECK(pi_target.traits.cores == 4);
  CHECK(pi_target.traits.l1d_bytes == 32 << 10);
  CHECK(pi_target.traits.l2_bytes == 1 << 20);
  CHECK(pi_target.to_string() == "aarch64-linux-gnu (cortex-a72)");

  rpc::DeviceInfo unknown = remote_board("aarch64-linux-gnu", "aarch64");
  unknown.cpu_part = "0x99:0x123";
  CHECK(host::target_for_device(unknown).cpu.empty());  // the triple's baseline

  rpc::DeviceInfo server = remote_board("x86_64-linux-gnu", "x86_64");
  server.cpu_features = {"avx", "avx2", "avx512bw", "avx512dq", "avx512f", "avx512vl", "fma", "sse4_2"};
  const host::Target server_target = host::target_for_device(server);
  CHECK(server_target.features == "+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl");
  CHECK(server_target.traits.isa == Isa::avx512);
  CHECK(server_target.traits.fma);

  rpc::DeviceInfo old = remote_board("x86_64-linux-gnu", "x86_64");
  old.cpu_features = {"avx", "sse4_2"};
  CHECK(host::target_for_device(old).traits.isa == Isa::sse);
}

TEST_CASE("targets: a device whose runtime implements an older kernel ABI is refused by name", "[host][traits]") {
  rpc::DeviceInfo old = remote_board("aarch64-linux-gnu", "aarch64");
  old.runtime_version = "0.1.0";
  old.abi_version = KESTREL_KERNEL_ABI_VERSION - 1;
  CHECK_THROWS_WITH(host::target_for_device(old),
                    Catch::Contains("device 'board-a' runs kestrel-device 0.1.0 with kernel ABI v" +
                                    std::to_string(KESTREL_KERNEL_ABI_VERSION - 1)) &&
                        Catch::Contains("deploy the matching kestrel-device"));
  rpc::DeviceInfo current = old;
  current.abi_version = KESTREL_KERNEL_ABI_VERSION;
  CHECK_NOTHROW(host::target_for_device(current));
  current.abi_version = 0;  // runtimes from before the field was set
  CHECK_NOTHROW(host::target_for_device(current));
}
