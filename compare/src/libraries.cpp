// OpenBLAS and oneDNN contenders for `kestrel bench`, each compiled in only when the
// library was found at configure time (KESTREL_HAVE_OPENBLAS, KESTREL_HAVE_ONEDNN).
#include "kestrel/compare/libraries.h"

#include "kestrel/device_runtime/kernel_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#if KESTREL_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if KESTREL_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace kestrel::compare {

using device::FloatBuffer;

// ---- problems ------------------------------------------------------------------

std::vector<std::vector<std::int64_t>> Problem::input_shapes() const {
  if (kind == Kind::gemm) {
    std::vector<std::vector<std::int64_t>> shapes = {{m, k}, {k, n}};
    if (bias) shapes.push_back({n});
    if (residual) shapes.push_back({m, n});
    return shapes;
  }
  if (kind == Kind::batch_matmul) {
    return {trans_a ? std::vector<std::int64_t>{batch, k, m} : std::vector<std::int64_t>{batch, m, k},
            trans_b ? std::vector<std::int64_t>{batch, n, k} : std::vector<std::int64_t>{batch, k, n}};
  }
  std::vector<std::vector<std::int64_t>> shapes = {{batch, c, h, w}, {out_c, c / groups, r, s}};
  if (bias) shapes.push_back({out_c});
  if (residual) shapes.push_back({batch, out_c, p(), q()});
  return shapes;
}

std::vector<std::int64_t> Problem::output_shape() const {
  if (kind == Kind::gemm) return {m, n};
  if (kind == Kind::batch_matmul) return {batch, m, n};
  return {batch, out_c, p(), q()};
}

std::string_view to_string(Problem::Kind kind) {
  switch (kind) {
    case Problem::Kind::gemm: return "gemm";
    case Problem::Kind::batch_matmul: return "batch_matmul";
    case Problem::Kind::conv2d: return "conv2d";
  }
  return "?";
}

std::optional<Problem> problem_for(const ops::Op& op, const ops::Params& params) {
  auto has = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return params.contains(n); });
  };
  Problem p;
  auto only = [&](std::initializer_list<const char*> known) {
    return std::all_of(params.begin(), params.end(), [&](const auto& entry) {
      return std::any_of(known.begin(), known.end(), [&](const char* k) { return entry.first == k; });
    });
  };
  if (has({"M", "N", "K"}) && !params.contains("batch") && only({"M", "N", "K", "bias", "residual", "act"})) {
    p.kind = Problem::Kind::gemm;
    p.m = params.at("M");
    p.n = params.at("N");
    p.k = params.at("K");
    p.bias = params.contains("bias") && params.at("bias") != 0;
    p.residual = params.contains("residual") && params.at("residual") != 0;
    p.act = params.contains("act") ? static_cast<int>(params.at("act")) : 0;
    if (p.act < 0 || p.act > 3) return std::nullopt;
    return p;
  }
  if (has({"batch", "M", "N", "K"})) {
    if (!only({"batch", "M", "N", "K", "trans_a", "trans_b"})) return std::nullopt;  // all understood
    p.kind = Problem::Kind::batch_matmul;
    p.batch = params.at("batch");
    p.m = params.at("M");
    p.n = params.at("N");
    p.k = params.at("K");
    p.trans_a = params.contains("trans_a") && params.at("trans_a") != 0;
    p.trans_b = params.contains("trans_b") && params.at("trans_b") != 0;
    return p;
  }
  // Depthwise convolution has no K: one output channel per input channel (its parameters
  // alone would not tell it from pooling, hence the name).
  const bool depthwise = op.name() == "depthwise_conv2d" && has({"N", "C", "H", "W", "R", "S"});
  if (depthwise || has({"N", "C", "H", "W", "K", "R", "S"})) {
    p.kind = Problem::Kind::conv2d;
    p.batch = params.at("N");
    p.c = params.at("C");
    p.h = params.at("H");
    p.w = params.at("W");
    p.out_c = depthwise ? p.c : params.at("K");
    p.r = params.at("R");
    p.s = params.at("S");
    auto get = [&](const char* name, std::int64_t fallback) {
      auto it = params.find(name);
      return it == params.end() ? fallback : it->second;
    };
    p.stride = get("stride", 1);
    p.pad = get("pad", 0);
    p.dilation = get("dilation", 1);
    p.groups = depthwise ? p.c : get("groups", 1);
    if (p.groups < 1 || p.c % p.groups != 0 || p.out_c % p.groups != 0) return std::nullopt;
    p.bias = get("bias", 0) != 0;
    p.residual = get("residual", 0) != 0;
    p.act = static_cast<int>(get("act", 0));
    if (p.act < 0 || p.act > 3) return std::nullopt;
    // Parameters the libraries do not know would change the computation: compare only
    // when every parameter is understood. `block` (the channel block of the NCHWc ops)
    // changes only the layout; the libraries then run the same convolution on inputs of
    // their own (see canonical_layout).
    for (const auto& [name, value] : params) {
      static const char* known[] = {"N",      "C",      "H",    "W",        "K",   "R",  "S",   "stride",
                                    "pad",    "dilation", "groups", "block", "bias", "residual", "act"};
      if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return name == k; })) {
        return std::nullopt;
      }
    }
    if (p.p() < 1 || p.q() < 1) return std::nullopt;
    return p;
  }
  return std::nullopt;
}

