// GPU kernel modules: what the host uploads for a CUDA or OpenCL candidate. The image is
// the magic "KGPUMOD1" followed by session.capnp's GpuModule as a flat array, so the
// device's module store keeps it like any other module and the worker tells the kinds
// apart by the first bytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kestrel::kernel {

enum class GpuBackend : std::uint8_t { cuda, opencl };
enum class GpuCodeKind : std::uint8_t { opencl_source, ptx, cubin };

struct GpuModule {
  GpuBackend backend = GpuBackend::opencl;
  GpuCodeKind code_kind = GpuCodeKind::opencl_source;
  std::vector<std::uint8_t> code;
  std::string entry;                          // kernel function name
  std::array<std::uint32_t, 3> grid{1, 1, 1};   // blocks / work-groups
  std::array<std::uint32_t, 3> block{1, 1, 1};  // threads / work-items per group
  std::uint32_t shared_bytes = 0;             // dynamic shared memory (CUDA)
  std::string build_options;                  // OpenCL
  std::uint32_t device_index = 0;
};

inline constexpr char kGpuModuleMagic[8] = {'K', 'G', 'P', 'U', 'M', 'O', 'D', '1'};

std::vector<std::uint8_t> encode_gpu_module(const GpuModule& module);
// True when `image` starts with the GPU module magic (whether or not the rest is valid).
bool is_gpu_module(std::span<const std::uint8_t> image);
// Decodes an image; false with `error` set when it is malformed (bad magic, truncated,
// invalid Cap'n Proto, geometry lists not of length 3, empty entry or code).
bool decode_gpu_module(std::span<const std::uint8_t> image, GpuModule& out, std::string& error);

std::string_view to_string(GpuBackend backend);

}  // namespace kestrel::kernel
