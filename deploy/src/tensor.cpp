// Tensor construction helpers.
#include "kestrel/deploy/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kestrel::deploy {

using model::ElemType;
using model::Initializer;

namespace {

constexpr std::align_val_t kTensorAlign{64};
constexpr std::size_t kKeepFrom = 64 * 1024;             // smaller blocks go straight to the heap
constexpr std::size_t kKeepAtMost = 512u * 1024 * 1024;  // bytes kept in all

// Freed blocks by rounded size, and their total.
struct KeptBlocks {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> by_size;
  std::size_t bytes = 0;
};

KeptBlocks& kept() {
  static KeptBlocks* blocks = new KeptBlocks;  // never destroyed: tensors may be freed at exit
  return *blocks;
}

std::size_t rounded(std::size_t bytes) { return bytes < kKeepFrom ? bytes : (bytes + 4095) / 4096 * 4096; }

}  // namespace

// ---------------------------------------------------------------------------------------
// Arenas: a table of the live ones (release_tensor_memory must tell arena memory from
// the allocator's on any thread without a lock while none exists) and this thread's
// armed placements.

struct TensorArena::State {
  std::byte* base = nullptr;
  std::size_t size = 0;
  std::mutex mutex;
  std::vector<std::pair<std::size_t, std::size_t>> live;  // (offset, bytes) of the tensors placed, not released
  TensorArena::Counts counts;
};

namespace {

// A live arena's range, read without its state: a release on one thread must not touch
// the state of an arena another thread is destroying (a pointer in the range is that
// arena's tensor, which outlives no arena).
struct ArenaSlot {
  std::atomic<std::uintptr_t> begin{0}, end{0};
  std::atomic<TensorArena::State*> state{nullptr};
};
constexpr std::size_t kMaxArenas = 256;
ArenaSlot arenas[kMaxArenas];
std::atomic<std::size_t> arena_slots{0};   // slots ever used: how far a lookup scans
std::atomic<std::size_t> arenas_alive{0};  // 0: no pointer can be arena memory

struct Armed {
  TensorArena::State* arena;
  std::size_t offset, bytes;
};
constexpr int kMaxArmed = 8;
thread_local Armed armed[kMaxArmed];
thread_local int armed_count = 0;

void* take_armed(std::size_t bytes) {
  for (int i = 0; i < armed_count; ++i) {
    if (armed[i].bytes != bytes) continue;
    const Armed a = armed[i];
    std::copy(armed + i + 1, armed + armed_count, armed + i);
    --armed_count;
    std::lock_guard lock(a.arena->mutex);
    for (const auto& [offset, size] : a.arena->live) {
      if (offset < a.offset + a.bytes && a.offset < offset + size) {
        ++a.arena->counts.refused;
        return nullptr;
      }
    }
    try {
      a.arena->live.emplace_back(a.offset, a.bytes);
    } catch (...) {  // no memory for the bookkeeping: the allocator's block instead
      return nullptr;
    }
    ++a.arena->counts.placed;
    return a.arena->base + a.offset;
  }
  return nullptr;
}

bool give_back_to_arena(void* p) noexcept {
  if (arenas_alive.load(std::memory_order_acquire) == 0) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  for (std::size_t i = 0, n = arena_slots.load(std::memory_order_acquire); i < n; ++i) {
    const std::uintptr_t base = arenas[i].begin.load(std::memory_order_acquire);
    if (at < base || at >= arenas[i].end.load(std::memory_order_acquire)) continue;
    TensorArena::State* s = arenas[i].state.load(std::memory_order_acquire);
    if (!s) continue;
    std::lock_guard lock(s->mutex);
    auto it = std::find_if(s->live.begin(), s->live.end(), [&](const auto& l) { return l.first == at - base; });
    if (it != s->live.end()) s->live.erase(it);
    return true;
  }
  return false;
}

}  // namespace