bool canonical_layout(const ops::Op& op, const ops::Params& params, const Problem& problem) {
  auto tensors = op.tensors(params);
  auto inputs = problem.input_shapes();
  if (tensors.size() != inputs.size() + 1) return false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (tensors[i].role != ops::Role::input || tensors[i].dtype != ops::DType::f32 || tensors[i].shape != inputs[i]) {
      return false;
    }
  }
  const auto& out = tensors.back();
  return out.role == ops::Role::output && out.dtype == ops::DType::f32 && out.shape == problem.output_shape();
}

namespace {

// ---- OpenBLAS --------------------------------------------------------------------------

#if KESTREL_HAVE_OPENBLAS

// The epilogue's activation, as the ops define it (0 none, 1 relu, 2 relu6, 3 gelu).
float activate(float x, int act) {
  switch (act) {
    case 1: return std::max(x, 0.0f);
    case 2: return std::min(std::max(x, 0.0f), 6.0f);
    case 3: return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
    default: return x;
  }
}

// gemm; with an epilogue, cblas_sgemm then one pass over C for bias, residual and the
// activation (single-threaded).
class OpenBlasGemm final : public Contender {
 public:
  OpenBlasGemm(const Problem& p, const std::vector<const float*>& in)
      : p_(p), a_(in[0]), b_(in[1]), bias_(p.bias ? in[2] : nullptr), residual_(p.residual ? in[2 + p.bias] : nullptr),
        c_(p.m * p.n) {}
  std::string name() const override { return "openblas"; }
  std::string description() const override {
    return std::string("cblas_sgemm, row-major, no transposes") +
           (epilogue() ? " + one pass for bias/residual/activation" : "");
  }
  void run() override {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(p_.m), static_cast<blasint>(p_.n),
                static_cast<blasint>(p_.k), 1.0f, a_, static_cast<blasint>(p_.k), b_, static_cast<blasint>(p_.n), 0.0f,
                c_.data(), static_cast<blasint>(p_.n));
    if (!epilogue()) return;
    float* c = c_.data();
    for (std::int64_t i = 0; i < p_.m; ++i) {
      for (std::int64_t j = 0; j < p_.n; ++j) {
        float v = c[i * p_.n + j];
        if (bias_) v += bias_[j];
        if (residual_) v += residual_[i * p_.n + j];
        c[i * p_.n + j] = activate(v, p_.act);
      }
    }
  }
  std::span<const float> output() override { return c_.view(); }

