// The CUDA session: the device's primary context made current in the worker, device
// buffers, modules loaded from PTX or cubin, launches timed with CUDA events.
#include <algorithm>
#include <cmath>

#include "gpu_api.h"
#include "gpu_session.h"

namespace kestrel::device::gpu {
namespace {

class CudaSession final : public Session {
 public:
  CudaSession(const Cuda& cu, CUdevice device) : cu_(cu), device_(device) {}

  ~CudaSession() override {
    if (!context_) return;
    cu_.CtxSynchronize();
    if (module_) cu_.ModuleUnload(module_);
    for (CUdeviceptr buffer : buffers_) cu_.MemFree(buffer);
    if (flush_) cu_.MemFree(flush_);
    if (start_) cu_.EventDestroy(start_);
    if (stop_) cu_.EventDestroy(stop_);
    cu_.DevicePrimaryCtxRelease(device_);
  }

  std::string open() {
    if (CUresult rc = cu_.DevicePrimaryCtxRetain(&context_, device_); rc != CUDA_SUCCESS) {
      context_ = nullptr;
      return "cuDevicePrimaryCtxRetain: " + cuda_error(cu_, rc);
    }
    if (CUresult rc = cu_.CtxSetCurrent(context_); rc != CUDA_SUCCESS) return "cuCtxSetCurrent: " + cuda_error(cu_, rc);
    if (CUresult rc = cu_.EventCreate(&start_, 0); rc != CUDA_SUCCESS) return "cuEventCreate: " + cuda_error(cu_, rc);
    if (CUresult rc = cu_.EventCreate(&stop_, 0); rc != CUDA_SUCCESS) return "cuEventCreate: " + cuda_error(cu_, rc);
    cu_.DeviceGetAttribute(&l2_bytes_, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device_);
    return {};
  }

  Status upload(const std::vector<HostArg>& args, std::string& message) override {
    args_ = args;
    for (const HostArg& arg : args_) {
      CUdeviceptr buffer = 0;
      std::size_t bytes = bytes_of(arg);
      if (CUresult rc = cu_.MemAlloc(&buffer, bytes); rc != CUDA_SUCCESS) {
        message = "allocating " + std::to_string(bytes) + " bytes on the GPU: " + cuda_error(cu_, rc);
        return Status::runtime_error;
      }
      buffers_.push_back(buffer);
      if (!arg.is_output && arg.elements > 0) {
        if (CUresult rc = cu_.MemcpyHtoD(buffer, arg.data, bytes); rc != CUDA_SUCCESS) {
          message = "uploading an argument: " + cuda_error(cu_, rc);
          return Status::runtime_error;
        }
      }
    }
    params_.clear();
    for (CUdeviceptr& buffer : buffers_) params_.push_back(&buffer);
    return Status::ok;
  }

