/* onednn_conv2d_nchwc.c: oneDNN as a contender for conv2d_nchwc. A shim kernel with the
 * op's own arguments that finds oneDNN's C API (version 2, dnnl.h) on the device through
 * the kernel ABI's vendor_symbol service and runs its forward convolution on the op's own
 * blocked layouts: input nChw{B}c, weights OIhw{B}i{B}o, output nChw{B}c, so nothing is
 * reordered. The primitive is created on the first call (the untimed warm-up) and kept.
 * oneDNN reads whole channel blocks and expects the lanes past C and K to be zero: they
 * hold anything here (the op ignores them), so each call zeroes the weight lanes past C
 * and K (weights only: input lanes past C then meet zero weights) and the output lanes
 * past K, inside the timed call.
 *
 * Needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK} and VENDOR_LIBRARY (unquoted file
 * name: libdnnl.so.2); optional CONV_BIAS (a bias argument [K/B*B] after the weights),
 * CONV_RESIDUAL (an argument shaped as the output, added: oneDNN's sum post-op) and
 * CONV_ACT (KESTREL_ACT_*: an eltwise post-op), out = act(conv + bias + residual).
 * OpenMP threads follow the caller's thread count when libgomp.so.1 is found.
 * Returns 2 on bad arguments, KESTREL_KERNEL_VENDOR_MISSING when the library or one of
 * its functions is not on the device, KESTREL_KERNEL_VENDOR_FAILED + oneDNN's status
 * when a call fails (e.g. 3: no implementation for this shape). */
#include "kestrel/kernel/abi.h"

#if !defined(CONV_N) || !defined(CONV_C) || !defined(CONV_H) || !defined(CONV_W) || !defined(CONV_K) ||  \
    !defined(CONV_R) || !defined(CONV_S) || !defined(CONV_STRIDE) || !defined(CONV_PAD) ||               \
    !defined(CONV_DILATION) || !defined(CONV_BLOCK) || !defined(VENDOR_LIBRARY)
#error "onednn_conv2d_nchwc.c needs CONV_{N,C,H,W,K,R,S,STRIDE,PAD,DILATION,BLOCK} and VENDOR_LIBRARY"
#endif
#ifndef CONV_BIAS
#define CONV_BIAS 0
#endif
#ifndef CONV_RESIDUAL
#define CONV_RESIDUAL 0
#endif
#ifndef CONV_ACT
#define CONV_ACT 0
#endif

#define B CONV_BLOCK
#define P ((CONV_H + 2 * CONV_PAD - CONV_DILATION * (CONV_R - 1) - 1) / CONV_STRIDE + 1)
#define Q ((CONV_W + 2 * CONV_PAD - CONV_DILATION * (CONV_S - 1) - 1) / CONV_STRIDE + 1)
#define CB ((CONV_C + B - 1) / B)
#define KB ((CONV_K + B - 1) / B)

#define VENDOR_STRING2(x) #x
#define VENDOR_STRING(x) VENDOR_STRING2(x)

/* oneDNN 2.x's C API, as far as this shim uses it: handles are pointers, descriptors are
 * structs the library fills (storage here is larger than theirs: 696 and 5976 bytes in
 * 2.6), enumerations are ints with the values of dnnl_types.h. */
typedef int dnnl_status;
typedef struct {
  int arg;
  void* memory;
} dnnl_exec_arg;
enum {
  DNNL_F32 = 3, DNNL_FORWARD_INFERENCE = 96, DNNL_CONVOLUTION_DIRECT = 1, DNNL_CPU = 1, DNNL_STREAM_DEFAULT = 1,
  DNNL_X = 2, DNNL_ELTWISE_RELU = 31, DNNL_ELTWISE_CLIP = 255, DNNL_ELTWISE_GELU_ERF = 48,
  DNNL_ELTWISE_LOGISTIC = 175, DNNL_ELTWISE_SWISH = 223, DNNL_ELTWISE_HARDSWISH = 112, DNNL_ELTWISE_LINEAR = 127,
  DNNL_ELTWISE_TANH = 47, DNNL_ELTWISE_GELU_TANH = 207,
  DNNL_ARG_SRC = 1, DNNL_ARG_DST = 17, DNNL_ARG_WEIGHTS = 33, DNNL_ARG_BIAS = 41,
};
#if B == 4
enum { SRC_TAG = 75, WEIGHTS_TAG = 79 }; /* dnnl_nChw4c, dnnl_OIhw4i4o */
#elif B == 8
enum { SRC_TAG = 93, WEIGHTS_TAG = 98 }; /* dnnl_nChw8c, dnnl_OIhw8i8o */
#elif B == 16
enum { SRC_TAG = 69, WEIGHTS_TAG = 70 }; /* dnnl_nChw16c, dnnl_OIhw16i16o */
#else
#error "onednn_conv2d_nchwc.c supports CONV_BLOCK 4, 8 and 16"
#endif