 private:
  bool epilogue() const { return p_.bias || p_.residual || p_.act != 0; }
  Problem p_;
  const float *a_, *b_, *bias_, *residual_;
  FloatBuffer c_;
};

// A batched matmul as a loop of cblas_sgemm calls over the batch, transposes passed to
// sgemm (no copies).
class OpenBlasBatchGemm final : public Contender {
 public:
  OpenBlasBatchGemm(const Problem& p, const float* a, const float* b)
      : p_(p), a_(a), b_(b), c_(p.batch * p.m * p.n) {}
  std::string name() const override { return "openblas"; }
  std::string description() const override {
    return std::string("a loop of cblas_sgemm over the batch, row-major, ") + (p_.trans_a ? "A^T" : "A") + " * " +
           (p_.trans_b ? "B^T" : "B");
  }
  void run() override {
    const auto m = static_cast<blasint>(p_.m), n = static_cast<blasint>(p_.n), k = static_cast<blasint>(p_.k);
    for (std::int64_t t = 0; t < p_.batch; ++t) {
      cblas_sgemm(CblasRowMajor, p_.trans_a ? CblasTrans : CblasNoTrans, p_.trans_b ? CblasTrans : CblasNoTrans, m, n,
                  k, 1.0f, a_ + t * p_.m * p_.k, p_.trans_a ? m : k, b_ + t * p_.k * p_.n, p_.trans_b ? k : n, 0.0f,
                  c_.data() + t * p_.m * p_.n, n);
    }
  }
  std::span<const float> output() override { return c_.view(); }

 private:
  Problem p_;
  const float *a_, *b_;
  FloatBuffer c_;
};

// Convolution the way a gemm-only library does it: im2col of the input into
// [C*R*S][P*Q] columns (single-threaded), then per group weights[K/G][C/G*R*S] times the
// group's C/G*R*S rows of the columns; with an epilogue, one pass over the output for
// bias, residual and the activation (single-threaded).
class OpenBlasIm2col final : public Contender {
 public:
  OpenBlasIm2col(const Problem& p, const std::vector<const float*>& in)
      : p_(p), in_(in[0]), weights_(in[1]), bias_(p.bias ? in[2] : nullptr),
        residual_(p.residual ? in[2 + p.bias] : nullptr), cols_(p.c * p.r * p.s * p.p() * p.q()),
        out_(p.batch * p.out_c * p.p() * p.q()) {}
  std::string name() const override { return "openblas"; }
  std::string description() const override {
    return (p_.groups == 1 ? "im2col (1 thread) + cblas_sgemm"
                           : "im2col (1 thread) + one cblas_sgemm per group (" + std::to_string(p_.groups) + ")") +
           std::string(epilogue() ? " + one pass for bias/residual/activation" : "");
  }
  void run() override {
    const std::int64_t pq = p_.p() * p_.q(), kg = p_.out_c / p_.groups, crs = p_.c / p_.groups * p_.r * p_.s;
    for (std::int64_t n = 0; n < p_.batch; ++n) {
      const float* image = in_ + n * p_.c * p_.h * p_.w;
      float* col = cols_.data();
      for (std::int64_t c = 0; c < p_.c; ++c) {
        for (std::int64_t r = 0; r < p_.r; ++r) {
          for (std::int64_t s = 0; s < p_.s; ++s) {
            for (std::int64_t y = 0; y < p_.p(); ++y) {
              std::int64_t iy = y * p_.stride - p_.pad + r * p_.dilation;
              for (std::int64_t x = 0; x < p_.q(); ++x) {
                std::int64_t ix = x * p_.stride - p_.pad + s * p_.dilation;
                *col++ = (iy >= 0 && iy < p_.h && ix >= 0 && ix < p_.w) ? image[(c * p_.h + iy) * p_.w + ix] : 0.0f;
              }
            }
          }
        }
      }
      for (std::int64_t g = 0; g < p_.groups; ++g) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(kg), static_cast<blasint>(pq),
                    static_cast<blasint>(crs), 1.0f, weights_ + g * kg * crs, static_cast<blasint>(crs),
                    cols_.data() + g * crs * pq, static_cast<blasint>(pq), 0.0f,
                    out_.data() + (n * p_.out_c + g * kg) * pq, static_cast<blasint>(pq));
      }
      if (!epilogue()) continue;
      for (std::int64_t k = 0; k < p_.out_c; ++k) {
        const std::int64_t at = (n * p_.out_c + k) * pq;
        float* o = out_.data() + at;
        for (std::int64_t i = 0; i < pq; ++i) {
          float v = o[i];
          if (bias_) v += bias_[k];
          if (residual_) v += residual_[at + i];
          o[i] = activate(v, p_.act);
        }
      }
    }
  }
  std::span<const float> output() override { return out_.view(); }

 private:
  bool epilogue() const { return p_.bias || p_.residual || p_.act != 0; }
  Problem p_;
  const float *in_, *weights_, *bias_, *residual_;
  FloatBuffer cols_, out_;
};

