// dlopen-based loaders for the OpenCL ICD loader and the CUDA driver.
#include "gpu_api.h"

#include <dlfcn.h>

#include <initializer_list>

namespace kestrel::device::gpu {
namespace {

// Resolves the first of `names` that the library exports into `slot`.
template <typename Fn>
bool bind(void* library, Fn& slot, std::initializer_list<const char*> names, std::string& missing) {
  for (const char* name : names) {
    if (void* symbol = dlsym(library, name)) {
      slot = reinterpret_cast<Fn>(symbol);
      return true;
    }
  }
  missing = *names.begin();
  return false;
}

struct OpenClLoad {
  OpenCl api;
  std::string error;
};

OpenClLoad load_opencl_once() {
  OpenClLoad out;
  void* library = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) library = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    out.error = std::string("no OpenCL loader (") + (why ? why : "libOpenCL.so.1 not found") + ")";
    return out;
  }
  OpenCl& a = out.api;
  std::string missing;
  bool ok = bind(library, a.GetPlatformIDs, {"clGetPlatformIDs"}, missing) &&
            bind(library, a.GetPlatformInfo, {"clGetPlatformInfo"}, missing) &&
            bind(library, a.GetDeviceIDs, {"clGetDeviceIDs"}, missing) &&
            bind(library, a.GetDeviceInfo, {"clGetDeviceInfo"}, missing) &&
            bind(library, a.CreateContext, {"clCreateContext"}, missing) &&
            bind(library, a.CreateCommandQueue, {"clCreateCommandQueue"}, missing) &&
            bind(library, a.CreateBuffer, {"clCreateBuffer"}, missing) &&
            bind(library, a.EnqueueWriteBuffer, {"clEnqueueWriteBuffer"}, missing) &&
            bind(library, a.EnqueueReadBuffer, {"clEnqueueReadBuffer"}, missing) &&
            bind(library, a.EnqueueFillBuffer, {"clEnqueueFillBuffer"}, missing) &&
            bind(library, a.CreateProgramWithSource, {"clCreateProgramWithSource"}, missing) &&
            bind(library, a.BuildProgram, {"clBuildProgram"}, missing) &&
            bind(library, a.GetProgramBuildInfo, {"clGetProgramBuildInfo"}, missing) &&
            bind(library, a.CreateProgramWithBinary, {"clCreateProgramWithBinary"}, missing) &&
            bind(library, a.GetProgramInfo, {"clGetProgramInfo"}, missing) &&
            bind(library, a.CreateKernel, {"clCreateKernel"}, missing) &&
            bind(library, a.SetKernelArg, {"clSetKernelArg"}, missing) &&
            bind(library, a.EnqueueNDRangeKernel, {"clEnqueueNDRangeKernel"}, missing) &&
            bind(library, a.Finish, {"clFinish"}, missing) &&
            bind(library, a.WaitForEvents, {"clWaitForEvents"}, missing) &&
            bind(library, a.GetEventProfilingInfo, {"clGetEventProfilingInfo"}, missing) &&
            bind(library, a.ReleaseEvent, {"clReleaseEvent"}, missing) &&
            bind(library, a.ReleaseKernel, {"clReleaseKernel"}, missing) &&
            bind(library, a.ReleaseProgram, {"clReleaseProgram"}, missing) &&
            bind(library, a.ReleaseMemObject, {"clReleaseMemObject"}, missing) &&
            bind(library, a.ReleaseCommandQueue, {"clReleaseCommandQueue"}, missing) &&
            bind(library, a.ReleaseContext, {"clReleaseContext"}, missing);
  if (!ok) out.error = "no usable OpenCL loader (libOpenCL.so.1 lacks " + missing + ")";
  return out;
}

struct CudaLoad {
  Cuda api;
  std::string error;
};