typedef struct {
  dnnl_status (*engine_create)(void** engine, int kind, size_t index);
  dnnl_status (*stream_create)(void** stream, void* engine, unsigned flags);
  dnnl_status (*stream_wait)(void* stream);
  dnnl_status (*memory_desc_init_by_tag)(void* md, int ndims, const int64_t* dims, int data_type, int tag);
  dnnl_status (*dilated_convolution_forward_desc_init)(void* desc, int prop, int alg, const void* src,
                                                        const void* weights, const void* bias, const void* dst,
                                                        const int64_t* strides, const int64_t* dilates,
                                                        const int64_t* padding_l, const int64_t* padding_r);
  dnnl_status (*primitive_attr_create)(void** attr);
  dnnl_status (*primitive_attr_set_post_ops)(void* attr, const void* post_ops);
  dnnl_status (*post_ops_create)(void** post_ops);
  dnnl_status (*post_ops_append_sum)(void* post_ops, float scale);
  dnnl_status (*post_ops_append_eltwise)(void* post_ops, float scale, int alg, float alpha, float beta);
  dnnl_status (*primitive_desc_create)(void** pd, const void* op_desc, const void* attr, void* engine,
                                       const void* hint);
  dnnl_status (*primitive_create)(void** primitive, const void* pd);
  dnnl_status (*memory_create)(void** memory, const void* md, void* engine, void* handle);
  dnnl_status (*memory_set_data_handle)(void* memory, void* handle);
  dnnl_status (*primitive_execute)(const void* primitive, void* stream, int nargs, const dnnl_exec_arg* args);
} dnnl_api;

/* The library's functions and the primitive, made on the first call and kept (the
 * runtime never unloads a vendor library). */
static dnnl_api g_api;
static int g_bound;
static void* g_stream;
static void* g_primitive;
static void* g_src;
static void* g_weights;
static void* g_dst;
static void* g_bias;
static void (*g_omp_set_num_threads)(int);
static uint32_t g_threads;

static int bind(const kestrel_services* svc) {
  static const char* const names[] = {
      "dnnl_engine_create", "dnnl_stream_create", "dnnl_stream_wait", "dnnl_memory_desc_init_by_tag",
      "dnnl_dilated_convolution_forward_desc_init", "dnnl_primitive_attr_create", "dnnl_primitive_attr_set_post_ops",
      "dnnl_post_ops_create", "dnnl_post_ops_append_sum", "dnnl_post_ops_append_eltwise",
      "dnnl_primitive_desc_create", "dnnl_primitive_create", "dnnl_memory_create", "dnnl_memory_set_data_handle",
      "dnnl_primitive_execute"};
  _Static_assert(sizeof names / sizeof names[0] * sizeof(void*) == sizeof(dnnl_api), "one name per function");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    void* f = kestrel_vendor_symbol(svc, VENDOR_STRING(VENDOR_LIBRARY), names[i]);
    if (!f) return 0;
    __builtin_memcpy((char*)&g_api + i * sizeof f, &f, sizeof f); /* the i-th function pointer */
  }
  /* oneDNN's OpenMP runtime (Debian's build): optional. */
  g_omp_set_num_threads = (void (*)(int))kestrel_vendor_symbol(svc, "libgomp.so.1", "omp_set_num_threads");
  return 1;
}