#endif

// ---- oneDNN ----------------------------------------------------------------------------

#if KESTREL_HAVE_ONEDNN

using dnnl::memory;
using tag = memory::format_tag;

// A matmul on plain row-major tensors: 2-D for gemm, 3-D with the batch outermost for
// batch_matmul (a transposed operand is described by its strides: tag acb).
class OneDnnMatmul final : public Contender {
 public:
  OneDnnMatmul(const Problem& p, const std::vector<const float*>& in)
      : batched_(p.kind == Problem::Kind::batch_matmul), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_),
        c_(p.batch * p.m * p.n) {
    const float* a = in[0];
    const float* b = in[1];
    memory::desc a_md, b_md, c_md;
    if (batched_) {
      a_md = memory::desc({p.batch, p.m, p.k}, memory::data_type::f32, p.trans_a ? tag::acb : tag::abc);
      b_md = memory::desc({p.batch, p.k, p.n}, memory::data_type::f32, p.trans_b ? tag::acb : tag::abc);
      c_md = memory::desc({p.batch, p.m, p.n}, memory::data_type::f32, tag::abc);
    } else {
      a_md = memory::desc({p.m, p.k}, memory::data_type::f32, tag::ab);
      b_md = memory::desc({p.k, p.n}, memory::data_type::f32, tag::ab);
      c_md = memory::desc({p.m, p.n}, memory::data_type::f32, tag::ab);
    }
    // gemm's epilogue as oneDNN's own fusion: the matmul's bias ([1][n]), then post-ops
    // (a binary add of the residual, the activation as an eltwise).
    dnnl::post_ops post_ops;
    if (p.residual) {
      memory::desc r_md({p.m, p.n}, memory::data_type::f32, tag::ab);
      post_ops.append_binary(dnnl::algorithm::binary_add, r_md);
      args_[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] =
          memory(r_md, engine_, const_cast<float*>(in[2 + p.bias]));
    }
    if (p.act == 1) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    if (p.act == 2) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 6.0f);
    if (p.act == 3) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(post_ops);
    fused_ = p.bias || p.residual || p.act != 0;
    std::optional<dnnl::matmul::desc> desc;
    if (p.bias) {
      memory::desc bias_md({1, p.n}, memory::data_type::f32, tag::ab);
      desc.emplace(a_md, b_md, bias_md, c_md);
      args_[DNNL_ARG_BIAS] = memory(bias_md, engine_, const_cast<float*>(in[2]));
    } else {
      desc.emplace(a_md, b_md, c_md);
    }
    dnnl::matmul::primitive_desc pd(*desc, attr, engine_);
    impl_ = pd.impl_info_str();
    primitive_ = dnnl::matmul(pd);
    args_[DNNL_ARG_SRC] = memory(a_md, engine_, const_cast<float*>(a));
    args_[DNNL_ARG_WEIGHTS] = memory(b_md, engine_, const_cast<float*>(b));
    args_[DNNL_ARG_DST] = memory(c_md, engine_, c_.data());
  }
  std::string name() const override { return "onednn"; }
  std::string description() const override {
    return std::string(batched_ ? "matmul primitive on 3-D tensors" : "matmul primitive") +
           (fused_ ? " with bias/post-ops (binary add, eltwise)" : "") + ", plain row-major (" + impl_ + ")";
  }
  void run() override {
    primitive_.execute(stream_, args_);
    stream_.wait();
  }
  std::span<const float> output() override { return c_.view(); }

 private:
  bool batched_, fused_ = false;
  dnnl::engine engine_;
  dnnl::stream stream_;
  FloatBuffer c_;
  dnnl::primitive primitive_;
  std::unordered_map<int, memory> args_;
  std::string impl_;
};

