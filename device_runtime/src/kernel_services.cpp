// Kernel services: the parallel_for thread pool and the scratch allocator behind the
// kernel ABI's function pointers.
#include "kestrel/device_runtime/kernel_services.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kestrel::device {

struct KernelServices::Pool {
  explicit Pool(unsigned threads) {
    for (unsigned i = 1; i < threads; ++i) workers.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
      ++generation;
    }
    wake.notify_all();
    for (auto& t : workers) t.join();
  }

  void parallel_for(std::int64_t count, void (*f)(std::int64_t, void*), void* context) {
    if (count <= 0) return;
    if (workers.empty() || count == 1) {
      for (std::int64_t i = 0; i < count; ++i) f(i, context);
      return;
    }
    {
      std::lock_guard lock(mutex);
      fn = f;
      ctx = context;
      n = count;
      next.store(0);
      busy = static_cast<int>(workers.size());
      ++generation;
    }
    wake.notify_all();
    drain();
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return busy == 0; });
  }

  void drain() {
    for (std::int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, ctx);
  }
  void work() {
    std::uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return generation != seen; });
        seen = generation;
        if (stopping) return;
      }
      drain();
      std::lock_guard lock(mutex);
      if (--busy == 0) done.notify_one();
    }
  }

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake, done;
  std::uint64_t generation = 0;
  bool stopping = false;
  int busy = 0;
  void (*fn)(std::int64_t, void*) = nullptr;
  void* ctx = nullptr;
  std::int64_t n = 0;
  std::atomic<std::int64_t> next{0};

  std::mutex alloc_mutex;
  std::set<void*> live;
};

namespace {

// The ABI's services; their context is this object's Pool.
void service_parallel_for(void* context, std::int64_t n, void (*fn)(std::int64_t, void*), void* arg) {
  static_cast<KernelServices::Pool*>(context)->parallel_for(n, fn, arg);
}

void* service_alloc(void* context, std::size_t bytes) {
  void* p = std::aligned_alloc(64, (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64);
  if (p) {
    auto* pool = static_cast<KernelServices::Pool*>(context);
    std::lock_guard lock(pool->alloc_mutex);
    pool->live.insert(p);
  }
  return p;
}

void service_release(void* context, void* p) {
  if (!p) return;
  auto* pool = static_cast<KernelServices::Pool*>(context);
  std::lock_guard lock(pool->alloc_mutex);
  if (pool->live.erase(p)) std::free(p);
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
}

KernelServices::~KernelServices() { reclaim_scratch(); }

void KernelServices::reclaim_scratch() {
  std::lock_guard lock(pool_->alloc_mutex);
  for (void* p : pool_->live) std::free(p);
  pool_->live.clear();
}

}  // namespace kestrel::device
