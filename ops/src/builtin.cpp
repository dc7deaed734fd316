// The built-in op library: gemm and conv2d, and their GPU variants.
#include "builtin_ops.h"

namespace kestrel::ops {

Registry builtin_ops() {
  Registry registry;
  registry.add(make_gemm_op());
  registry.add(make_conv2d_op());
  registry.add(make_gemm_gpu_op());
  registry.add(make_conv2d_gpu_op());
  return registry;
}

}  // namespace kestrel::ops
