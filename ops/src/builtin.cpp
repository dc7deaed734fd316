// The built-in op library: gemm, conv2d, the blocked-channel convolutions conv2d_nchwc
// and depthwise_conv2d with their layout transform layout_nchwc, and the GPU variants of
// gemm and conv2d.
#include "builtin_ops.h"

namespace kestrel::ops {

Registry builtin_ops() {
  Registry registry;
  registry.add(make_gemm_op());
  registry.add(make_conv2d_op());
  registry.add(make_conv2d_nchwc_op());
  registry.add(make_depthwise_conv2d_op());
  registry.add(make_layout_nchwc_op());
  registry.add(make_gemm_gpu_op());
  registry.add(make_conv2d_gpu_op());
  return registry;
}

}  // namespace kestrel::ops
