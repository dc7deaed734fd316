// Kernel services: the parallel_for thread pool, the scratch allocator and the vendor
// library lookup behind the kernel ABI's function pointers.
#include "kestrel/device_runtime/kernel_services.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <thread>
#include <vector>

namespace kestrel::device {

namespace {

// A pause in a spin loop: the hint that lets the sibling hyperthread run.
void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A lock for the scratch bookkeeping, which kernels' parallel tasks take at the same
// moment (each packs into its own block): held for a map lookup, so a waiter spins
// rather than sleeping in the kernel, whose wake-up would cost tens of microseconds.
class SpinLock {
 public:
  void lock() {
    while (held_.exchange(1, std::memory_order_acquire) != 0) {
      for (int i = 0; held_.load(std::memory_order_relaxed) != 0; ++i) {
        if (i < 256) cpu_relax();
        else std::this_thread::yield();
      }
    }
  }
  void unlock() { held_.store(0, std::memory_order_release); }

 private:
  // A word, not a bool: riscv64 has no one-byte atomic exchange without libatomic.
  std::atomic<std::uint32_t> held_{0};
};

}  // namespace

// The pool's threads wait for work by spinning a short while, then sleeping. A model's
// kernels follow one another within microseconds, and a futex wake-up costs tens of
// microseconds on a virtual machine (more than a small kernel's whole run): spinning
// keeps the threads ready between calls; sleeping keeps an idle pool off the CPU. There
// is no spinning when the pool has more threads than the machine has hardware threads.
struct KernelServices::Pool {
  explicit Pool(unsigned threads) {
    const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
    spin = threads <= hardware ? std::chrono::microseconds(200) : std::chrono::microseconds(0);
    for (unsigned i = 1; i < threads; ++i) workers.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex);
      stopping.store(true);
      generation.fetch_add(1);
    }
    wake.notify_all();
    for (auto& t : workers) t.join();
  }

  // Spins until finished() or the spin time is over; true when finished() held.
  template <typename Done>
  bool spin_until(Done finished) const {
    if (spin.count() == 0) return finished();
    const auto until = std::chrono::steady_clock::now() + spin;
    for (unsigned i = 1;; ++i) {
      if (finished()) return true;
      cpu_relax();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() >= until) return finished();
        // Past the first few microseconds, give the core to any other thread that wants
        // it (a loaded machine): sched_yield returns at once when none does.
        if (i >= 1024) std::this_thread::yield();
      }
    }
  }

  // A job is open from its publication until the caller has drained it; a worker takes
  // part only by checking in (`active`) while it is open. The caller then waits for the
  // workers that checked in, never for one still asleep: a worker that wakes after the
  // work is gone finds the job closed and touches none of it. (Waiting for every worker
  // to acknowledge each job made a run wait for a sleeping thread's wake-up, a scheduler
  // tick when both share a core: tiny models took 10x longer at 2 threads than at 1.)
  // The check-in and the close are seq_cst: either the worker sees the job closed, or the
  // caller sees the worker active.
  void parallel_for(std::int64_t count, void (*f)(std::int64_t, void*), void* context) {
    if (count <= 0) return;
    if (workers.empty() || count == 1) {
      for (std::int64_t i = 0; i < count; ++i) f(i, context);
      return;
    }
    fn = f;
    ctx = context;
    n = count;
    next.store(0, std::memory_order_relaxed);
    open.store(true, std::memory_order_seq_cst);
    bool sleeping = false;
    {
      std::lock_guard lock(mutex);
      generation.fetch_add(1, std::memory_order_seq_cst);
      sleeping = sleepers > 0;
    }
    if (sleeping) wake.notify_all();
    drain();
    open.store(false, std::memory_order_seq_cst);
    if (spin_until([&] { return active.load(std::memory_order_seq_cst) == 0; })) return;
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return active.load(std::memory_order_seq_cst) == 0; });
  }

  // Takes indices in runs of `chunk` (a quarter of an even share): neighbouring indices
  // (rows of one output) stay on one thread, and a kernel's hundreds of tiny tasks cost a
  // few atomic operations on the shared counter rather than one each, which moves the
  // counter's cache line between cores every time.
  void drain() {
    const std::int64_t chunk = std::max<std::int64_t>(1, n / (static_cast<std::int64_t>(workers.size() + 1) * 4));
    for (std::int64_t i = next.fetch_add(chunk); i < n; i = next.fetch_add(chunk)) {
      for (std::int64_t j = i, end = std::min(n, i + chunk); j < end; ++j) fn(j, ctx);
    }
  }
  void work() {
    std::uint64_t seen = 0;
    while (true) {
      if (!spin_until([&] { return generation.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock lock(mutex);
        ++sleepers;
        wake.wait(lock, [&] { return generation.load(std::memory_order_acquire) != seen; });
        --sleepers;
      }
      seen = generation.load(std::memory_order_acquire);
      if (stopping.load()) return;
      active.fetch_add(1, std::memory_order_seq_cst);
      // Open: the job's fields are the current job's, and the caller waits for this
      // worker before it changes them. Closed: they may be changing; stay out.
      if (open.load(std::memory_order_seq_cst)) drain();
      if (active.fetch_sub(1, std::memory_order_seq_cst) == 1) {
        std::lock_guard lock(mutex);
        done.notify_one();
      }
    }
  }

  std::vector<std::thread> workers;
  std::chrono::microseconds spin{0};
  std::mutex mutex;
  std::condition_variable wake, done;
  std::atomic<std::uint64_t> generation{0};
  std::atomic<bool> stopping{false};
  int sleepers = 0;                 // under mutex
  std::atomic<bool> open{false};    // the current job takes workers
  std::atomic<int> active{0};       // workers checked in to the current job
  void (*fn)(std::int64_t, void*) = nullptr;
  void* ctx = nullptr;
  std::int64_t n = 0;
  std::atomic<std::int64_t> next{0};

  // Scratch blocks: those a kernel holds (with their size), and freed ones kept for the
  // next request of the same size. A kernel asks for the same scratch on every call (the
  // zero-padded copy of a convolution's input, say); memory fresh from the system costs a
  // page fault per 4 KiB on first touch, over 1 ms per call for a 3 MB buffer on a virtual
  // machine, where a kept block has paid it already. At most kKeepBytes are kept.
  static constexpr std::size_t kKeepBytes = 256u * 1024 * 1024;
  SpinLock alloc_mutex;
  std::map<void*, std::size_t> live;
  std::multimap<std::size_t, void*> kept;
  std::size_t kept_bytes = 0;

  // Under alloc_mutex: a freed block back to the kept ones, or to the system.
  void keep_or_free(void* p, std::size_t size) {
    if (kept_bytes + size <= kKeepBytes) {
      try {
        kept.emplace(size, p);
        kept_bytes += size;
        return;
      } catch (...) {  // no memory for the bookkeeping: free the block instead
      }
    }
    std::free(p);
  }

  // Vendor libraries by file name (null: it failed to load), never closed: a library
  // with threads of its own (OpenBLAS, OpenMP) must not be unloaded under them.
  std::mutex vendor_mutex;
  std::vector<std::pair<std::string, void*>> libraries;
  std::string vendor_failure;  // the last failed lookup, for KESTREL_KERNEL_VENDOR_MISSING
};

namespace {

// The ABI's services; their context is this object's Pool.
void service_parallel_for(void* context, std::int64_t n, void (*fn)(std::int64_t, void*), void* arg) {
  static_cast<KernelServices::Pool*>(context)->parallel_for(n, fn, arg);
}

void* service_alloc(void* context, std::size_t bytes) {
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  auto* pool = static_cast<KernelServices::Pool*>(context);
  void* p = nullptr;
  {
    std::lock_guard lock(pool->alloc_mutex);
    if (auto it = pool->kept.find(size); it != pool->kept.end()) {
      p = it->second;
      pool->kept.erase(it);
      pool->kept_bytes -= size;
    }
  }
  if (!p) p = std::aligned_alloc(64, size);  // outside the lock: it may ask the system
  if (!p) return nullptr;
  std::lock_guard lock(pool->alloc_mutex);
  try {
    pool->live.emplace(p, size);
  } catch (...) {
    std::free(p);
    return nullptr;
  }
  return p;
}

void service_release(void* context, void* p) {
  if (!p) return;
  auto* pool = static_cast<KernelServices::Pool*>(context);
  std::lock_guard lock(pool->alloc_mutex);
  auto it = pool->live.find(p);
  if (it == pool->live.end()) return;
  pool->keep_or_free(it->first, it->second);
  pool->live.erase(it);
}

void* service_vendor_symbol(void* context, const char* library, const char* symbol) {
  auto* pool = static_cast<KernelServices::Pool*>(context);
  std::lock_guard lock(pool->vendor_mutex);
  const std::string name = library ? library : "";
  const std::string what = "the vendor library " + name + (symbol ? std::string(" (symbol ") + symbol + ")" : "");
#if KESTREL_NO_VENDOR_LIBRARIES
  (void)symbol;
  pool->vendor_failure = what + " cannot be used: this runtime is linked fully statically and cannot load libraries";
  return nullptr;
#else
  if (!library || !symbol || name.find('/') != std::string::npos) {
    pool->vendor_failure = what + " cannot be used: a library is named by its file name, without a folder";
    return nullptr;
  }
  void* handle = nullptr;
  auto it = std::find_if(pool->libraries.begin(), pool->libraries.end(), [&](const auto& l) { return l.first == name; });
  if (it != pool->libraries.end()) {
    handle = it->second;
  } else {
    handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    const char* why = handle ? nullptr : ::dlerror();
    pool->libraries.emplace_back(name, handle);
    if (!handle) {
      pool->vendor_failure = "the vendor library " + name + " is not on this device (" + (why ? why : "dlopen failed") + ")";
      return nullptr;
    }
  }
  if (!handle) {
    pool->vendor_failure = "the vendor library " + name + " is not on this device";
    return nullptr;
  }
  void* found = ::dlsym(handle, symbol);
  if (!found) pool->vendor_failure = "the vendor library " + name + " has no symbol " + symbol;
  return found;
#endif
}

}  // namespace

KernelServices::KernelServices(unsigned threads) {
  threads = std::clamp(threads, 1u, 1024u);
  pool_ = std::make_unique<Pool>(threads);
  table_.abi_version = KESTREL_KERNEL_ABI_VERSION;
  table_.num_threads = threads;
  table_.context = pool_.get();
  table_.parallel_for = service_parallel_for;
  table_.alloc = service_alloc;
  table_.release = service_release;
  table_.vendor_symbol = service_vendor_symbol;
}

std::string KernelServices::describe_error(std::int32_t code) const {
  if (code == KESTREL_KERNEL_VENDOR_MISSING) {
    std::lock_guard lock(pool_->vendor_mutex);
    return pool_->vendor_failure.empty() ? "a vendor library is not on this device" : pool_->vendor_failure;
  }
  if (code >= KESTREL_KERNEL_VENDOR_FAILED && code <= KESTREL_KERNEL_VENDOR_FAILED + 0xff) {
    return "a vendor library call failed (its status " + std::to_string(code - KESTREL_KERNEL_VENDOR_FAILED) + ")";
  }
  return "kernel returned error code " + std::to_string(code);
}

KernelServices::~KernelServices() {
  reclaim_scratch();
  for (const auto& [size, p] : pool_->kept) std::free(p);
}

void KernelServices::reclaim_scratch() {
  std::lock_guard lock(pool_->alloc_mutex);
  for (const auto& [p, size] : pool_->live) pool_->keep_or_free(p, size);
  pool_->live.clear();
}

}  // namespace kestrel::device
