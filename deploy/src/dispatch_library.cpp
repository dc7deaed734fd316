// An exported kernel library through kestrel_dispatch (dispatch_library.h).
#include "kestrel/deploy/dispatch_library.h"

#include <dlfcn.h>

#include <filesystem>

#include "kestrel/device_runtime/kernel_services.h"

namespace kestrel::deploy {

using model::ModelError;

namespace {

using DispatchFn = std::int32_t (*)(const kestrel_services*, const char*, const std::int64_t*, std::int32_t,
                                    const kestrel_arg*, std::int32_t);
using WhichFn = const char* (*)(const char*, const std::int64_t*, std::int32_t);

}  // namespace

struct DispatchLibrary::Impl {
  explicit Impl(unsigned threads) : services(threads) {}
  ~Impl() {
    if (handle) ::dlclose(handle);
  }
  device::KernelServices services;
  std::string path;
  void* handle = nullptr;
  DispatchFn dispatch = nullptr;
  WhichFn which = nullptr;
};

DispatchLibrary::DispatchLibrary(const std::string& dir, unsigned threads) : impl_(std::make_unique<Impl>(threads)) {
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

DispatchLibrary::~DispatchLibrary() = default;

std::int32_t DispatchLibrary::run(const std::string& op, const std::vector<std::int64_t>& params,
                                  std::span<const kestrel_arg> args) {
  const std::int32_t rc = impl_->dispatch(impl_->services.table(), op.c_str(), params.data(),
                                          static_cast<std::int32_t>(params.size()), args.data(),
                                          static_cast<std::int32_t>(args.size()));
  impl_->services.reclaim_scratch();
  return rc;
}

BoundKernel DispatchLibrary::bind(const std::string& op, std::vector<std::int64_t> params) {
  return [this, op, params = std::move(params)](std::span<const kestrel_arg> args) { return run(op, params, args); };
}

std::string DispatchLibrary::which(const std::string& op, const std::vector<std::int64_t>& params) const {
  const char* text = impl_->which(op.c_str(), params.data(), static_cast<std::int32_t>(params.size()));
  return text ? text : "none";
}

std::string DispatchLibrary::describe_error(std::int32_t code) const {
  if (code == -1) return "the library has no kernel for that op and shape";
  return impl_->services.describe_error(code);
}

const kestrel_services* DispatchLibrary::services() const { return impl_->services.table(); }

const std::string& DispatchLibrary::path() const { return impl_->path; }

std::vector<BoundKernel> DispatchLibrary::bind_all(const Program& program) {
  std::vector<BoundKernel> kernels(program.steps.size());
  std::string missing;
  int count = 0;
  for (std::size_t i = 0; i < program.steps.size(); ++i) {
    const ProgramStep& step = program.steps[i];
    if (!step.task) continue;
    if (which(step.op, step.params) == "none") {
      if (++count <= 3) missing += (missing.empty() ? "" : "; ") + step.label;
      continue;
    }
    kernels[i] = bind(step.op, step.params);
  }
  if (count) {
    throw ModelError(path() + " has no kernel for " + std::to_string(count) + " of the program's task steps (" + missing +
                     (count > 3 ? "; ..." : "") + "): export the library and the program together (kestrel export --model)");
  }
  return kernels;
}

}  // namespace kestrel::deploy