TensorArena::TensorArena(std::size_t bytes) : state_(new State) {
  if (bytes == 0) return;
  for (std::size_t i = 0; i < kMaxArenas; ++i) {
    State* empty = nullptr;
    if (!arenas[i].state.compare_exchange_strong(empty, state_, std::memory_order_acq_rel)) continue;
    try {
      state_->base = static_cast<std::byte*>(::operator new(bytes, kTensorAlign));
    } catch (...) {
      arenas[i].state.store(nullptr, std::memory_order_release);
      delete state_;
      throw;
    }
    state_->size = bytes;
    const auto base = reinterpret_cast<std::uintptr_t>(state_->base);
    arenas[i].end.store(base + bytes, std::memory_order_release);
    arenas[i].begin.store(base, std::memory_order_release);
    std::size_t used = arena_slots.load();
    while (used < i + 1 && !arena_slots.compare_exchange_weak(used, i + 1)) {
    }
    arenas_alive.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
}

TensorArena::~TensorArena() {
  for (int i = 0; i < armed_count;) {
    if (armed[i].arena == state_) {
      std::copy(armed + i + 1, armed + armed_count, armed + i);
      --armed_count;
    } else {
      ++i;
    }
  }
  if (state_->base) {
    // The range first: no release looks at this state once it is gone.
    for (ArenaSlot& slot : arenas) {
      if (slot.state.load(std::memory_order_acquire) != state_) continue;
      slot.begin.store(0, std::memory_order_release);
      slot.end.store(0, std::memory_order_release);
      slot.state.store(nullptr, std::memory_order_release);
      break;
    }
    arenas_alive.fetch_sub(1, std::memory_order_acq_rel);
    ::operator delete(state_->base, kTensorAlign);
  }
  delete state_;
}

void TensorArena::place_next(std::size_t offset, std::size_t bytes) {
  if (!state_->base || bytes == 0 || offset > state_->size || bytes > state_->size - offset) return;
  if (armed_count < kMaxArmed) armed[armed_count++] = Armed{state_, offset, bytes};
}

void TensorArena::disarm_all() noexcept { armed_count = 0; }

std::size_t TensorArena::size() const { return state_->size; }

TensorArena::Counts TensorArena::counts() const {
  std::lock_guard lock(state_->mutex);
  return state_->counts;
}

void* acquire_tensor_memory(std::size_t bytes) {
  if (armed_count) {
    if (void* p = take_armed(bytes)) return p;
  }
  const std::size_t size = rounded(std::max<std::size_t>(bytes, 1));
  if (size >= kKeepFrom) {
    KeptBlocks& k = kept();
    std::lock_guard lock(k.mutex);
    auto it = k.by_size.find(size);
    if (it != k.by_size.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      k.bytes -= size;
      return p;
    }
  }
  return ::operator new(size, kTensorAlign);
}

void release_tensor_memory(void* p, std::size_t bytes) noexcept {
  if (!p || give_back_to_arena(p)) return;
  const std::size_t size = rounded(std::max<std::size_t>(bytes, 1));
  if (size >= kKeepFrom) {
    KeptBlocks& k = kept();
    std::lock_guard lock(k.mutex);
    if (k.bytes + size <= kKeepAtMost) {
      try {
        k.by_size[size].push_back(p);
        k.bytes += size;
        return;
      } catch (...) {  // no memory for the bookkeeping: free the block instead
      }
    }
  }
  ::operator delete(p, kTensorAlign);
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::int64_t Tensor::elements() const { return element_count(shape); }

Tensor Tensor::floats(std::vector<std::int64_t> shape, float fill) {
  Tensor t;
  t.shape = std::move(shape);
  t.f32.assign(static_cast<std::size_t>(t.elements()), fill);
  return t;
}

Tensor Tensor::floats(std::vector<std::int64_t> shape, std::span<const float> values) {
  Tensor t;
  t.shape = std::move(shape);
  t.f32.assign(values.begin(), values.end());
  return t;
}

Tensor Tensor::ints(std::vector<std::int64_t> shape, std::vector<std::int64_t> values) {
  Tensor t;
  t.type = ElemType::i64;
  t.shape = std::move(shape);
  t.i64 = std::move(values);
  return t;
}

Tensor Tensor::of(const Initializer& init) {
  if (init.type == ElemType::f32) return floats(init.shape, init.f32);
  return ints(init.shape, init.i64);
}

}  // namespace kestrel::deploy
