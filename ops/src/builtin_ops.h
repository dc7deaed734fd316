// Factories of the built-in ops (one file each), assembled by builtin_ops().
#pragma once

#include <memory>

#include "kestrel/ops/op.h"

namespace kestrel::ops {

std::unique_ptr<Op> make_gemm_op();
std::unique_ptr<Op> make_conv2d_op();
std::unique_ptr<Op> make_conv2d_nchwc_op();
std::unique_ptr<Op> make_depthwise_conv2d_op();
std::unique_ptr<Op> make_layout_nchwc_op();
std::unique_ptr<Op> make_batch_matmul_op();
// GPU variants (CUDA and OpenCL kernels, their own knob spaces).
std::unique_ptr<Op> make_gemm_gpu_op();
std::unique_ptr<Op> make_conv2d_gpu_op();
std::unique_ptr<Op> make_batch_matmul_gpu_op();

}  // namespace kestrel::ops