  Status load(const kernel::GpuModule& module, const std::string& hash, std::string& message) override {
    if (module_) {
      cu_.ModuleUnload(module_);
      module_ = nullptr;
    }
    (void)hash;  // a module is loaded once per candidate; the driver caches PTX JIT results
    spec_ = module;
    std::vector<std::uint8_t> image = module.code;
    if (module.code_kind == kernel::GpuCodeKind::ptx) image.push_back(0);  // PTX is loaded as a C string
    char log[8192] = {};
    int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof log - 1))};
    CUresult rc = cu_.ModuleLoadDataEx(&module_, image.data(), 2, options, values);
    if (rc != CUDA_SUCCESS) {
      module_ = nullptr;
      message = "loading the CUDA module: " + cuda_error(cu_, rc) + (log[0] ? std::string("\n") + log : "");
      return Status::device_compile_error;
    }
    rc = cu_.ModuleGetFunction(&function_, module_, module.entry.c_str());
    if (rc != CUDA_SUCCESS) {
      message = "no kernel '" + module.entry + "' in the module: " + cuda_error(cu_, rc);
      return Status::device_load_error;
    }
    if (module.shared_bytes > 48 * 1024) {
      rc = cu_.FuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(module.shared_bytes));
      if (rc != CUDA_SUCCESS) {
        message = "allowing " + std::to_string(module.shared_bytes) + " bytes of shared memory: " + cuda_error(cu_, rc);
        return Status::device_load_error;
      }
    }
    return Status::ok;
  }

  Status run_once(std::string& message) override {
    const float nan = std::nanf("");
    unsigned pattern = 0;
    static_assert(sizeof pattern == sizeof nan);
    __builtin_memcpy(&pattern, &nan, sizeof nan);
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!args_[i].is_output) continue;
      CUresult rc = cu_.MemsetD32(buffers_[i], pattern, static_cast<std::size_t>(std::max<std::int64_t>(args_[i].elements, 1)));
      if (rc != CUDA_SUCCESS) return fail("clearing an output", rc, message);
    }
    if (CUresult rc = launch(); rc != CUDA_SUCCESS) return fail("launching " + spec_.entry, rc, message);
    if (CUresult rc = cu_.CtxSynchronize(); rc != CUDA_SUCCESS) return fail("running " + spec_.entry, rc, message);
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!args_[i].is_output) continue;
      CUresult rc = cu_.MemcpyDtoH(args_[i].data, buffers_[i], bytes_of(args_[i]));
      if (rc != CUDA_SUCCESS) return fail("reading an output back", rc, message);
    }
    return Status::ok;
  }

  Status time_round(std::uint32_t number, bool flush, double& seconds, std::string& message) override {
    if (flush) {
      std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(std::max(l2_bytes_, 0)) * 2, std::size_t(8) << 20);
      if (!flush_) {
        if (CUresult rc = cu_.MemAlloc(&flush_, bytes); rc != CUDA_SUCCESS) return fail("allocating the L2 flush buffer", rc, message);
      }
      if (CUresult rc = cu_.MemsetD8(flush_, static_cast<unsigned char>(++flush_value_), bytes); rc != CUDA_SUCCESS) {
        return fail("flushing the L2 cache", rc, message);
      }
    }
    number = std::max<std::uint32_t>(number, 1);
    if (CUresult rc = cu_.EventRecord(start_, nullptr); rc != CUDA_SUCCESS) return fail("cuEventRecord", rc, message);
    for (std::uint32_t i = 0; i < number; ++i) {
      if (CUresult rc = launch(); rc != CUDA_SUCCESS) return fail("launching " + spec_.entry, rc, message);
    }
    if (CUresult rc = cu_.EventRecord(stop_, nullptr); rc != CUDA_SUCCESS) return fail("cuEventRecord", rc, message);
    if (CUresult rc = cu_.EventSynchronize(stop_); rc != CUDA_SUCCESS) return fail("running " + spec_.entry, rc, message);
    float ms = 0;
    if (CUresult rc = cu_.EventElapsedTime(&ms, start_, stop_); rc != CUDA_SUCCESS) return fail("cuEventElapsedTime", rc, message);
    seconds = static_cast<double>(ms) * 1e-3 / number;
    return Status::ok;
  }

 private:
  static std::size_t bytes_of(const HostArg& arg) {
    return static_cast<std::size_t>(std::max<std::int64_t>(arg.elements, 1)) * sizeof(float);
  }

  CUresult launch() {
    return cu_.LaunchKernel(function_, spec_.grid[0], spec_.grid[1], spec_.grid[2], spec_.block[0], spec_.block[1],
                            spec_.block[2], spec_.shared_bytes, nullptr, params_.data(), nullptr);
  }

  Status fail(const std::string& what, CUresult rc, std::string& message) {
    message = what + ": " + cuda_error(cu_, rc);
    return Status::runtime_error;
  }

  const Cuda& cu_;
  CUdevice device_;
  CUcontext context_ = nullptr;
  CUevent start_ = nullptr, stop_ = nullptr;
  int l2_bytes_ = 0;
  std::vector<HostArg> args_;
  std::vector<CUdeviceptr> buffers_;
  std::vector<void*> params_;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  kernel::GpuModule spec_;
  CUdeviceptr flush_ = 0;
  unsigned flush_value_ = 0;
};

}  // namespace

std::unique_ptr<Session> open_cuda(unsigned device_index, std::string& error) {
  const Cuda* cu = load_cuda(error);
  if (!cu) return nullptr;
  int count = 0;
  if (CUresult rc = cu->DeviceGetCount(&count); rc != CUDA_SUCCESS) {
    error = "cuDeviceGetCount: " + cuda_error(*cu, rc);
    return nullptr;
  }
  if (device_index >= static_cast<unsigned>(count)) {
    error = "CUDA device " + std::to_string(device_index) + " does not exist (this device has " +
            std::to_string(count) + ")";
    return nullptr;
  }
  CUdevice device = 0;
  if (CUresult rc = cu->DeviceGet(&device, static_cast<int>(device_index)); rc != CUDA_SUCCESS) {
    error = "cuDeviceGet: " + cuda_error(*cu, rc);
    return nullptr;
  }
  auto session = std::make_unique<CudaSession>(*cu, device);
  error = session->open();
  if (!error.empty()) return nullptr;
  return session;
}

}  // namespace kestrel::device::gpu