CudaLoad load_cuda_once() {
  CudaLoad out;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = dlerror();
    out.error = std::string("no CUDA driver (") + (why ? why : "libcuda.so.1 not found") + ")";
    return out;
  }
  Cuda& a = out.api;
  std::string missing;
  // Versioned names first: the unversioned ones are the old ABIs (32-bit sizes).
  bool ok = bind(library, a.Init, {"cuInit"}, missing) &&
            bind(library, a.DriverGetVersion, {"cuDriverGetVersion"}, missing) &&
            bind(library, a.DeviceGetCount, {"cuDeviceGetCount"}, missing) &&
            bind(library, a.DeviceGet, {"cuDeviceGet"}, missing) &&
            bind(library, a.DeviceGetName, {"cuDeviceGetName"}, missing) &&
            bind(library, a.DeviceGetAttribute, {"cuDeviceGetAttribute"}, missing) &&
            bind(library, a.DeviceTotalMem, {"cuDeviceTotalMem_v2"}, missing) &&
            bind(library, a.DevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}, missing) &&
            bind(library, a.DevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"},
                 missing) &&
            bind(library, a.CtxSetCurrent, {"cuCtxSetCurrent"}, missing) &&
            bind(library, a.CtxSynchronize, {"cuCtxSynchronize"}, missing) &&
            bind(library, a.ModuleLoadDataEx, {"cuModuleLoadDataEx"}, missing) &&
            bind(library, a.ModuleUnload, {"cuModuleUnload"}, missing) &&
            bind(library, a.ModuleGetFunction, {"cuModuleGetFunction"}, missing) &&
            bind(library, a.FuncSetAttribute, {"cuFuncSetAttribute"}, missing) &&
            bind(library, a.MemAlloc, {"cuMemAlloc_v2"}, missing) &&
            bind(library, a.MemFree, {"cuMemFree_v2"}, missing) &&
            bind(library, a.MemcpyHtoD, {"cuMemcpyHtoD_v2"}, missing) &&
            bind(library, a.MemcpyDtoH, {"cuMemcpyDtoH_v2"}, missing) &&
            bind(library, a.MemsetD8, {"cuMemsetD8_v2"}, missing) &&
            bind(library, a.MemsetD32, {"cuMemsetD32_v2"}, missing) &&
            bind(library, a.LaunchKernel, {"cuLaunchKernel"}, missing) &&
            bind(library, a.EventCreate, {"cuEventCreate"}, missing) &&
            bind(library, a.EventRecord, {"cuEventRecord"}, missing) &&
            bind(library, a.EventSynchronize, {"cuEventSynchronize"}, missing) &&
            bind(library, a.EventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, missing) &&
            bind(library, a.EventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"}, missing) &&
            bind(library, a.GetErrorString, {"cuGetErrorString"}, missing);
  if (!ok) {
    out.error = "no usable CUDA driver (libcuda.so.1 lacks " + missing + ")";
    return out;
  }
  CUresult rc = a.Init(0);
  if (rc != CUDA_SUCCESS) {
    out.error = rc == CUDA_ERROR_NO_DEVICE ? "no CUDA device (cuInit: no CUDA-capable device is detected)"
                                           : "no CUDA driver (cuInit failed: " + cuda_error(a, rc) + ")";
  }
  return out;
}

}  // namespace

const OpenCl* load_opencl(std::string& error) {
  static const OpenClLoad loaded = load_opencl_once();
  error = loaded.error;
  return loaded.error.empty() ? &loaded.api : nullptr;
}

const Cuda* load_cuda(std::string& error) {
  static const CudaLoad loaded = load_cuda_once();
  error = loaded.error;
  return loaded.error.empty() ? &loaded.api : nullptr;
}

std::string cl_error_name(cl_int code) {
  const char* name = nullptr;
  switch (code) {
    case 0: name = "CL_SUCCESS"; break;
    case -1: name = "CL_DEVICE_NOT_FOUND"; break;
    case -4: name = "CL_MEM_OBJECT_ALLOCATION_FAILURE"; break;
    case -5: name = "CL_OUT_OF_RESOURCES"; break;
    case -6: name = "CL_OUT_OF_HOST_MEMORY"; break;
    case -11: name = "CL_BUILD_PROGRAM_FAILURE"; break;
    case -30: name = "CL_INVALID_VALUE"; break;
    case -38: name = "CL_INVALID_MEM_OBJECT"; break;
    case -43: name = "CL_INVALID_BUILD_OPTIONS"; break;
    case -46: name = "CL_INVALID_KERNEL_NAME"; break;
    case -48: name = "CL_INVALID_KERNEL"; break;
    case -51: name = "CL_INVALID_ARG_SIZE"; break;
    case -52: name = "CL_INVALID_KERNEL_ARGS"; break;
    case -54: name = "CL_INVALID_WORK_GROUP_SIZE"; break;
    case -55: name = "CL_INVALID_WORK_ITEM_SIZE"; break;
    case -63: name = "CL_INVALID_GLOBAL_WORK_SIZE"; break;
    case -1001: name = "CL_PLATFORM_NOT_FOUND_KHR"; break;
    default: break;
  }
  return std::string(name ? name : "OpenCL error") + " (" + std::to_string(code) + ")";
}

std::string cuda_error(const Cuda& cuda, CUresult code) {
  const char* text = nullptr;
  if (cuda.GetErrorString) cuda.GetErrorString(code, &text);
  return "CUDA error " + std::to_string(code) + (text ? std::string(": ") + text : std::string());
}

}  // namespace kestrel::device::gpu