// Convolution on plain NCHW/OIHW tensors (GOIHW with groups), or (any_layout) on the
// layouts oneDNN picks for the shape (blocked, e.g. nChw8c with its depthwise kernel for
// groups = C): the input and weights are reordered into them once, before timing, and the
// output is reordered back to NCHW only to check it; run() is the convolution alone.
class OneDnnConv final : public Contender {
 public:
  OneDnnConv(const Problem& p, const std::vector<const float*>& in, bool any_layout)
      : any_(any_layout), groups_(p.groups), fused_(p.bias || p.residual || p.act != 0),
        engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), out_(p.batch * p.out_c * p.p() * p.q()) {
    memory::desc src_plain({p.batch, p.c, p.h, p.w}, memory::data_type::f32, tag::nchw);
    memory::desc wei_plain = p.groups == 1
                                 ? memory::desc({p.out_c, p.c, p.r, p.s}, memory::data_type::f32, tag::oihw)
                                 : memory::desc({p.groups, p.out_c / p.groups, p.c / p.groups, p.r, p.s},
                                                memory::data_type::f32, tag::goihw);
    memory::desc dst_plain({p.batch, p.out_c, p.p(), p.q()}, memory::data_type::f32, tag::nchw);
    auto pick = [&](const memory::desc& plain) {
      return any_ ? memory::desc(plain.dims(), memory::data_type::f32, tag::any) : plain;
    };
    memory::desc bias_md({p.out_c}, memory::data_type::f32, tag::x);
    const dnnl::memory::dims strides = {p.stride, p.stride}, dilates = {p.dilation - 1, p.dilation - 1},
                             padding = {p.pad, p.pad};
    auto conv_desc = [&] {
      return p.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                      dnnl::algorithm::convolution_direct, pick(src_plain),
                                                      pick(wei_plain), bias_md, pick(dst_plain), strides, dilates,
                                                      padding, padding)
                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                      dnnl::algorithm::convolution_direct, pick(src_plain),
                                                      pick(wei_plain), pick(dst_plain), strides, dilates, padding,
                                                      padding);
    };
    // The epilogue as oneDNN's own fusion: the convolution's bias, then post-ops (a binary
    // add of the residual, in the layout the plain convolution picks for dst, and the
    // activation as an eltwise).
    dnnl::primitive_attr attr;
    memory::desc residual_md = dst_plain;
    if (p.residual || p.act != 0) {
      if (p.residual && any_) residual_md = dnnl::convolution_forward::primitive_desc(conv_desc(), engine_).dst_desc();
      dnnl::post_ops post_ops;
      if (p.residual) post_ops.append_binary(dnnl::algorithm::binary_add, residual_md);
      if (p.act == 1) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      if (p.act == 2) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 6.0f);
      if (p.act == 3) post_ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
      attr.set_post_ops(post_ops);
    }
    dnnl::convolution_forward::primitive_desc pd(conv_desc(), attr, engine_);
    impl_ = pd.impl_info_str();
    primitive_ = dnnl::convolution_forward(pd);
    memory src_user(src_plain, engine_, const_cast<float*>(in[0]));
    memory wei_user(wei_plain, engine_, const_cast<float*>(in[1]));
    dst_user_ = memory(dst_plain, engine_, out_.data());
    args_[DNNL_ARG_SRC] = adopt(src_user, pd.src_desc());
    args_[DNNL_ARG_WEIGHTS] = adopt(wei_user, pd.weights_desc());
    dst_ = pd.dst_desc() == dst_plain ? dst_user_ : memory(pd.dst_desc(), engine_);
    args_[DNNL_ARG_DST] = dst_;
    if (p.bias) args_[DNNL_ARG_BIAS] = memory(bias_md, engine_, const_cast<float*>(in[2]));
    if (p.residual) {
      memory residual_user(dst_plain, engine_, const_cast<float*>(in[2 + p.bias]));
      args_[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = adopt(residual_user, residual_md);
    }
    layouts_ = "src " + describe(pd.src_desc()) + ", weights " + describe(pd.weights_desc()) + ", dst " +
               describe(pd.dst_desc());
  }
  std::string name() const override { return any_ ? "onednn-any" : "onednn"; }
  std::string description() const override {
    return std::string(any_ ? "convolution primitive on oneDNN's chosen layouts" : "convolution primitive on NCHW") +
           (groups_ > 1 ? ", " + std::to_string(groups_) + " groups" : "") +
           (fused_ ? ", with bias/post-ops (binary add, eltwise)" : "") + ", reorders excluded (" + impl_ + ", " +
           layouts_ + ")";
  }
  void run() override {
    primitive_.execute(stream_, args_);
    stream_.wait();
  }
  std::span<const float> output() override {
    if (dst_ != dst_user_) {
      dnnl::reorder(dst_, dst_user_).execute(stream_, dst_, dst_user_);
      stream_.wait();
    }
    return out_.view();
  }

 private:
  memory adopt(memory& user, const memory::desc& wanted) {
    if (user.get_desc() == wanted) return user;
    memory converted(wanted, engine_);
    dnnl::reorder(user, converted).execute(stream_, user, converted);
    stream_.wait();
    return converted;
  }
  // oneDNN's own naming of a layout: dimensions as letters (a = N, b = C for data,
  // a = O, b = I for weights) from the outermost stride in, blocked ones in upper case,
  // then the inner blocks, e.g. "abcd" (NCHW), "acdb" (NHWC), "aBcd16b" (nChw16c).
  static std::string describe(const memory::desc& md) {
    const auto& d = md.data;
    if (d.format_kind != dnnl_blocked) return "opaque";
    const auto& blocking = d.format_desc.blocking;
    std::vector<int> order(static_cast<std::size_t>(d.ndims));
    for (int i = 0; i < d.ndims; ++i) order[static_cast<std::size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return blocking.strides[x] > blocking.strides[y]; });
    std::vector<bool> blocked(static_cast<std::size_t>(d.ndims), false);
    for (int i = 0; i < blocking.inner_nblks; ++i) blocked[static_cast<std::size_t>(blocking.inner_idxs[i])] = true;
    std::string out;
    for (int i : order) out += static_cast<char>((blocked[static_cast<std::size_t>(i)] ? 'A' : 'a') + i);
    for (int i = 0; i < blocking.inner_nblks; ++i) {
      out += std::to_string(blocking.inner_blks[i]) + static_cast<char>('a' + blocking.inner_idxs[i]);
    }
    return out;
  }

  bool any_;
  std::int64_t groups_;
  bool fused_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  FloatBuffer out_;
  dnnl::primitive primitive_;
  memory dst_, dst_user_;
  std::unordered_map<int, memory> args_;
  std::string impl_, layouts_;
};

