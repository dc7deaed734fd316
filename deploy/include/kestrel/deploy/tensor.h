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
#include <vector>

#include "kestrel/model/graph.h"

namespace kestrel::deploy {

// std::allocator with 64-byte alignment (kernel buffers), value-initialising.
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }
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
