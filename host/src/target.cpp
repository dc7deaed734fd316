// Compile targets: parsing and normalising triples, the host's own target, and the
// target matching a registered device.
#include "kestrel/host/target.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>

#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include "kestrel/kernel/abi.h"

namespace kestrel::host {
namespace {

std::string supported_list() {
  std::string list = "native";
  for (const std::string& triple : supported_triples()) list += ", " + triple;
  return list;
}

// One of supported_triples() for any spelling LLVM understands of the same target
// ("x86_64-pc-linux-gnu", "armv7l-unknown-linux-gnueabihf"), or nothing.
std::optional<std::string> canonical_triple(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const llvm::Triple triple{llvm::Triple::normalize(llvm::StringRef(text.data(), text.size()))};
  if (triple.getOS() != llvm::Triple::Linux) return std::nullopt;
  const auto env = triple.getEnvironment();
  const bool gnu = env == llvm::Triple::GNU || env == llvm::Triple::UnknownEnvironment;
  switch (triple.getArch()) {
    case llvm::Triple::x86_64:
      if (gnu) return "x86_64-linux-gnu";
      break;
    case llvm::Triple::aarch64:
      if (gnu) return "aarch64-linux-gnu";
      break;
    case llvm::Triple::arm:
    case llvm::Triple::thumb:
      // Only ARMv7-A class cores with hard float: "arm-linux-gnueabihf" alone also
      // names ARMv6 boards (Raspberry Pi OS), where NEON code would fault.
      if (env == llvm::Triple::GNUEABIHF &&
          (triple.getSubArch() == llvm::Triple::ARMSubArch_v7 ||
           triple.getSubArch() == llvm::Triple::ARMSubArch_v8))
        return "armv7a-linux-gnueabihf";
      break;
    case llvm::Triple::riscv64:
      if (gnu) return "riscv64-linux-gnu";
      break;
    default:
      break;
  }
  return std::nullopt;
}

bool valid_cpu(std::string_view cpu) {
  return std::all_of(cpu.begin(), cpu.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == '+';
  });
}

// "+avx2,-fma": comma-separated LLVM features, each with its sign.
void check_features(std::string_view features) {
  std::size_t start = 0;
  while (start <= features.size() && !features.empty()) {
    std::size_t end = features.find(',', start);
    if (end == std::string_view::npos) end = features.size();
    const std::string_view feature = features.substr(start, end - start);
    if (feature.size() < 2 || (feature[0] != '+' && feature[0] != '-') ||
        !valid_cpu(feature.substr(1)) || feature.find('+', 1) != std::string_view::npos)
      throw std::invalid_argument("bad target feature '" + std::string(feature) + "' in '" +
                                  std::string(features) +
                                  "': expected comma-separated +name or -name, e.g. +avx2,-fma");
    start = end + 1;
  }
}

std::string host_cpu() {
  const std::string cpu = llvm::sys::getHostCPUName().str();
  return cpu == "generic" ? std::string() : cpu;
}

Target native_target() {
  const std::string process = llvm::sys::getProcessTriple();
  const std::optional<std::string> triple = canonical_triple(process);
  if (!triple)
    throw std::invalid_argument("this host (" + process +
                                ") is not a supported target: supported targets are " +
                                supported_list());
  Target target;
  target.triple = *triple;
  target.cpu = host_cpu();
  target.native = true;
  return target;
}

std::string this_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

std::string this_machine() {
  struct utsname uts {};
  if (::uname(&uts) != 0) return {};
  return uts.machine;
}

}  // namespace

Target Target::reference_target() const {
  Target out;
  out.triple = triple;
  out.cpu = cpu;
  out.features = features;
  out.traits = traits;
  out.native = native;
  return out;
}

ops::TargetId Target::id() const {
  ops::TargetId id;
  id.backend = backend;
  if (is_gpu()) {
    id.gpu_arch = gpu_arch;
    id.gpu_index = gpu_index;
  } else {
    id.triple = triple;
    id.cpu = cpu;
    id.features = features;
  }
  return id;
}