#endif

}  // namespace

std::vector<std::unique_ptr<Contender>> make_contenders(const Problem& problem, const std::vector<const float*>& inputs,
                                                        std::vector<std::string>& notes) {
  std::vector<std::unique_ptr<Contender>> out;
  (void)problem;
  (void)notes;
  if (inputs.size() != problem.input_shapes().size()) {
    throw std::invalid_argument("make_contenders: expected " + std::to_string(problem.input_shapes().size()) +
                                " inputs");
  }
#if KESTREL_HAVE_OPENBLAS
  if (problem.kind == Problem::Kind::gemm) out.push_back(std::make_unique<OpenBlasGemm>(problem, inputs));
  else if (problem.kind == Problem::Kind::batch_matmul) {
    out.push_back(std::make_unique<OpenBlasBatchGemm>(problem, inputs[0], inputs[1]));
  } else {
    out.push_back(std::make_unique<OpenBlasIm2col>(problem, inputs));
  }
#endif
#if KESTREL_HAVE_ONEDNN
  try {
    if (problem.kind == Problem::Kind::gemm || problem.kind == Problem::Kind::batch_matmul) {
      out.push_back(std::make_unique<OneDnnMatmul>(problem, inputs));
    } else {
      out.push_back(std::make_unique<OneDnnConv>(problem, inputs, false));
      out.push_back(std::make_unique<OneDnnConv>(problem, inputs, true));
    }
  } catch (const dnnl::error& e) {
    notes.push_back(std::string("oneDNN cannot run this workload: ") + e.what());
  }
#endif
  return out;
}

