// The built-in op library: gemm, batch_matmul, conv2d, the blocked-channel convolutions
// conv2d_nchwc, conv2d_winograd and depthwise_conv2d with their layout transform
// layout_nchwc, the glue ops pool2d, softmax, layernorm and elementwise, and the GPU
// variants of gemm, batch_matmul, conv2d and the glue ops.
#include "builtin_ops.h"

namespace kestrel::ops {

Registry builtin_ops() {
  Registry registry;
  registry.add(make_gemm_op());
  registry.add(make_conv2d_op());
  registry.add(make_conv2d_nchwc_op());
  registry.add(make_conv2d_winograd_op());
  registry.add(make_depthwise_conv2d_op());
  registry.add(make_layout_nchwc_op());
  registry.add(make_batch_matmul_op());
  registry.add(make_gemm_gpu_op());
  registry.add(make_conv2d_gpu_op());
  registry.add(make_batch_matmul_gpu_op());
  registry.add(make_pool2d_op());
  registry.add(make_softmax_op());
  registry.add(make_layernorm_op());
  registry.add(make_elementwise_op());
  registry.add(make_softmax_gpu_op());
  registry.add(make_layernorm_gpu_op());
  registry.add(make_elementwise_gpu_op());
  registry.add(make_pool2d_gpu_op());
  return registry;
}

const Registry& builtin_registry() {
  static const Registry registry = builtin_ops();
  return registry;
}

}  // namespace kestrel::ops
