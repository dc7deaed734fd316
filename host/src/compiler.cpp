// The host compiler: the cache key, the content-addressed LRU cache (with in-flight
// deduplication), the compile pool, and the source -> object -> shared object pipeline.
#include "kestrel/host/compiler.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <clang/Basic/Version.h>
#include <sodium.h>

#include "abi_header.h"
#include "disk_cache.h"
#include "frontend.h"
#include "gpu_compile.h"
#include "kestrel/rpc/sha256.h"
#include "linker.h"

namespace kestrel::host {
namespace {

// Bump when the compile recipe (flags, link options) changes: part of every key.
constexpr std::string_view kRecipe = "kestrel-host-compile/2";

// SHA-256 over length-prefixed fields, so that no two field lists collide.
class KeyHasher {
 public:
  KeyHasher() { crypto_hash_sha256_init(&state_); }
  void field(std::string_view bytes) {
    std::uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(bytes.size() >> (8 * i));
    crypto_hash_sha256_update(&state_, length, sizeof length);
    crypto_hash_sha256_update(&state_, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  }
  std::string hex() {
    std::uint8_t digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&state_, digest);
    return rpc::to_hex(digest);
  }

 private:
  crypto_hash_sha256_state state_;
};

// Compiler and linker versions of the libraries actually loaded.
const std::string& toolchain_identity() {
  static const std::string identity = detail::clang_full_version() + "; " + detail::lld_version();
  return identity;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

struct Compiler::Impl {
  explicit Impl(CompilerOptions opts)
      : options(std::move(opts)),
        disk(options.cache_dir == "off" ? std::string()
             : options.cache_dir.empty() ? detail::compile_cache_dir_from_environment()
                                         : options.cache_dir) {
    if (options.threads == 0) options.threads = std::max(1u, std::thread::hardware_concurrency());
    detail::initialize_llvm();
    workers.reserve(options.threads);
    for (unsigned i = 0; i < options.threads; ++i) workers.emplace_back([this] { work(); });
  }

  ~Impl() {
    {
      const std::lock_guard lock(queue_mutex);
      stopping = true;
    }
    queue_ready.notify_all();
    for (std::thread& worker : workers) worker.join();
  }

  // Runs queued compiles until stopped and the queue is drained.
  void work() {
    for (;;) {
      std::packaged_task<CompileResult()> task;
      {
        std::unique_lock lock(queue_mutex);
        queue_ready.wait(lock, [this] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }

  std::future<CompileResult> enqueue(std::packaged_task<CompileResult()> task) {
    std::future<CompileResult> result = task.get_future();
    {
      const std::lock_guard lock(queue_mutex);
      queue.push_back(std::move(task));
    }
    queue_ready.notify_one();
    return result;
  }

  CompileResult compile(const CompileRequest& request) {
    const std::string key = hash_of(request);
    std::promise<CompileResult> promise;
    {
      std::unique_lock lock(cache_mutex);
      if (auto hit = index.find(key); hit != index.end()) {
        lru.splice(lru.begin(), lru, hit->second);  // most recently used first
        return as_cached(hit->second->second);
      }
      if (auto running = in_flight.find(key); running != in_flight.end()) {
        std::shared_future<CompileResult> same = running->second;
        lock.unlock();
        return as_cached(same.get());
      }
      in_flight.emplace(key, promise.get_future().share());
    }
    bool cacheable = true;
    CompileResult result;
    if (std::optional<CompileResult> stored = disk.load(key)) {
      result = std::move(*stored);
      result.cached = true;
      result.from_disk = true;
    } else {
      result = build(request, key, cacheable);
      if (cacheable) disk.store(key, result);
    }
    {
      const std::lock_guard lock(cache_mutex);
      if (cacheable && options.cache_entries > 0) {
        lru.emplace_front(key, result);
        index[key] = lru.begin();
        while (lru.size() > options.cache_entries) {
          index.erase(lru.back().first);
          lru.pop_back();
        }
      }
      in_flight.erase(key);
    }
    promise.set_value(result);
    return result;
  }

  static CompileResult as_cached(CompileResult result) {
    result.cached = true;
    result.from_disk = false;
    result.compile_ms = 0;
    result.phases = {};
    return result;
  }

  // The pipeline. `cacheable` turns false for failures that another attempt might not
  // repeat (I/O, a crashed linker).
  static CompileResult build(const CompileRequest& request, const std::string& key, bool& cacheable) {
    const auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.key = key;
    const std::string name = detail::source_name(request.source);
    try {
      if (request.source.backend != ops::Backend::cpu || request.target.is_gpu()) {
        detail::GpuBuild gpu = detail::build_gpu_module(request.source, request.target);
        result.ok = gpu.ok;
        result.diagnostics = std::move(gpu.diagnostics);
        result.shared_object = std::move(gpu.image);
      } else if (request.opt_level < 0 || request.opt_level > 3) {
        result.diagnostics = "kestrel: optimisation level " + std::to_string(request.opt_level) +
                             " for " + name + " is not one of 0, 1, 2, 3\n";
      } else {
        detail::ObjectFile object = detail::compile_object(request.source, request.target, request.opt_level);
        result.diagnostics = std::move(object.diagnostics);
        result.phases.frontend_ms = object.frontend_ms;
        result.phases.optimise_ms = object.optimise_ms;
        result.phases.codegen_ms = object.codegen_ms;
        if (object.ok && request.output == CompileRequest::Output::object) {
          result.ok = true;
          result.shared_object.assign(object.bytes.begin(), object.bytes.end());
        } else if (object.ok) {
          const auto link_start = std::chrono::steady_clock::now();
          detail::SharedObject so =
              detail::link_shared_object(object.bytes, "kestrel-" + key.substr(0, 16) + ".so");
          result.diagnostics += so.diagnostics;
          cacheable = so.deterministic;
          result.ok = so.ok;
          result.shared_object = std::move(so.bytes);
          result.phases.link_ms = ms_since(link_start);
        }
      }
    } catch (const std::exception& e) {  // out of memory and the like: not the source's fault
      cacheable = false;
      result.ok = false;
      result.shared_object.clear();
      result.diagnostics += "kestrel: compiling " + name + " failed: " + e.what() + "\n";
    }
    if (result.ok) result.hash = rpc::sha256_hex(result.shared_object);
    result.compile_ms = ms_since(start);
    return result;
  }

  CompilerOptions options;
  detail::DiskCache disk;

  std::mutex cache_mutex;
  std::list<std::pair<std::string, CompileResult>> lru;  // most recently used first
  std::unordered_map<std::string, std::list<std::pair<std::string, CompileResult>>::iterator> index;
  std::unordered_map<std::string, std::shared_future<CompileResult>> in_flight;

  std::mutex queue_mutex;
  std::condition_variable queue_ready;
  std::deque<std::packaged_task<CompileResult()>> queue;
  bool stopping = false;
  std::vector<std::thread> workers;
};

Compiler::Compiler(CompilerOptions options) : impl_(std::make_unique<Impl>(options)) {}

Compiler::~Compiler() = default;

CompileResult Compiler::compile(const CompileRequest& request) { return impl_->compile(request); }

std::future<CompileResult> Compiler::submit(CompileRequest request) {
  return impl_->enqueue(std::packaged_task<CompileResult()>(
      [this, request = std::move(request)] { return impl_->compile(request); }));
}

std::vector<CompileResult> Compiler::compile_all(const std::vector<CompileRequest>& requests) {
  std::vector<std::future<CompileResult>> futures;
  futures.reserve(requests.size());
  for (const CompileRequest& request : requests) futures.push_back(submit(request));
  std::vector<CompileResult> results;
  results.reserve(requests.size());
  for (std::future<CompileResult>& future : futures) results.push_back(future.get());
  return results;
}

unsigned Compiler::threads() const { return impl_->options.threads; }

const std::string& Compiler::cache_dir() const { return impl_->disk.dir(); }

std::string Compiler::version() { return "clang " CLANG_VERSION_STRING; }

std::string Compiler::hash_of(const CompileRequest& request) {
  KeyHasher hasher;
  hasher.field(kRecipe);
  hasher.field(version());
  hasher.field(toolchain_identity());
  hasher.field(detail::abi_header_text());
  for (const auto& header : detail::kernel_headers()) hasher.field(header.text);
  hasher.field(request.target.triple);
  hasher.field(request.target.cpu);
  hasher.field(request.target.features);
  if (request.target.is_gpu() || request.source.backend != ops::Backend::cpu) {
    // GPU modules: the backend, the architecture, the device and the launch are part of
    // the module (the hash names the module on the device).
    hasher.field(ops::to_string(request.target.backend));
    hasher.field(request.target.gpu_arch);
    hasher.field(std::to_string(request.target.gpu_index));
    hasher.field(detail::nvrtc_version());
    const ops::Launch& launch = request.source.launch;
    hasher.field(launch.entry);
    for (int d = 0; d < 3; ++d) {
      hasher.field(std::to_string(launch.grid[d]));
      hasher.field(std::to_string(launch.block[d]));
    }
    hasher.field(std::to_string(launch.shared_bytes));
  }
  hasher.field(std::to_string(request.opt_level));
  // Only objects add a field, so shared objects keep the keys they had.
  if (request.output == CompileRequest::Output::object) hasher.field("output=object");
  hasher.field(ops::to_string(request.source.backend));
  // The file name reaches the object (its STT_FILE symbol) and the diagnostics.
  hasher.field(request.source.file_name);
  hasher.field(request.source.text);
  hasher.field(std::to_string(request.source.defines.size()));
  for (const ops::Define& define : request.source.defines) {
    hasher.field(define.name);
    hasher.field(define.value);
  }
  return hasher.hex();
}

std::string elf_machine(std::span<const std::uint8_t> image) {
  // e_ident: magic, class (1: 32-bit, 2: 64-bit), data (1: little, 2: big endian);
  // e_machine is the 16-bit field at offset 18 in both classes.
  if (image.size() < 20 || image[0] != 0x7f || image[1] != 'E' || image[2] != 'L' || image[3] != 'F')
    return {};
  if ((image[4] != 1 && image[4] != 2) || (image[5] != 1 && image[5] != 2)) return {};
  const unsigned machine = image[5] == 1 ? (image[18] | (image[19] << 8)) : ((image[18] << 8) | image[19]);
  switch (machine) {
    case 62: return "x86_64";     // EM_X86_64
    case 183: return "aarch64";   // EM_AARCH64
    case 40: return "arm";        // EM_ARM
    case 243: return image[4] == 2 ? "riscv64" : "riscv32";  // EM_RISCV
    default: return "machine " + std::to_string(machine);
  }
}

}  // namespace kestrel::host
