// The kernels of an exported library (`kestrel export`'s out/libkestrel_kernels.so),
// through DispatchLibrary, with each task's params put in its op's order.
#include "kestrel/deploy/dispatch_library.h"
#include "kestrel/deploy/kernel_provider.h"

namespace kestrel::deploy {

using model::ModelError;
using model::ModelTask;

struct ExportedLibrary::Impl {
  Impl(const std::string& dir, unsigned threads) : library(dir, threads) {}
  DispatchLibrary library;
};

ExportedLibrary::ExportedLibrary(const std::string& dir, unsigned threads)
    : impl_(std::make_unique<Impl>(dir, threads)) {}

ExportedLibrary::~ExportedLibrary() = default;

std::int32_t ExportedLibrary::run(const ModelTask& task, const ops::Params& actual, std::span<const kestrel_arg> args) {
  return impl_->library.run(task.op_name(), ordered_params(*task.op, actual), args);
}

BoundKernel ExportedLibrary::bind(const ModelTask& task, const ops::Params& actual) {
  return impl_->library.bind(task.op_name(), ordered_params(*task.op, actual));
}

const kestrel_services* ExportedLibrary::services() const { return impl_->library.services(); }

std::string ExportedLibrary::which(const ModelTask& task, const ops::Params& actual) {
  return impl_->library.which(task.op_name(), ordered_params(*task.op, actual));
}

std::string ExportedLibrary::describe_error(std::int32_t code) const { return impl_->library.describe_error(code); }

const std::string& ExportedLibrary::path() const { return impl_->library.path(); }

}  // namespace kestrel::deploy