/* Creates the primitive and its memory objects; 0 or oneDNN's failing status. */
static dnnl_status create(void) {
  uint64_t src_md[256], weights_md[256], dst_md[256], bias_md[256], desc[2048];
  const int64_t src_dims[4] = {CONV_N, CONV_C, CONV_H, CONV_W};
  const int64_t weights_dims[4] = {CONV_K, CONV_C, CONV_R, CONV_S};
  const int64_t dst_dims[4] = {CONV_N, CONV_K, P, Q};
  const int64_t bias_dims[1] = {CONV_K};
  const int64_t strides[2] = {CONV_STRIDE, CONV_STRIDE};
  const int64_t dilates[2] = {CONV_DILATION - 1, CONV_DILATION - 1};
  const int64_t padding[2] = {CONV_PAD, CONV_PAD};
  void* engine = 0;
  void* attr = 0;
  void* post_ops = 0;
  void* pd = 0;
  dnnl_status s;
  if ((s = g_api.engine_create(&engine, DNNL_CPU, 0))) return s;
  if ((s = g_api.stream_create(&g_stream, engine, DNNL_STREAM_DEFAULT))) return s;
  if ((s = g_api.memory_desc_init_by_tag(src_md, 4, src_dims, DNNL_F32, SRC_TAG))) return s;
  if ((s = g_api.memory_desc_init_by_tag(weights_md, 4, weights_dims, DNNL_F32, WEIGHTS_TAG))) return s;
  if ((s = g_api.memory_desc_init_by_tag(dst_md, 4, dst_dims, DNNL_F32, SRC_TAG))) return s;
  if ((s = g_api.memory_desc_init_by_tag(bias_md, 1, bias_dims, DNNL_F32, DNNL_X))) return s;
  if ((s = g_api.dilated_convolution_forward_desc_init(desc, DNNL_FORWARD_INFERENCE, DNNL_CONVOLUTION_DIRECT, src_md,
                                                       weights_md, CONV_BIAS ? bias_md : 0, dst_md, strides, dilates,
                                                       padding, padding))) {
    return s;
  }
  if ((s = g_api.primitive_attr_create(&attr))) return s;
  if ((s = g_api.post_ops_create(&post_ops))) return s;
  if (CONV_RESIDUAL && (s = g_api.post_ops_append_sum(post_ops, 1.0f))) return s;
  if (CONV_ACT == 1 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_RELU, 0.0f, 0.0f))) return s;
  if (CONV_ACT == 2 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_CLIP, 0.0f, 6.0f))) return s;
  if (CONV_ACT == 3 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_GELU_ERF, 0.0f, 0.0f))) return s;
  if (CONV_ACT == 4 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_LOGISTIC, 0.0f, 0.0f))) return s;
  if (CONV_ACT == 5 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_SWISH, 1.0f, 0.0f))) return s;
  /* hardswish: oneDNN 2.x fixes x * relu6(x + 3) / 6 and ignores alpha and beta; 3.x reads them */
  if (CONV_ACT == 6 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_HARDSWISH, 1.0f / 6, 0.5f))) {
    return s;
  }
  /* hardsigmoid: 2.x has no such algorithm; x / 6 + 1/2, then clipped to [0, 1] */
  if (CONV_ACT == 7 && ((s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_LINEAR, 1.0f / 6, 0.5f)) ||
                        (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_CLIP, 0.0f, 1.0f)))) {
    return s;
  }
  if (CONV_ACT == 8 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_TANH, 0.0f, 0.0f))) return s;
  if (CONV_ACT == 9 && (s = g_api.post_ops_append_eltwise(post_ops, 1.0f, DNNL_ELTWISE_GELU_TANH, 0.0f, 0.0f))) {
    return s;
  }
  if ((s = g_api.primitive_attr_set_post_ops(attr, post_ops))) return s;
  if ((s = g_api.primitive_desc_create(&pd, desc, attr, engine, 0))) return s;
  if ((s = g_api.primitive_create(&g_primitive, pd))) return s;
  /* The handles are set before each call. */
  if ((s = g_api.memory_create(&g_src, src_md, engine, 0))) return s;
  if ((s = g_api.memory_create(&g_weights, weights_md, engine, 0))) return s;
  if ((s = g_api.memory_create(&g_dst, dst_md, engine, 0))) return s;
  if (CONV_BIAS && (s = g_api.memory_create(&g_bias, bias_md, engine, 0))) return s;
  return 0;
}

