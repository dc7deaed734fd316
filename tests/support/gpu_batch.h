// Test support for GPU op kernels through the device runtime's measurement path: a module
// store whose modules are named by their content, an op's kernel packaged as a GPU module
// the way the host packages it, and one batch run to completion. Used by the GPU device
// tests (tests/device_runtime/gpu_measure_test.cpp, glue_gpu_measure_test.cpp), which
// link no LLVM.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/rpc/sha256.h"
#include "kestrel/device_runtime/measure.h"
#include "kestrel/device_runtime/module_store.h"
#include "kestrel/kernel/gpu_module.h"
#include "kestrel/ops/op.h"
#include "support/async.h"

namespace kestrel::test {

// Modules are named by the SHA-256 of their bytes, as the host names them.
inline std::string content_hash(const std::vector<std::uint8_t>& bytes) { return rpc::sha256_hex(bytes); }

// A store of modules named by their content; the test fails when one cannot be stored.
struct ContentModules {
  device::ModuleStore store;
  std::string put(const std::vector<std::uint8_t>& image) {
    std::string hash = content_hash(image);
    REQUIRE(store.put(hash, image).empty());
    return hash;
  }
};

// An op's GPU kernel as a GPU module: its #defines prepended to the source text, its
// entry and launch geometry.
inline std::vector<std::uint8_t> op_gpu_module(const ops::KernelSource& source) {
  std::string text;
  for (const auto& d : source.defines) text += "#define " + d.name + " " + d.value + "\n";
  text += source.text;
  kernel::GpuModule module;
  module.backend = source.backend == ops::Backend::cuda ? kernel::GpuBackend::cuda : kernel::GpuBackend::opencl;
  module.code_kind = kernel::GpuCodeKind::opencl_source;
  module.code.assign(text.begin(), text.end());
  module.entry = source.launch.entry;
  for (int d = 0; d < 3; ++d) {
    module.grid[d] = static_cast<std::uint32_t>(source.launch.grid[d]);
    module.block[d] = static_cast<std::uint32_t>(source.launch.block[d]);
  }
  return kernel::encode_gpu_module(module);
}

struct BatchOutcome {
  std::map<std::uint64_t, rpc::CandidateResult> results;
  std::optional<std::string> done;  // the batch's closing message (empty: all ran)
};

// Runs `spec` on a fresh io_context until the batch is done (at most ~2 minutes).
inline BatchOutcome run_gpu_batch(device::BatchSpec spec) {
  using namespace std::chrono_literals;
  asio::io_context io;
  BatchOutcome out;
  run_async(
      io,
      [&]() -> rpc::awaitable<void> {
        auto runner = device::BatchRunner::start(
            io.get_executor(), std::move(spec), [&](const rpc::CandidateResult& r) { out.results[r.id] = r; },
            [&](const std::string& message) { out.done = message; });
        bool finished = co_await eventually([&] { return out.done.has_value(); }, 110s);
        REQUIRE(finished);
      },
      {}, 115s);
  return out;
}

}  // namespace kestrel::test