void set_library_threads(unsigned threads) {
  (void)threads;
#if KESTREL_HAVE_OPENBLAS
  openblas_set_num_threads(static_cast<int>(threads));
#endif
#if KESTREL_HAVE_ONEDNN
  omp_set_num_threads(static_cast<int>(threads));
#endif
}

LibraryStatus library_status() {
  LibraryStatus status;
#if KESTREL_HAVE_OPENBLAS
  status.openblas = true;
  status.openblas_version = openblas_get_config();
  while (!status.openblas_version.empty() && status.openblas_version.back() == ' ') status.openblas_version.pop_back();
#if defined(__x86_64__)
  // OPENBLAS_CORETYPE in the environment (or a CPU a DYNAMIC_ARCH build does not know)
  // can leave OpenBLAS on older kernels than the CPU runs: say so, the comparison is
  // then not with OpenBLAS at its best.
  std::string core = openblas_get_corename();
  static const char* avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  bool avx512_core = std::any_of(std::begin(avx512_cores), std::end(avx512_cores),
                                 [&](const char* c) { return core == c; });
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && !avx512_core) {
    const char* forced = std::getenv("OPENBLAS_CORETYPE");
    std::string why = forced && *forced ? "OPENBLAS_CORETYPE=" + std::string(forced) + " is set"
                                        : "it does not recognise the CPU";
    status.notices.push_back("OpenBLAS runs its " + core + " kernels on this AVX-512 CPU (" + why +
                             "); OPENBLAS_CORETYPE=SkylakeX makes it use its AVX-512 kernels");
  }
#endif
#else
  status.missing.push_back("OpenBLAS not built in (install libopenblas-dev and rebuild)");
#endif
#if KESTREL_HAVE_ONEDNN
  status.onednn = true;
  const dnnl_version_t* v = dnnl_version();
  status.onednn_version = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                          std::to_string(v->patch);
  if (v->hash && *v->hash) status.onednn_version += " (git " + std::string(v->hash).substr(0, 10) + ")";
  if (v->cpu_runtime == DNNL_RUNTIME_OMP) status.onednn_version += ", OpenMP threading";
  else if (v->cpu_runtime == DNNL_RUNTIME_SEQ) status.onednn_version += ", sequential";
  else if (v->cpu_runtime == DNNL_RUNTIME_TBB) status.onednn_version += ", TBB threading";
  else if (v->cpu_runtime == DNNL_RUNTIME_THREADPOOL) status.onednn_version += ", threadpool";
#else
  status.missing.push_back("oneDNN not built in (install libdnnl-dev and rebuild)");
#endif
  return status;
}

}  // namespace kestrel::compare
