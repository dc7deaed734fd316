// OpenCL device enumeration and description.
#include "opencl_devices.h"

namespace kestrel::device::gpu {
namespace {

std::string device_string(const OpenCl& cl, cl_device_id device, cl_uint what) {
  std::size_t size = 0;
  if (cl.GetDeviceInfo(device, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string text(size, '\0');
  if (cl.GetDeviceInfo(device, what, size, text.data(), nullptr) != CL_SUCCESS) return {};
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string platform_string(const OpenCl& cl, cl_platform_id platform, cl_uint what) {
  std::size_t size = 0;
  if (cl.GetPlatformInfo(platform, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string text(size, '\0');
  if (cl.GetPlatformInfo(platform, what, size, text.data(), nullptr) != CL_SUCCESS) return {};
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

template <typename T>
T device_value(const OpenCl& cl, cl_device_id device, cl_uint what) {
  T value{};
  if (cl.GetDeviceInfo(device, what, sizeof value, &value, nullptr) != CL_SUCCESS) return T{};
  return value;
}

}  // namespace

std::vector<OpenClDevice> opencl_devices(const OpenCl& cl, std::string& error) {
  std::vector<OpenClDevice> out;
  cl_uint platforms = 0;
  cl_int rc = cl.GetPlatformIDs(0, nullptr, &platforms);
  if (rc == CL_PLATFORM_NOT_FOUND_KHR || (rc == CL_SUCCESS && platforms == 0)) {
    error = "no OpenCL platform (the ICD loader found no driver)";
    return out;
  }
  if (rc != CL_SUCCESS) {
    error = "no OpenCL platform (clGetPlatformIDs: " + cl_error_name(rc) + ")";
    return out;
  }
  std::vector<cl_platform_id> ids(platforms);
  cl.GetPlatformIDs(platforms, ids.data(), nullptr);
  for (cl_platform_id platform : ids) {
    cl_uint count = 0;
    if (cl.GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count) != CL_SUCCESS || count == 0) continue;
    std::vector<cl_device_id> devices(count);
    cl.GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, devices.data(), nullptr);
    for (cl_device_id device : devices) out.push_back({platform, device});
  }
  if (out.empty()) error = "no OpenCL device (" + std::to_string(platforms) + " platform(s) without devices)";
  return out;
}

rpc::GpuInfo describe(const OpenCl& cl, const OpenClDevice& d) {
  rpc::GpuInfo g;
  g.backend = "opencl";
  g.name = device_string(cl, d.device, CL_DEVICE_NAME);
  g.vendor = device_string(cl, d.device, CL_DEVICE_VENDOR);
  g.version = device_string(cl, d.device, CL_DEVICE_OPENCL_C_VERSION);
  g.driver = platform_string(cl, d.platform, CL_PLATFORM_NAME) + " " +
             platform_string(cl, d.platform, CL_PLATFORM_VERSION) + ", driver " +
             device_string(cl, d.device, CL_DRIVER_VERSION);
  g.memory_bytes = device_value<cl_ulong>(cl, d.device, CL_DEVICE_GLOBAL_MEM_SIZE);
  g.compute_units = device_value<cl_uint>(cl, d.device, CL_DEVICE_MAX_COMPUTE_UNITS);
  g.max_threads_per_group = static_cast<unsigned>(device_value<std::size_t>(cl, d.device, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  g.max_shared_bytes = device_value<cl_ulong>(cl, d.device, CL_DEVICE_LOCAL_MEM_SIZE);
  g.l2_bytes = device_value<cl_ulong>(cl, d.device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE);
  return g;
}

}  // namespace kestrel::device::gpu
