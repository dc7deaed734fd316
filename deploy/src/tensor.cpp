// Tensor construction helpers.
#include "kestrel/deploy/tensor.h"

#include <algorithm>

namespace kestrel::deploy {

using model::ElemType;
using model::Initializer;

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
