// GPU module images: magic + GpuModule flat array.
#include "kestrel/kernel/gpu_module.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "kestrel/kernel/format/gpu_module.capnp.h"

namespace kestrel::kernel {

std::string_view to_string(GpuBackend backend) { return backend == GpuBackend::cuda ? "cuda" : "opencl"; }

std::vector<std::uint8_t> encode_gpu_module(const GpuModule& module) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<format::GpuModule>();
  out.setBackend(module.backend == GpuBackend::cuda ? format::GpuBackend::CUDA : format::GpuBackend::OPENCL);
  switch (module.code_kind) {
    case GpuCodeKind::opencl_source: out.setCodeKind(format::GpuCodeKind::OPENCL_SOURCE); break;
    case GpuCodeKind::ptx: out.setCodeKind(format::GpuCodeKind::PTX); break;
    case GpuCodeKind::cubin: out.setCodeKind(format::GpuCodeKind::CUBIN); break;
  }
  out.setCode(kj::arrayPtr(module.code.data(), module.code.size()));
  out.setEntry(module.entry);
  auto grid = out.initGrid(3);
  auto block = out.initBlock(3);
  for (unsigned i = 0; i < 3; ++i) {
    grid.set(i, module.grid[i]);
    block.set(i, module.block[i]);
  }
  out.setSharedBytes(module.shared_bytes);
  out.setBuildOptions(module.build_options);
  out.setDeviceIndex(module.device_index);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  std::vector<std::uint8_t> image(sizeof kGpuModuleMagic + bytes.size());
  std::memcpy(image.data(), kGpuModuleMagic, sizeof kGpuModuleMagic);
  std::memcpy(image.data() + sizeof kGpuModuleMagic, bytes.begin(), bytes.size());
  return image;
}

bool is_gpu_module(std::span<const std::uint8_t> image) {
  return image.size() >= sizeof kGpuModuleMagic && std::memcmp(image.data(), kGpuModuleMagic, sizeof kGpuModuleMagic) == 0;
}

bool decode_gpu_module(std::span<const std::uint8_t> image, GpuModule& out, std::string& error) {
  if (!is_gpu_module(image)) {
    error = "not a GPU module (no KGPUMOD1 header)";
    return false;
  }
  auto body = image.subspan(sizeof kGpuModuleMagic);
  if (body.empty() || body.size() % sizeof(capnp::word) != 0) {
    error = "GPU module body of " + std::to_string(body.size()) + " bytes is not a positive multiple of 8";
    return false;
  }
  std::vector<capnp::word> words(body.size() / sizeof(capnp::word));
  std::memcpy(words.data(), body.data(), body.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words.size() * 4 + 64;
    capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()), options);
    auto in = reader.getRoot<format::GpuModule>();
    out.backend = in.getBackend() == format::GpuBackend::CUDA ? GpuBackend::cuda : GpuBackend::opencl;
    switch (in.getCodeKind()) {
      case format::GpuCodeKind::OPENCL_SOURCE: out.code_kind = GpuCodeKind::opencl_source; break;
      case format::GpuCodeKind::PTX: out.code_kind = GpuCodeKind::ptx; break;
      case format::GpuCodeKind::CUBIN: out.code_kind = GpuCodeKind::cubin; break;
      default: error = "GPU module has an unknown code kind"; return false;
    }
    auto code = in.getCode();
    out.code.assign(code.begin(), code.end());
    out.entry = in.getEntry().cStr();
    auto grid = in.getGrid();
    auto block = in.getBlock();
    if (grid.size() != 3 || block.size() != 3) {
      error = "GPU module launch geometry must have 3 dimensions";
      return false;
    }
    for (unsigned i = 0; i < 3; ++i) {
      out.grid[i] = grid[i];
      out.block[i] = block[i];
      if (out.grid[i] == 0 || out.block[i] == 0) {
        error = "GPU module launch geometry has a zero dimension";
        return false;
      }
    }
    out.shared_bytes = in.getSharedBytes();
    out.build_options = in.getBuildOptions().cStr();
    out.device_index = in.getDeviceIndex();
  } catch (const kj::Exception& e) {
    error = std::string("invalid GPU module: ") + e.getDescription().cStr();
    return false;
  }
  if (out.entry.empty() || out.code.empty()) {
    error = "GPU module has no entry point or no code";
    return false;
  }
  bool source_kind = out.code_kind == GpuCodeKind::opencl_source;
  if (source_kind != (out.backend == GpuBackend::opencl)) {
    error = "GPU module code kind does not match its backend";
    return false;
  }
  return true;
}

}  // namespace kestrel::kernel
