// A tensor as the model runner holds it: a logical (ONNX) shape, float or integer data,
// and how the float data is laid out in memory (plain row-major, or the blocked-channel
// NCHWc layout of the convolution kernels). Float storage is 64-byte aligned, as the
// kernel ABI promises kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kestrel/model/graph.h"

namespace kestrel::deploy {

// 64-byte-aligned memory for tensors. Blocks of 64 KiB and more are kept when freed (up to
// 512 MiB in all) and handed out again for the same rounded size: a model's runs allocate
// the same sizes every time, and memory fresh from the system costs a page fault per 4 KiB
// on first touch, which a kept block has paid already. Thread-safe.
void* acquire_tensor_memory(std::size_t bytes);
void release_tensor_memory(void* p, std::size_t bytes) noexcept;

// One block of memory that a model's activations are placed in at offsets planned ahead
// (program.h's MemoryPlan), so that a run allocates nothing. A placement is armed before
// the allocation it is meant for: the next acquire_tensor_memory of exactly that many
// bytes on the arming thread returns the arena at that offset, unless a tensor placed
// there earlier still overlaps the range (then the block comes from the allocator as
// usual and `refused` counts it): a plan that does not fit what runs costs memory, never
// a wrong answer. release_tensor_memory of arena memory gives the range back and frees
// nothing. Every tensor placed in an arena must be gone before the arena is destroyed.
// At most 256 arenas exist at a time; past that an arena has no memory (size() 0) and
// places nothing. Placements are per thread; the arena itself is thread-safe.
class TensorArena {
 public:
  explicit TensorArena(std::size_t bytes);
  ~TensorArena();
  TensorArena(const TensorArena&) = delete;
  TensorArena& operator=(const TensorArena&) = delete;

  // Arms a placement on this thread (at most 8 armed at a time; more are ignored).
  void place_next(std::size_t offset, std::size_t bytes);
  // Disarms this thread's placements not taken (disarm_all: those of every arena).
  static void disarm_all() noexcept;

  std::size_t size() const;
  struct Counts {
    std::size_t placed = 0;   // allocations handed the arena
    std::size_t refused = 0;  // armed placements refused: the range was still in use
  };
  Counts counts() const;

  struct State;

 private:
  State* state_;
};

// std::allocator with 64-byte alignment (kernel buffers) from acquire_tensor_memory,
// default-initialising: `AlignedFloats(n)` and `resize(n)` leave the new floats as they
// are (every writer of a tensor writes all of it; a zero pass would cost as much as a
// copy). Give a value (`assign(n, 0.0f)`, `Tensor::floats`) where zeros are meant.
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(acquire_tensor_memory(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { release_tensor_memory(p, n * sizeof(T)); }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  friend bool operator==(const AlignedAllocator&, const AlignedAllocator<U>&) {
    return true;
  }
};
using AlignedFloats = std::vector<float, AlignedAllocator<float>>;

enum class TensorLayout {
  plain,  // row-major in the logical shape
  nchwc,  // a 4-D [N][C][H][W] tensor stored [N][ceil(C/B)][H][W][B], lanes past C zero
};

struct Tensor {
  model::ElemType type = model::ElemType::f32;  // f32 (data in f32) or i64 (data in i64)
  std::vector<std::int64_t> shape;      // logical shape, whatever the layout
  TensorLayout layout = TensorLayout::plain;
  std::int64_t block = 0;               // B of the nchwc layout
  AlignedFloats f32;
  std::vector<std::int64_t> i64;

  // The product of the logical shape (1 for a scalar).
  std::int64_t elements() const;

  static Tensor floats(std::vector<std::int64_t> shape, float fill = 0.0f);
  static Tensor floats(std::vector<std::int64_t> shape, std::span<const float> values);
  static Tensor ints(std::vector<std::int64_t> shape, std::vector<std::int64_t> values);
  // An initializer as a plain tensor (f32 or i64 as stored).
  static Tensor of(const model::Initializer& init);
};

std::int64_t element_count(const std::vector<std::int64_t>& shape);
// "[1,3,224,224]"
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace kestrel::deploy
