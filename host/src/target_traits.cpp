// Target traits of a CPU compile target: the register file from what LLVM enables for the
// triple, -mcpu and features; caches and cores from the device's registered capabilities
// (or this host's, for the native target).
#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include "frontend.h"
#include "kestrel/base/cpu_caches.h"
#include "kestrel/host/target.h"

namespace kestrel::host {
namespace {

// The subtarget LLVM builds for the target; null when the triple has no backend here.
std::unique_ptr<llvm::MCSubtargetInfo> subtarget(const Target& target) {
  detail::initialize_llvm();
  std::string error;
  const llvm::Triple triple(llvm::Triple::normalize(target.triple));
  const llvm::Target* backend = llvm::TargetRegistry::lookupTarget(triple.str(), error);
  if (backend == nullptr) return nullptr;
  // An ARMv7 target without a CPU is compiled with -mfpu=neon (frontend.cpp).
  std::string features = target.features;
  if (triple.isARM() && target.cpu.empty()) features = "+neon" + (features.empty() ? "" : "," + features);
  const std::string cpu = target.cpu.empty() ? (triple.isX86() ? "x86-64" : "generic") : target.cpu;
  return std::unique_ptr<llvm::MCSubtargetInfo>(backend->createMCSubtargetInfo(triple.str(), cpu, features));
}

bool has(const llvm::MCSubtargetInfo* info, const char* feature) {
  return info != nullptr && info->checkFeatures(std::string("+") + feature);
}

// The register file the target's code is compiled for.
ops::TargetTraits register_file(const Target& target) {
  const llvm::Triple triple(llvm::Triple::normalize(target.triple));
  const auto info = subtarget(target);
  if (triple.isX86()) {
    ops::TargetTraits t = ops::TargetTraits::of(has(info.get(), "avx512f")  ? ops::Isa::avx512
                                                : has(info.get(), "avx2") ? ops::Isa::avx2
                                                                          : ops::Isa::sse);
    t.fma = has(info.get(), "fma");
    return t;
  }
  if (triple.isAArch64()) return ops::TargetTraits::of(ops::Isa::neon);
  if (triple.isARM()) {
    ops::TargetTraits t = ops::TargetTraits::of(has(info.get(), "neon") ? ops::Isa::neon32 : ops::Isa::scalar);
    t.fma = has(info.get(), "vfp4");
    return t;
  }
  return ops::TargetTraits::of(ops::Isa::scalar);
}

void apply_caches(ops::TargetTraits& traits, const std::vector<rpc::CacheInfo>& caches) {
  for (const auto& cache : caches) {
    if (cache.size_bytes == 0) continue;
    const auto bytes = static_cast<std::int64_t>(cache.size_bytes);
    if (cache.level == 1 && cache.kind == "data") traits.l1d_bytes = bytes;
    if (cache.level == 2 && cache.kind != "instruction") traits.l2_bytes = bytes;
    if (cache.level == 3 && cache.kind != "instruction") traits.l3_bytes = bytes;
  }
}

}  // namespace

ops::TargetTraits traits_of(const Target& target, const rpc::DeviceInfo* device) {
  ops::TargetTraits traits = register_file(target.reference_target());
  if (device != nullptr) {
    apply_caches(traits, device->caches);
    traits.cores = static_cast<int>(std::max(1u, device->cores));
  } else if (target.native) {
    apply_caches(traits, read_cpu_caches());
    traits.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return traits;
}

std::string features_for_device(const rpc::DeviceInfo& device) {
  auto has_flag = [&](const char* flag) {
    return std::find(device.cpu_features.begin(), device.cpu_features.end(), flag) != device.cpu_features.end();
  };
  const llvm::Triple triple(llvm::Triple::normalize(device.triple));
  if (!triple.isX86()) return {};
  std::string out;
  auto add = [&](const char* feature) { out += (out.empty() ? "+" : ",+") + std::string(feature); };
  if (has_flag("avx2")) add("avx2");
  if (has_flag("fma")) add("fma");
  if (has_flag("f16c")) add("f16c");
  if (has_flag("avx512f") && has_flag("avx512bw") && has_flag("avx512dq") && has_flag("avx512vl")) {
    add("avx512f");
    add("avx512bw");
    add("avx512dq");
    add("avx512vl");
  }
  return out;
}

std::string cpu_for_device(const rpc::DeviceInfo& device) {
  if (device.cpu_part.empty()) return {};
  const auto colon = device.cpu_part.find(':');
  if (colon == std::string::npos) return {};
  const std::string cpuinfo = "CPU implementer\t: " + device.cpu_part.substr(0, colon) + "\nCPU part\t: " +
                              device.cpu_part.substr(colon + 1) + "\n";
  const std::string cpu = llvm::sys::detail::getHostCPUNameForARM(cpuinfo).str();
  return cpu == "generic" ? std::string() : cpu;
}

}  // namespace kestrel::host
