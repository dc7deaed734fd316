// Tensor construction helpers.
#include "kestrel/deploy/tensor.h"

#include <algorithm>
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

void* acquire_tensor_memory(std::size_t bytes) {
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
  if (!p) return;
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
