// GPU module builds: OpenCL source packaging and in-process NVRTC.
#include "gpu_compile.h"

#include <limits>

#include "kestrel/kernel/gpu_module.h"

#if KESTREL_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace kestrel::host::detail {
namespace {

bool launch_fits(const ops::Launch& launch, std::string& why) {
  if (launch.entry.empty()) {
    why = "the kernel source declares no entry point (Launch::entry)";
    return false;
  }
  for (int d = 0; d < 3; ++d) {
    if (launch.grid[d] < 1 || launch.block[d] < 1 ||
        launch.grid[d] > std::numeric_limits<std::uint32_t>::max() ||
        launch.block[d] > std::numeric_limits<std::uint32_t>::max()) {
      why = "launch geometry out of range in dimension " + std::to_string(d);
      return false;
    }
  }
  return true;
}

#if KESTREL_HAVE_NVRTC
// Compiles CUDA C for `arch` ("sm_90": cubin, "compute_90": PTX).
GpuBuild nvrtc_compile(const ops::KernelSource& source, const std::string& arch, std::vector<std::uint8_t>& code) {
  GpuBuild out;
  const std::string text = with_defines(source);
  nvrtcProgram program = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&program, text.c_str(), source.file_name.c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) {
    out.diagnostics = std::string("kestrel: nvrtcCreateProgram: ") + nvrtcGetErrorString(rc) + "\n";
    return out;
  }
  const std::string arch_flag = "--gpu-architecture=" + arch;
  const char* options[] = {arch_flag.c_str(), "--std=c++17", "-default-device"};
  rc = nvrtcCompileProgram(program, 3, options);
  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  if (log_size > 1) {
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(program, log.data());
    while (!log.empty() && log.back() == '\0') log.pop_back();
    out.diagnostics = log;
  }
  if (rc == NVRTC_SUCCESS) {
    const bool cubin = arch.rfind("sm_", 0) == 0;
    std::size_t size = 0;
    rc = cubin ? nvrtcGetCUBINSize(program, &size) : nvrtcGetPTXSize(program, &size);
    if (rc == NVRTC_SUCCESS) {
      code.resize(size);
      rc = cubin ? nvrtcGetCUBIN(program, reinterpret_cast<char*>(code.data()))
                 : nvrtcGetPTX(program, reinterpret_cast<char*>(code.data()));
      if (!cubin) {
        while (!code.empty() && code.back() == 0) code.pop_back();  // the device appends its own NUL
      }
    }
    out.ok = rc == NVRTC_SUCCESS && !code.empty();
    if (!out.ok) out.diagnostics += std::string("kestrel: fetching NVRTC output: ") + nvrtcGetErrorString(rc) + "\n";
  } else if (out.diagnostics.empty()) {
    out.diagnostics = std::string("kestrel: NVRTC: ") + nvrtcGetErrorString(rc) + "\n";
  }
  nvrtcDestroyProgram(&program);
  return out;
}
#endif

}  // namespace

std::string with_defines(const ops::KernelSource& source) {
  std::string text;
  for (const ops::Define& define : source.defines) text += "#define " + define.name + " " + define.value + "\n";
  text += "#line 1 \"" + source.file_name + "\"\n";
  text += source.text;
  return text;
}

std::string nvrtc_version() {
#if KESTREL_HAVE_NVRTC
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "nvrtc";
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
#else
  return {};
#endif
}

GpuBuild build_gpu_module(const ops::KernelSource& source, const Target& target) {
  GpuBuild out;
  const std::string name = source.file_name.empty() ? "kernel" : source.file_name;
  if (source.backend != target.backend) {
    out.diagnostics = "kestrel: " + name + " is a " + std::string(ops::to_string(source.backend)) +
                      " kernel but the target is " + target.to_string() +
                      (target.is_gpu() ? std::string() : ", a CPU target, which takes CPU kernels only") + "\n";
    return out;
  }
  std::string why;
  if (!launch_fits(source.launch, why)) {
    out.diagnostics = "kestrel: " + name + ": " + why + "\n";
    return out;
  }
  kernel::GpuModule module;
  module.entry = source.launch.entry;
  for (int d = 0; d < 3; ++d) {
    module.grid[d] = static_cast<std::uint32_t>(source.launch.grid[d]);
    module.block[d] = static_cast<std::uint32_t>(source.launch.block[d]);
  }
  module.device_index = target.gpu_index;
  if (target.backend == ops::Backend::opencl) {
    module.backend = kernel::GpuBackend::opencl;
    module.code_kind = kernel::GpuCodeKind::opencl_source;
    const std::string text = with_defines(source);
    module.code.assign(text.begin(), text.end());
    out.ok = true;
  } else {
    module.backend = kernel::GpuBackend::cuda;
#if KESTREL_HAVE_NVRTC
    module.code_kind = target.gpu_arch.rfind("sm_", 0) == 0 ? kernel::GpuCodeKind::cubin : kernel::GpuCodeKind::ptx;
    GpuBuild built = nvrtc_compile(source, target.gpu_arch, module.code);
    out.diagnostics = std::move(built.diagnostics);
    out.ok = built.ok;
#else
    out.diagnostics = "kestrel: this kestrel was built without NVRTC (CUDA toolkit not found at configure time); "
                      "it cannot compile CUDA kernels\n";
#endif
  }
  if (out.ok) out.image = kernel::encode_gpu_module(module);
  return out;
}

}  // namespace kestrel::host::detail