#define FAILED(s) (KESTREL_KERNEL_VENDOR_FAILED + ((s) & 0xff))

KESTREL_KERNEL(svc, args, num_args) {
  const int out_arg = 2 + CONV_BIAS + CONV_RESIDUAL;
  const int64_t out_elems = (int64_t)CONV_N * KB * P * Q * B;
  if (num_args != out_arg + 1 || args[0].i64 != (int64_t)CONV_N * CB * CONV_H * CONV_W * B ||
      args[1].i64 != (int64_t)KB * CB * CONV_R * CONV_S * B * B || args[out_arg].i64 != out_elems) {
    return 2;
  }
  for (int i = 0; i < num_args; ++i) {
    if (!args[i].data) return 2;
  }
  if (CONV_BIAS && args[2].i64 != (int64_t)KB * B) return 2;
  if (CONV_RESIDUAL && args[2 + CONV_BIAS].i64 != out_elems) return 2;
  if (!g_bound) {
    if (!bind(svc)) return KESTREL_KERNEL_VENDOR_MISSING;
    g_bound = 1;
  }
  if (g_omp_set_num_threads && g_threads != svc->num_threads) {
    g_omp_set_num_threads((int)svc->num_threads);
    g_threads = svc->num_threads;
  }
  dnnl_status s;
  if (!g_primitive && (s = create())) return FAILED(s);

  float* weights = (float*)args[1].data;
  float* out = (float*)args[out_arg].data;
  if (CONV_C % B != 0 || CONV_K % B != 0) {
    for (int64_t kb = 0; kb < KB; ++kb) {
      for (int64_t cb = 0; cb < CB; ++cb) {
        if (kb != KB - 1 && cb != CB - 1) continue;
        float* w = weights + (kb * CB + cb) * CONV_R * CONV_S * B * B;
        for (int64_t rs = 0; rs < CONV_R * CONV_S; ++rs) {
          for (int64_t c = 0; c < B; ++c) {
            for (int64_t k = 0; k < B; ++k) {
              if (cb * B + c >= CONV_C || kb * B + k >= CONV_K) w[(rs * B + c) * B + k] = 0.0f;
            }
          }
        }
      }
    }
  }
#if CONV_RESIDUAL
  {
    const float* residual = (const float*)args[2 + CONV_BIAS].data;
    for (int64_t i = 0; i < out_elems; ++i) out[i] = residual[i];
  }
#endif
  if ((s = g_api.memory_set_data_handle(g_src, args[0].data))) return FAILED(s);
  if ((s = g_api.memory_set_data_handle(g_weights, weights))) return FAILED(s);
  if ((s = g_api.memory_set_data_handle(g_dst, out))) return FAILED(s);
  dnnl_exec_arg exec[4] = {{DNNL_ARG_SRC, g_src}, {DNNL_ARG_WEIGHTS, g_weights}, {DNNL_ARG_DST, g_dst}, {0, 0}};
  int nargs = 3;
  if (CONV_BIAS) {
    if ((s = g_api.memory_set_data_handle(g_bias, args[2].data))) return FAILED(s);
    exec[nargs].arg = DNNL_ARG_BIAS;
    exec[nargs].memory = g_bias;
    ++nargs;
  }
  if ((s = g_api.primitive_execute(g_primitive, g_stream, nargs, exec))) return FAILED(s);
  if ((s = g_api.stream_wait(g_stream))) return FAILED(s);
  if (CONV_K % B != 0) {
    for (int64_t i = 0; i < (int64_t)CONV_N * P * Q; ++i) {
      int64_t n = i / (P * Q), pq = i % (P * Q);
      float* lanes = out + ((n * KB + KB - 1) * P * Q + pq) * B;
      for (int64_t k = CONV_K - (KB - 1) * B; k < B; ++k) lanes[k] = 0.0f;
    }
  }
  return 0;
}
