// Factories of the built-in ops (one file each), assembled by builtin_ops().
#pragma once

#include <memory>

#include "kestrel/ops/op.h"

namespace kestrel::ops {

std::unique_ptr<Op> make_gemm_op();
std::unique_ptr<Op> make_conv2d_op();
std::unique_ptr<Op> make_conv2d_nchwc_op();
std::unique_ptr<Op> make_conv2d_winograd_op();
std::unique_ptr<Op> make_depthwise_conv2d_op();
std::unique_ptr<Op> make_layout_nchwc_op();
std::unique_ptr<Op> make_batch_matmul_op();
// GPU variants (CUDA and OpenCL kernels, their own knob spaces).
std::unique_ptr<Op> make_gemm_gpu_op();
std::unique_ptr<Op> make_conv2d_gpu_op();
std::unique_ptr<Op> make_batch_matmul_gpu_op();
// The glue around convolutions and matmuls (ops/glue/).
std::unique_ptr<Op> make_pool2d_op();
std::unique_ptr<Op> make_softmax_op();
std::unique_ptr<Op> make_layernorm_op();
std::unique_ptr<Op> make_elementwise_op();
std::unique_ptr<Op> make_softmax_gpu_op();
std::unique_ptr<Op> make_layernorm_gpu_op();
std::unique_ptr<Op> make_elementwise_gpu_op();
std::unique_ptr<Op> make_pool2d_gpu_op();

}  // namespace kestrel::ops
