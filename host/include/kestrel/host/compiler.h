// The host-side compiler: C kernel source + #defines -> object for the target ->
// shared object, in memory, with Clang and LLD 19 linked into the process. GPU targets:
// CUDA C -> cubin/PTX with NVRTC (when built with it), OpenCL C shipped as source. Thread-safe;
// a pool of compile threads; a content-addressed cache of results.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"

namespace kestrel::host {

struct CompileRequest {
  // What a CPU compile produces: a loadable shared object, or the relocatable object
  // alone (for linking several kernels into one library, see link.h). GPU targets ignore it.
  enum class Output { shared_object, object };
  ops::KernelSource source;
  Target target;
  // -O level, 0..3. 2 by default: on gemm and conv2d_nchwc -O3 ran no faster (their
  // micro-kernels are vectorised and unrolled by hand) yet compiled 1.3-1.5x slower, its
  // extra unrolling and loop unswitching quadrupling gemm's code (docs/benchmarks.md,
  // "Compile time per candidate").
  int opt_level = 2;
  Output output = Output::shared_object;
};

// Where a compile's time went, in ms of the compiling thread (0 for cache hits and GPU
// targets). frontend: driver, preprocessing, parsing and IR generation; optimise: LLVM's
// -O pipeline; codegen: instruction selection to the object in memory; link: LLD.
struct CompilePhases {
  double frontend_ms = 0;
  double optimise_ms = 0;
  double codegen_ms = 0;
  double link_ms = 0;
};

struct CompileResult {
  bool ok = false;
  // ELF .so exporting the kernel ABI entry (the ELF relocatable object when the request's
  // output is Output::object); for a CUDA or OpenCL target, a GPU module image
  // (rpc/gpu_module.h: cubin, PTX or OpenCL source plus the launch geometry).
  std::vector<std::uint8_t> shared_object;
  std::string diagnostics;                  // compiler/linker messages (warnings too)
  // The module's name: hex SHA-256 of `shared_object` (what a device recomputes on upload
  // and refuses to store under any other name); empty when the compile failed.
  std::string hash;
  std::string key;                          // the cache key: hex SHA-256 of everything that determines the output
  double compile_ms = 0;                    // 0 for cache hits
  CompilePhases phases;                     // compile_ms split by phase
  bool cached = false;                      // from the memory or the disk cache
  bool from_disk = false;                   // from the disk cache (cached too)
};

struct CompilerOptions {
  unsigned threads = 0;          // compile threads; 0: one per core
  std::size_t cache_entries = 4096;  // in-memory cache size (LRU)
  // Directory of the compile cache on disk, shared by processes (entries by cache key,
  // written atomically, checked on reading; an unusable directory caches nothing). Its
  // entries become kernels that run: a directory that only this user can write.
  // Empty: the directory in $KESTREL_COMPILE_CACHE, if set and not "off"; else none.
  // "off": none, whatever the environment says.
  std::string cache_dir = {};
};

class Compiler {
 public:
  explicit Compiler(CompilerOptions options = {});
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // Compiles on the calling thread (or answers from the cache). Never throws for bad
  // source: a compile error is a result with ok == false and the diagnostics.
  CompileResult compile(const CompileRequest& request);
  // Queues a compile on the pool.
  std::future<CompileResult> submit(CompileRequest request);
  // Compiles all requests on the pool; results in request order.
  std::vector<CompileResult> compile_all(const std::vector<CompileRequest>& requests);

  unsigned threads() const;
  // The disk cache's directory; empty when there is none.
  const std::string& cache_dir() const;
  // e.g. "clang 19.1.7"; part of every cache key.
  static std::string version();
  // The cache key of a request (hex SHA-256) without compiling.
  static std::string hash_of(const CompileRequest& request);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The ELF machine of a shared object ("x86_64", "aarch64", "arm", "riscv64"), or an
// empty string if the bytes are not an ELF file. For checks and tests.
std::string elf_machine(std::span<const std::uint8_t> image);

}  // namespace kestrel::host