std::optional<Target> target_of(const ops::TargetId& id) {
  if (id.is_gpu()) {
    Target gpu;
    gpu.backend = id.backend;
    gpu.gpu_arch = id.gpu_arch;
    gpu.gpu_index = id.gpu_index;
    return gpu;
  }
  if (id.triple == "native") return std::nullopt;  // never stored: records name the triple
  try {
    return parse_target(id.triple, id.cpu, id.features);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

const std::vector<std::string>& supported_triples() {
  static const std::vector<std::string> triples = {
      "x86_64-linux-gnu", "aarch64-linux-gnu", "armv7a-linux-gnueabihf", "riscv64-linux-gnu"};
  return triples;
}

Target parse_target(std::string_view triple, std::string_view cpu, std::string_view features) {
  if (!valid_cpu(cpu))
    throw std::invalid_argument("bad target cpu '" + std::string(cpu) +
                                "': expected a CPU or architecture name such as cortex-a72");
  check_features(features);
  Target target;
  if (triple == "native") {
    target = native_target();
  } else if (std::optional<std::string> canonical = canonical_triple(triple)) {
    target.triple = *canonical;
  } else {
    throw std::invalid_argument("unsupported target '" + std::string(triple) +
                                "': supported targets are " + supported_list());
  }
  if (!cpu.empty()) target.cpu = cpu;
  target.features = features;
  target.traits = traits_of(target);
  return target;
}

Target target_for_device(const rpc::DeviceInfo& device) {
  const std::optional<std::string> triple = canonical_triple(device.triple);
  if (!triple)
    throw std::invalid_argument("device '" + device.name + "' registered target '" +
                                device.triple + "', which kestrel cannot compile for: supported targets are " +
                                supported_list());
  if (device.abi_version != 0 && device.abi_version < KESTREL_KERNEL_ABI_VERSION)
    throw std::invalid_argument("device '" + device.name + "' runs kestrel-device " + device.runtime_version +
                                " with kernel ABI v" + std::to_string(device.abi_version) +
                                ", older than the v" + std::to_string(KESTREL_KERNEL_ABI_VERSION) +
                                " kernels this kestrel builds: deploy the matching kestrel-device to it");
  Target target;
  target.triple = *triple;
  // The host's CPU name is only right for the host itself; any other board gets the
  // triple's baseline, which runs on every CPU of that architecture.
  if (!device.hostname.empty() && device.hostname == this_hostname() &&
      device.arch == this_machine()) {
    const std::optional<std::string> native = canonical_triple(llvm::sys::getProcessTriple());
    if (native == triple) {
      target.cpu = host_cpu();
      target.native = true;
    }
  }
  if (!target.native) {
    // What the board reports: its ARM core (-mcpu) or its x86 vector extensions.
    target.cpu = cpu_for_device(device);
    target.features = features_for_device(device);
  }
  target.traits = traits_of(target, &device);
  return target;
}

}  // namespace kestrel::host

namespace kestrel::host {

bool is_gpu_target_spec(std::string_view spec) {
  auto starts = [&](std::string_view prefix) {
    return spec.substr(0, prefix.size()) == prefix &&
           (spec.size() == prefix.size() || spec[prefix.size()] == ':' || spec[prefix.size()] == '#');
  };
  return starts("cuda") || starts("opencl");
}

Target gpu_target_for_device(std::string_view spec, const rpc::DeviceInfo& device) {
  if (!is_gpu_target_spec(spec))
    throw std::invalid_argument("'" + std::string(spec) + "' is not a GPU target (cuda, cuda:sm_XX, opencl)");
  std::string text(spec);
  unsigned index = 0;
  if (auto hash = text.find('#'); hash != std::string::npos) {
    const std::string number = text.substr(hash + 1);
    if (number.empty() || number.size() > 3 || !std::all_of(number.begin(), number.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }))
      throw std::invalid_argument("bad GPU index in target '" + text + "': expected e.g. opencl#1");
    index = static_cast<unsigned>(std::stoul(number));
    text = text.substr(0, hash);
  }
  const bool cuda = text.rfind("cuda", 0) == 0;
  std::string arch = text.size() > (cuda ? 4u : 6u) ? text.substr(cuda ? 5 : 7) : std::string();
  if (!cuda && !arch.empty())
    throw std::invalid_argument("target '" + std::string(spec) + "': opencl takes no architecture");
  Target target = target_for_device(device);
  target.backend = cuda ? ops::Backend::cuda : ops::Backend::opencl;
  target.gpu_index = index;
  const std::string backend(ops::to_string(target.backend));
  const rpc::GpuInfo* gpu = nullptr;
  unsigned count = 0;
  for (const rpc::GpuInfo& g : device.gpus) {
    if (g.backend != backend) continue;
    ++count;
    if (g.index == index) gpu = &g;
  }
  if (!gpu) {
    std::string why;
    if (count > 0) {
      why = "it has " + std::to_string(count) + " " + backend + " device(s), numbered from 0";
    } else {
      why = "it registered no " + backend + " device";
      for (const std::string& note : device.gpu_notes) {
        if (note.find(cuda ? "CUDA" : "OpenCL") != std::string::npos) why += ": " + note;
      }
    }
    throw std::invalid_argument("device '" + device.name + "' cannot run target " + std::string(spec) + ": " + why);
  }
  if (cuda) {
    if (arch.empty()) arch = gpu->version;  // "sm_90"
    const bool sm = arch.rfind("sm_", 0) == 0, compute = arch.rfind("compute_", 0) == 0;
    const std::string digits = arch.substr(sm ? 3 : compute ? 8 : 0);
    if ((!sm && !compute) || digits.size() < 2 || digits.size() > 4 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == 'a' || c == 'f'; }))
      throw std::invalid_argument("bad CUDA architecture '" + arch + "': expected sm_XX (cubin) or compute_XX (PTX), e.g. sm_90");
    target.gpu_arch = arch;
  }
  target.max_threads = gpu->max_threads_per_group;
  target.max_shared_bytes = static_cast<std::int64_t>(gpu->max_shared_bytes);
  return target;
}

std::string check_launch(const ops::KernelSource& source, const Target& target) {
  if (!target.is_gpu()) return {};
  const ops::Launch& launch = source.launch;
  if (target.max_threads > 0 && launch.threads() > target.max_threads) {
    return "launch of " + std::to_string(launch.threads()) + " threads per group exceeds the device's limit of " +
           std::to_string(target.max_threads);
  }
  if (target.max_shared_bytes > 0 && launch.shared_bytes > target.max_shared_bytes) {
    return "kernel needs " + std::to_string(launch.shared_bytes) +
           " bytes of shared/local memory per group, more than the device's " + std::to_string(target.max_shared_bytes);
  }
  return {};
}

}  // namespace kestrel::host
