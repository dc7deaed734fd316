// Compile targets: a triple plus an optional CPU and feature string, e.g.
// aarch64-linux-gnu with -mcpu=cortex-a72 for a Raspberry Pi 4; or one GPU of a device:
// CUDA with an sm_XX (cubin) or compute_XX (PTX) architecture, or OpenCL (source
// shipped to the device's driver).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"
#include "kestrel/ops/target_id.h"
#include "kestrel/rpc/device_info.h"

namespace kestrel::host {

struct Target {
  ops::Backend backend = ops::Backend::cpu;
  // CPU targets: the triple compiled for. GPU targets: the device's CPU triple, which
  // the reference kernel (always a CPU kernel) is compiled for.
  std::string triple;    // one of supported_triples()
  std::string cpu;       // -mcpu / -march value; empty: the triple's generic baseline
  std::string features;  // extra LLVM features, e.g. "+avx512f"; usually empty
  std::string gpu_arch;  // CUDA: "sm_90" (cubin) or "compute_90" (PTX); empty otherwise
  unsigned gpu_index = 0;  // which of the device's GPUs of this backend
  // The GPU's limits as registered (0: unknown); see check_launch().
  std::int64_t max_threads = 0;
  std::int64_t max_shared_bytes = 0;
  // What the CPU code compiled for this target can use (register file, FMA) and the
  // caches and cores of the device it runs on: ops' constraints and defaults read them.
  // Filled by parse_target() and target_for_device(); GPU targets carry their device's
  // CPU traits (the reference kernel's).
  ops::TargetTraits traits = ops::TargetTraits::of(ops::Isa::sse);
  bool native = false;  // this host's own CPU ("native")

  bool is_gpu() const { return backend != ops::Backend::cpu; }
  // The CPU target of the reference kernel: the triple, cpu and features alone.
  Target reference_target() const;
  // Its identity (what the records keep): backend, triple, cpu, features, GPU arch and index.
  ops::TargetId id() const;
  // "aarch64-linux-gnu", "aarch64-linux-gnu (cortex-a72)", "cuda sm_90", "opencl",
  // "opencl #1" (the device's second OpenCL device): id().to_string().
  std::string to_string() const { return id().to_string(); }
};

// The target of an identity (a record's): a CPU target through parse_target (its traits
// those the triple, -mcpu and features give); a GPU target with its backend, arch and
// index and a CPU reference target's default traits. Nothing for a triple Kestrel
// cannot compile for.
std::optional<Target> target_of(const ops::TargetId& id);

// The traits of code compiled for `target` (its triple, -mcpu and features, as LLVM
// enables them) on `device` (its caches and cores; this host's for a native target
// without a device; typical ones of the ISA otherwise).
ops::TargetTraits traits_of(const Target& target, const rpc::DeviceInfo* device = nullptr);

// The -mcpu for a device from what it reports: an ARM board's CPU implementer and part
// (e.g. "0x41:0xd08" is cortex-a72); empty when unknown or not ARM.
std::string cpu_for_device(const rpc::DeviceInfo& device);
// LLVM features for an x86 device from the CPU flags it reports (e.g. "+avx2,+fma"),
// so that a remote x86 board gets its vector ISA without naming its CPU; empty elsewhere.
std::string features_for_device(const rpc::DeviceInfo& device);

// The CPU triples Kestrel can compile for.
const std::vector<std::string>& supported_triples();

// "native" (this host, with its CPU), or a supported triple. Throws std::invalid_argument
// with the list of supported triples for anything else.
Target parse_target(std::string_view triple, std::string_view cpu = "", std::string_view features = "");

// The target matching a device's registered capabilities: its triple; its CPU when the
// device is this very host, else the CPU (ARM) or vector features (x86) it reports; its
// traits. Throws std::invalid_argument if the device's triple is not
// supported.
Target target_for_device(const rpc::DeviceInfo& device);

// A GPU target on a registered device: "cuda" (the arch of the device's GPU), "cuda:sm_80",
// "cuda:compute_90" (PTX), "opencl", with an optional "#N" suffix choosing the device's
// Nth GPU of that backend ("opencl#1"). Throws std::invalid_argument saying what the
// device has (and why it has nothing, from its GPU notes) when the spec does not fit.
// The reference kernel's CPU target comes from target_for_device().
Target gpu_target_for_device(std::string_view spec, const rpc::DeviceInfo& device);
// True for the specs gpu_target_for_device() accepts (by their backend prefix).
bool is_gpu_target_spec(std::string_view spec);

// Empty when `source`'s launch fits the target's GPU limits; otherwise why not (an
// instantiation error: rejected before compiling). CPU targets: always empty.
std::string check_launch(const ops::KernelSource& source, const Target& target);

}  // namespace kestrel::host
