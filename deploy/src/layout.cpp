// Layout conversions between ONNX's plain tensors and the blocked layouts of the
// convolution kernels (ops/conv2d/conv2d_nchwc_ref.c, depthwise_conv2d_ref.c).
#include "kestrel/deploy/layout.h"

#include "parallel.h"

#include <algorithm>

namespace kestrel::deploy {

using model::ArgLayout;
using model::ElemType;
using model::Initializer;
using model::ModelError;

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

void need(bool ok, const std::string& what) {
  if (!ok) throw ModelError(what);
}

}  // namespace

Tensor to_nchwc(const Tensor& plain, std::int64_t block, const kestrel_services* services) {
  if (plain.layout == TensorLayout::nchwc && plain.block == block) return plain;
  if (plain.layout == TensorLayout::nchwc) return to_nchwc(to_plain(plain, services), block, services);
  need(plain.type == ElemType::f32 && plain.shape.size() == 4 && block > 0,
       "the NCHWc layout needs a 4-D float tensor, got " + shape_text(plain.shape));
  const std::int64_t n = plain.shape[0], c = plain.shape[1], h = plain.shape[2], w = plain.shape[3];
  const std::int64_t cb = ceil_div(c, block), hw = h * w;
  Tensor out;
  out.shape = plain.shape;
  out.layout = TensorLayout::nchwc;
  out.block = block;
  out.f32.resize(static_cast<std::size_t>(n * cb * hw * block));
  // Per (image, channel block): the output written in order, a vector of `block` lanes
  // from `lanes` input planes (zeros past C), over the pool.
  detail::parallel_ranges(services, n * cb, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t ib = first; ib < last; ++ib) {
      const std::int64_t i = ib / cb, b = ib % cb, lanes = std::min(block, c - b * block);
      const float* src = plain.f32.data() + (i * c + b * block) * hw;
      float* dst = out.f32.data() + ib * hw * block;
      for (std::int64_t p = 0; p < hw; ++p) {
        float* v = dst + p * block;
        for (std::int64_t l = 0; l < lanes; ++l) v[l] = src[l * hw + p];
        for (std::int64_t l = lanes; l < block; ++l) v[l] = 0.0f;
      }
    }
  });
  return out;
}

Tensor to_plain(const Tensor& tensor, const kestrel_services* services) {
  if (tensor.layout == TensorLayout::plain) return tensor;
  const std::int64_t n = tensor.shape[0], c = tensor.shape[1], h = tensor.shape[2], w = tensor.shape[3];
  const std::int64_t block = tensor.block, cb = ceil_div(c, block), hw = h * w;
  need(static_cast<std::int64_t>(tensor.f32.size()) == n * cb * hw * block,
       "an NCHWc tensor of shape " + shape_text(tensor.shape) + " holds " + std::to_string(tensor.f32.size()) +
           " floats, not " + std::to_string(n * cb * hw * block));
  Tensor out;
  out.shape = tensor.shape;
  out.f32.resize(static_cast<std::size_t>(n * c * hw));
  // Per (image, channel block): the blocked data read in order, each lane to its plane.
  detail::parallel_ranges(services, n * cb, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t ib = first; ib < last; ++ib) {
      const std::int64_t i = ib / cb, b = ib % cb, lanes = std::min(block, c - b * block);
      const float* src = tensor.f32.data() + ib * hw * block;
      float* dst = out.f32.data() + (i * c + b * block) * hw;
      for (std::int64_t p = 0; p < hw; ++p) {
        for (std::int64_t l = 0; l < lanes; ++l) dst[l * hw + p] = src[p * block + l];
      }
    }
  });
  return out;
}

