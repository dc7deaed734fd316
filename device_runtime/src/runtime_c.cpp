// libkestrel_rt: the C API of kestrel/kernel/runtime.h over KernelServices, the same
// thread pool and scratch allocator kestrel-device gives kernels. Shipped beside an
// exported kernel library; C ABI only (no C++ type crosses it, no exception escapes).
#include "kestrel/kernel/runtime.h"

#include <algorithm>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>

#include "kestrel/device_runtime/kernel_services.h"

namespace {

// A runtime: its services and the text describe() returned last.
struct Runtime {
  explicit Runtime(unsigned threads) : services(threads) {}
  kestrel::device::KernelServices services;
  std::string description;
};

// The table a caller holds -> its runtime. The table is KernelServices' own (its context
// is the pool), so the runtime is found by the table's address.
struct Registry {
  std::mutex mutex;
  std::unordered_map<const kestrel_services*, Runtime*> runtimes;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

Runtime* find(const kestrel_services* table) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  auto it = r.runtimes.find(table);
  return it == r.runtimes.end() ? nullptr : it->second;
}

}  // namespace

#define KESTREL_RT_API extern "C" __attribute__((visibility("default")))

KESTREL_RT_API kestrel_services* kestrel_runtime_create(uint32_t num_threads) {
  try {
    unsigned threads = num_threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    auto* runtime = new Runtime(threads);
    // The ABI hands kernels a const table; the C API gives the caller a mutable pointer
    // (the same object) so it can pass it back to destroy.
    auto* table = const_cast<kestrel_services*>(runtime->services.table());
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    r.runtimes.emplace(table, runtime);
    return table;
  } catch (...) {  // threads that cannot start, out of memory
    return nullptr;
  }
}

KESTREL_RT_API void kestrel_runtime_destroy(kestrel_services* services) {
  if (!services) return;
  Runtime* runtime = nullptr;
  {
    Registry& r = registry();
    const std::lock_guard lock(r.mutex);
    auto it = r.runtimes.find(services);
    if (it == r.runtimes.end()) return;
    runtime = it->second;
    r.runtimes.erase(it);
  }
  delete runtime;
}

KESTREL_RT_API void kestrel_runtime_reclaim(kestrel_services* services) {
  if (Runtime* runtime = find(services)) runtime->services.reclaim_scratch();
}

KESTREL_RT_API const char* kestrel_runtime_describe(kestrel_services* services, int32_t code) {
  Runtime* runtime = find(services);
  if (!runtime) return "not a table of kestrel_runtime_create";
  try {
    runtime->description = runtime->services.describe_error(code);
  } catch (...) {
    return "kernel returned an error (no memory to describe it)";
  }
  return runtime->description.c_str();
}
