// The kernels of an exported library (`kestrel export`'s out/libkestrel_kernels.so),
// opened with dlopen and called through its generic entry kestrel_dispatch.
#include <dlfcn.h>

#include <filesystem>

#include "kestrel/device_runtime/kernel_services.h"
#include "kestrel/deploy/kernel_provider.h"

namespace kestrel::deploy {

using model::ModelError;
using model::ModelTask;

namespace {

using DispatchFn = std::int32_t (*)(const kestrel_services*, const char*, const std::int64_t*, std::int32_t,
                                    const kestrel_arg*, std::int32_t);
using WhichFn = const char* (*)(const char*, const std::int64_t*, std::int32_t);

}  // namespace

struct ExportedLibrary::Impl {
  explicit Impl(unsigned threads) : services(threads) {}
  ~Impl() {
    if (handle) ::dlclose(handle);
  }
  device::KernelServices services;
  std::string path;
  void* handle = nullptr;
  DispatchFn dispatch = nullptr;
  WhichFn which = nullptr;

  std::vector<std::int64_t> params_of(const ModelTask& task, const ops::Params& actual) const {
    return ordered_params(*task.op, actual);
  }
};

ExportedLibrary::ExportedLibrary(const std::string& dir, unsigned threads)
    : impl_(std::make_unique<Impl>(threads)) {
  namespace fs = std::filesystem;
  impl_->path = (fs::path(dir) / "libkestrel_kernels.so").string();
  if (!fs::exists(impl_->path)) {
    throw ModelError("no kernel library " + impl_->path + " (write one with kestrel export -o " + dir + ")");
  }
  impl_->handle = ::dlopen(fs::absolute(impl_->path).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!impl_->handle) {
    const char* why = ::dlerror();
    throw ModelError("cannot load " + impl_->path + ": " + (why ? why : "unknown dlopen error") +
                     " (was it exported for another target?)");
  }
  impl_->dispatch = reinterpret_cast<DispatchFn>(::dlsym(impl_->handle, "kestrel_dispatch"));
  impl_->which = reinterpret_cast<WhichFn>(::dlsym(impl_->handle, "kestrel_dispatch_which"));
  if (!impl_->dispatch || !impl_->which) {
    throw ModelError(impl_->path + " has no kestrel_dispatch / kestrel_dispatch_which: not a Kestrel kernel library");
  }
}

ExportedLibrary::~ExportedLibrary() = default;

std::int32_t ExportedLibrary::run(const ModelTask& task, const ops::Params& actual, std::span<const kestrel_arg> args) {
  const std::vector<std::int64_t> params = impl_->params_of(task, actual);
  std::int32_t rc = impl_->dispatch(impl_->services.table(), task.op_name().c_str(), params.data(),
                                    static_cast<std::int32_t>(params.size()), args.data(),
                                    static_cast<std::int32_t>(args.size()));
  impl_->services.reclaim_scratch();
  return rc;
}

BoundKernel ExportedLibrary::bind(const ModelTask& task, const ops::Params& actual) {
  return bind(task.op_name(), impl_->params_of(task, actual));
}

BoundKernel ExportedLibrary::bind(const std::string& op, std::vector<std::int64_t> params) {
  return [impl = impl_.get(), op, params = std::move(params)](std::span<const kestrel_arg> args) {
    std::int32_t rc = impl->dispatch(impl->services.table(), op.c_str(), params.data(), static_cast<std::int32_t>(params.size()),
                                     args.data(), static_cast<std::int32_t>(args.size()));
    impl->services.reclaim_scratch();
    return rc;
  };
}

std::string ExportedLibrary::which(const std::string& op, const std::vector<std::int64_t>& params) {
  const char* text = impl_->which(op.c_str(), params.data(), static_cast<std::int32_t>(params.size()));
  return text ? text : "none";
}

const kestrel_services* ExportedLibrary::services() const { return impl_->services.table(); }

std::string ExportedLibrary::which(const ModelTask& task, const ops::Params& actual) {
  return which(task.op_name(), impl_->params_of(task, actual));
}

std::string ExportedLibrary::describe_error(std::int32_t code) const {
  if (code == -1) return "the library has no kernel for that op and shape";
  return impl_->services.describe_error(code);
}

const std::string& ExportedLibrary::path() const { return impl_->path; }

}  // namespace kestrel::deploy
