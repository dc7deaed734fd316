// The OpenCL devices of every platform, in one stable order (platform by platform, as
// the ICD loader lists them): the index the runtime registers and the host names.
#pragma once

#include <string>
#include <vector>

#include "gpu_api.h"
#include "kestrel/rpc/device_info.h"

namespace kestrel::device::gpu {

struct OpenClDevice {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
};

// Empty with `error` set ("no OpenCL platform", ...) when there is none.
std::vector<OpenClDevice> opencl_devices(const OpenCl& cl, std::string& error);
// Name, vendor, OpenCL C version, memory and limits (index left 0).
rpc::GpuInfo describe(const OpenCl& cl, const OpenClDevice& device);

}  // namespace kestrel::device::gpu