AlignedFloats pack_initializer(const Initializer& init, ArgLayout layout, std::int64_t block, std::int64_t elements) {
  const auto& s = init.shape;
  const std::string what = "initializer " + init.name + " " + shape_text(s);
  need(init.type == ElemType::f32, what + " is not float (a kernel argument must be)");
  AlignedFloats out(static_cast<std::size_t>(std::max<std::int64_t>(elements, 0)), 0.0f);
  auto fits = [&](std::int64_t count, const std::string& layout_name) {
    need(count <= elements, what + " needs " + std::to_string(count) + " floats as " + layout_name + ", the kernel's " +
                                "argument has " + std::to_string(elements));
  };
  switch (layout) {
    case ArgLayout::plain:
    case ArgLayout::channel_vector: {
      const auto count = static_cast<std::int64_t>(init.f32.size());
      fits(count, layout == ArgLayout::plain ? "plain" : "a channel vector");
      std::copy(init.f32.begin(), init.f32.end(), out.begin());
      return out;
    }
    case ArgLayout::transposed: {
      need(s.size() == 2, what + " cannot be transposed: it is not 2-D");
      const std::int64_t rows = s[0], cols = s[1];
      fits(rows * cols, "transposed");
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) out[static_cast<std::size_t>(c * rows + r)] = init.f32[static_cast<std::size_t>(r * cols + c)];
      }
      return out;
    }
    case ArgLayout::gemm_panels:
    case ArgLayout::gemm_panels_transposed: {
      need(s.size() == 2 && block > 0, what + " is not a 2-D matrix to pack in panels");
      const bool transposed = layout == ArgLayout::gemm_panels_transposed;
      const std::int64_t k = transposed ? s[1] : s[0], n = transposed ? s[0] : s[1];
      fits(ceil_div(n, block) * block * k, "gemm panels of width " + std::to_string(block));
      // Panel p holds columns [p*B, p*B + B) row by row: out[p][kk][j].
      for (std::int64_t kk = 0; kk < k; ++kk) {
        for (std::int64_t j = 0; j < n; ++j) {
          const std::int64_t from = transposed ? j * k + kk : kk * n + j;
          out[static_cast<std::size_t>((j / block * k + kk) * block + j % block)] = init.f32[static_cast<std::size_t>(from)];
        }
      }
      return out;
    }
    case ArgLayout::conv_weight: {
      need(s.size() == 4 && block > 0, what + " is not a 4-D convolution weight");
      const std::int64_t k = s[0], cg = s[1], r = s[2], sw = s[3];
      const std::int64_t kb = ceil_div(k, block), cbg = ceil_div(cg, block);
      fits(kb * cbg * r * sw * block * block, "a blocked convolution weight");
      for (std::int64_t ko = 0; ko < k; ++ko) {
        for (std::int64_t c = 0; c < cg; ++c) {
          for (std::int64_t y = 0; y < r; ++y) {
            for (std::int64_t x = 0; x < sw; ++x) {
              const std::int64_t at = ((((ko / block * cbg + c / block) * r + y) * sw + x) * block + c % block) * block + ko % block;
              out[static_cast<std::size_t>(at)] = init.f32[static_cast<std::size_t>(((ko * cg + c) * r + y) * sw + x)];
            }
          }
        }
      }
      return out;
    }
    case ArgLayout::dw_weight: {
      need(s.size() == 4 && s[1] == 1 && block > 0, what + " is not a depthwise weight [C][1][R][S]");
      const std::int64_t c = s[0], r = s[2], sw = s[3];
      fits(ceil_div(c, block) * r * sw * block, "a blocked depthwise weight");
      for (std::int64_t ch = 0; ch < c; ++ch) {
        for (std::int64_t y = 0; y < r; ++y) {
          for (std::int64_t x = 0; x < sw; ++x) {
            out[static_cast<std::size_t>(((ch / block * r + y) * sw + x) * block + ch % block)] =
                init.f32[static_cast<std::size_t>((ch * r + y) * sw + x)];
          }
        }
      }
      return out;
    }
    case ArgLayout::winograd_weight:
    case ArgLayout::winograd2_weight: {
      need(s.size() == 4 && s[2] == 3 && s[3] == 3 && block > 0, what + " is not a 3x3 convolution weight");
      // G of F(4x4, 3x3) (the points 0, 1, -1, 2, -2, infinity) and of F(2x2, 3x3) (0, 1,
      // -1, infinity); U = G g G^T in double.
      static constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},
                                           {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                           {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                           {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                           {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                           {0, 0, 1}};
      static constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
      const bool f4 = layout == ArgLayout::winograd_weight;
      const int alpha = f4 ? 6 : 4;
      auto g_at = [&](int i, int j) { return f4 ? kG4[i][j] : kG2[i][j]; };
      const std::int64_t k = s[0], c = s[1], kb = ceil_div(k, block), cb = ceil_div(c, block);
      fits(alpha * alpha * kb * cb * block * block,
           f4 ? "a Winograd F(4x4,3x3) weight" : "a Winograd F(2x2,3x3) weight");
      for (std::int64_t ko = 0; ko < k; ++ko) {
        for (std::int64_t ci = 0; ci < c; ++ci) {
          const float* g = init.f32.data() + (ko * c + ci) * 9;
          double gg[6][3];  // G g
          for (int i = 0; i < alpha; ++i) {
            for (int j = 0; j < 3; ++j) {
              gg[i][j] = g_at(i, 0) * g[j] + g_at(i, 1) * g[3 + j] + g_at(i, 2) * g[6 + j];
            }
          }
          for (int i = 0; i < alpha; ++i) {
            for (int j = 0; j < alpha; ++j) {
              const double u = gg[i][0] * g_at(j, 0) + gg[i][1] * g_at(j, 1) + gg[i][2] * g_at(j, 2);
              const std::int64_t at = (((i * alpha + j) * kb + ko / block) * cb + ci / block) * block * block +
                                      ci % block * block + ko % block;
              out[static_cast<std::size_t>(at)] = static_cast<float>(u);
            }
          }
        }
      }
      return out;
    }
    case ArgLayout::nchwc: {
      Tensor blocked = to_nchwc(Tensor::of(init), block);
      fits(static_cast<std::int64_t>(blocked.f32.size()), "NCHWc");
      std::copy(blocked.f32.begin(), blocked.f32.end(), out.begin());
      return out;
    }
  }
  throw ModelError(what + ": unknown argument layout");
}

}  // namespace kestrel::deploy
