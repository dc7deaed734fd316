// Vendor libraries as contenders: the shim kernels (ops/vendor/*.c) that run OpenBLAS
// and oneDNN on an op's own arguments, found on the device through the kernel ABI's
// vendor_symbol service. The ops' vendor_kernels() overrides build them here.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kestrel/ops/op.h"

namespace kestrel::embedded {
std::string_view openblas_gemm_c();
std::string_view onednn_conv2d_nchwc_c();
}  // namespace kestrel::embedded

namespace kestrel::ops::detail {

// The file names the shims load (Debian's, and most distributions' sonames).
inline constexpr const char* kOpenBlasLibrary = "libopenblas.so.0";
inline constexpr const char* kOneDnnLibrary = "libdnnl.so.2";  // oneDNN 2.x's C API

// A row-major fp32 multiply of `batch` matrices (A [M][K] or [K][M] with trans_a, B
// [K][N] or [N][K] with trans_b, C [M][N], each [batch] of them) with the gemm epilogue
// parameters of `params` (bias, residual, act; absent: none), by OpenBLAS's cblas_sgemm.
VendorKernel openblas_gemm(const Params& params, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
                           bool trans_a, bool trans_b);

// conv2d_nchwc by oneDNN's forward convolution on the op's own blocked layouts, with its
// epilogue parameters; none for workloads it cannot express (groups other than 1).
std::optional<VendorKernel> onednn_conv2d_nchwc(const Params& params);

}  // namespace kestrel::ops::detail
