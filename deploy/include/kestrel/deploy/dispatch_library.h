// A kernel library that `kestrel export` wrote (libkestrel_kernels.so), opened with dlopen
// and called through its generic entry kestrel_dispatch, on a thread pool this object
// owns. What the host's ExportedLibrary and a board's libkestrel_model both use: it needs
// no op registry (ops are named, params come in the op's order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kestrel/deploy/program.h"
#include "kestrel/kernel/abi.h"

namespace kestrel::deploy {

class DispatchLibrary {
 public:
  // Opens `<dir>/libkestrel_kernels.so`. Throws ModelError when it is missing, does not
  // load (another target's), or lacks kestrel_dispatch / kestrel_dispatch_which.
  DispatchLibrary(const std::string& dir, unsigned threads);
  ~DispatchLibrary();
  DispatchLibrary(const DispatchLibrary&) = delete;
  DispatchLibrary& operator=(const DispatchLibrary&) = delete;

  // Runs the kernel of `op` at `params` (the op's order) on `args` (output last): 0, -1
  // when the library has none for that op and shape, or the kernel's code.
  std::int32_t run(const std::string& op, const std::vector<std::int64_t>& params, std::span<const kestrel_arg> args);
  BoundKernel bind(const std::string& op, std::vector<std::int64_t> params);
  // Which kernel run() takes: "tuned <config>", "default <config>", ... or "none".
  std::string which(const std::string& op, const std::vector<std::int64_t>& params) const;
  std::string describe_error(std::int32_t code) const;
  const kestrel_services* services() const;
  const std::string& path() const;

  // Binds every task step of `program` (empty kernels for portable steps). Throws
  // ModelError naming the steps the library has no kernel for.
  std::vector<BoundKernel> bind_all(const Program& program);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::deploy
