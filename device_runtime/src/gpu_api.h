// The few CUDA driver and OpenCL entry points the device runtime uses, loaded at run
// time with dlopen (libcuda.so.1, libOpenCL.so.1) so that kestrel-device links neither
// and runs on boards that have no GPU. The types and constants are declared here
// (their values are those of cuda.h and CL/cl.h), so the runtime builds without the
// CUDA toolkit or the OpenCL headers.
//
// Load these only in a process that will use them (a probe child or a worker): a CUDA
// context or an OpenCL platform must never be created before a fork.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel::device::gpu {

// ---- OpenCL -------------------------------------------------------------------

using cl_int = std::int32_t;
using cl_uint = std::uint32_t;
using cl_ulong = std::uint64_t;
using cl_bitfield = cl_ulong;
using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;
using cl_context = struct _cl_context*;
using cl_command_queue = struct _cl_command_queue*;
using cl_mem = struct _cl_mem*;
using cl_program = struct _cl_program*;
using cl_kernel = struct _cl_kernel*;
using cl_event = struct _cl_event*;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_BUILD_PROGRAM_FAILURE = -11;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;
constexpr cl_uint CL_PLATFORM_VERSION = 0x0901;
constexpr cl_uint CL_PLATFORM_NAME = 0x0902;
constexpr cl_bitfield CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;
constexpr cl_uint CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002;
constexpr cl_uint CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004;
constexpr cl_uint CL_DEVICE_GLOBAL_MEM_CACHE_SIZE = 0x101E;
constexpr cl_uint CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_uint CL_DEVICE_LOCAL_MEM_SIZE = 0x1023;
constexpr cl_uint CL_DEVICE_NAME = 0x102B;
constexpr cl_uint CL_DEVICE_VENDOR = 0x102C;
constexpr cl_uint CL_DRIVER_VERSION = 0x102D;
constexpr cl_uint CL_DEVICE_OPENCL_C_VERSION = 0x103D;
constexpr cl_bitfield CL_QUEUE_PROFILING_ENABLE = 1 << 1;
constexpr cl_bitfield CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_uint CL_PROGRAM_BINARY_SIZES = 0x1165;
constexpr cl_uint CL_PROGRAM_BINARIES = 0x1166;
constexpr cl_uint CL_PROGRAM_BUILD_LOG = 0x1183;
constexpr cl_uint CL_PROFILING_COMMAND_START = 0x1282;
constexpr cl_uint CL_PROFILING_COMMAND_END = 0x1283;
constexpr cl_uint CL_TRUE = 1;

struct OpenCl {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*) = nullptr;
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_uint, std::size_t, void*, std::size_t*) = nullptr;
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*) = nullptr;
  cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, std::size_t, void*, std::size_t*) = nullptr;
  cl_context (*CreateContext)(const std::intptr_t*, cl_uint, const cl_device_id*,
                              void (*)(const char*, const void*, std::size_t, void*), void*, cl_int*) = nullptr;
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int*) = nullptr;
  cl_mem (*CreateBuffer)(cl_context, cl_bitfield, std::size_t, void*, cl_int*) = nullptr;
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_uint, std::size_t, std::size_t, const void*, cl_uint,
                               const cl_event*, cl_event*) = nullptr;
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_uint, std::size_t, std::size_t, void*, cl_uint,
                              const cl_event*, cl_event*) = nullptr;
  cl_int (*EnqueueFillBuffer)(cl_command_queue, cl_mem, const void*, std::size_t, std::size_t, std::size_t, cl_uint,
                              const cl_event*, cl_event*) = nullptr;
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char**, const std::size_t*, cl_int*) = nullptr;
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*, void (*)(cl_program, void*),
                         void*) = nullptr;
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, std::size_t, void*, std::size_t*) = nullptr;
  cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*, const std::size_t*,
                                        const unsigned char**, cl_int*, cl_int*) = nullptr;
  cl_int (*GetProgramInfo)(cl_program, cl_uint, std::size_t, void*, std::size_t*) = nullptr;
  cl_kernel (*CreateKernel)(cl_program, const char*, cl_int*) = nullptr;
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, std::size_t, const void*) = nullptr;
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const std::size_t*, const std::size_t*,
                                 const std::size_t*, cl_uint, const cl_event*, cl_event*) = nullptr;
  cl_int (*Finish)(cl_command_queue) = nullptr;
  cl_int (*WaitForEvents)(cl_uint, const cl_event*) = nullptr;
  cl_int (*GetEventProfilingInfo)(cl_event, cl_uint, std::size_t, void*, std::size_t*) = nullptr;
  cl_int (*ReleaseEvent)(cl_event) = nullptr;
  cl_int (*ReleaseKernel)(cl_kernel) = nullptr;
  cl_int (*ReleaseProgram)(cl_program) = nullptr;
  cl_int (*ReleaseMemObject)(cl_mem) = nullptr;
  cl_int (*ReleaseCommandQueue)(cl_command_queue) = nullptr;
  cl_int (*ReleaseContext)(cl_context) = nullptr;
};

// Loads the OpenCL ICD loader. Null with `error` set ("no OpenCL loader (...)") when
// it or one of the entry points is missing. The library stays loaded for the process.
const OpenCl* load_opencl(std::string& error);
// "CL_BUILD_PROGRAM_FAILURE (-11)" and the like.
std::string cl_error_name(cl_int code);

// ---- CUDA driver API -------------------------------------------------------------

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

struct Cuda {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*DeviceTotalMem)(std::size_t*, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;
  CUresult (*ModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**) = nullptr;
  CUresult (*ModuleUnload)(CUmodule) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*FuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, std::size_t) = nullptr;
  CUresult (*MemsetD32)(CUdeviceptr, unsigned, std::size_t) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**) = nullptr;
  CUresult (*EventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*EventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*EventSynchronize)(CUevent) = nullptr;
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*EventDestroy)(CUevent) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
};

// Loads the CUDA driver and calls cuInit. Null with `error` set ("no CUDA driver (...)")
// when the library, an entry point or a usable GPU is missing (the toolkit's stub
// library loads but cuInit fails: that is reported too).
const Cuda* load_cuda(std::string& error);
// "CUDA_ERROR_INVALID_PTX (218): ..." via cuGetErrorString when available.
std::string cuda_error(const Cuda& cuda, CUresult code);

}  // namespace kestrel::device::gpu
