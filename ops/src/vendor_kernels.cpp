// The vendor shim kernels of the built-in ops (see vendor_kernels.h).
#include "vendor_kernels.h"

#include <string>

#include "knob_util.h"


namespace kestrel::ops::detail {
namespace {

std::string text(std::int64_t value) { return std::to_string(value); }

}  // namespace

VendorKernel openblas_gemm(const Params& params, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
                           bool trans_a, bool trans_b) {
  VendorKernel out;
  out.implementation = "openblas";
  out.description = std::string("OpenBLAS cblas_sgemm (") + kOpenBlasLibrary + ")" +
                    (batch > 1 ? ", one call per matrix of the batch" : "");
  out.source = {Backend::cpu, "openblas_gemm.c", std::string(embedded::openblas_gemm_c()), {}};
  out.source.defines = {{"GEMM_M", text(m)},
                        {"GEMM_N", text(n)},
                        {"GEMM_K", text(k)},
                        {"GEMM_BATCH", text(batch)},
                        {"GEMM_TRANS_A", trans_a ? "1" : "0"},
                        {"GEMM_TRANS_B", trans_b ? "1" : "0"},
                        {"GEMM_BIAS", text(param_or(params, "bias", 0))},
                        {"GEMM_RESIDUAL", text(param_or(params, "residual", 0))},
                        {"GEMM_ACT", text(param_or(params, "act", 0))},
                        {"VENDOR_LIBRARY", kOpenBlasLibrary}};
  return out;
}

std::optional<VendorKernel> onednn_conv2d_nchwc(const Params& params) {
  if (param_or(params, "groups", 1) != 1) return std::nullopt;
  VendorKernel out;
  out.implementation = "onednn";
  const std::string block = text(params.at("block"));
  out.description = "oneDNN forward convolution on nChw" + block + "c / OIhw" + block + "i" + block + "o, no reorders (" +
                    kOneDnnLibrary + ")";
  out.source = {Backend::cpu, "onednn_conv2d_nchwc.c", std::string(embedded::onednn_conv2d_nchwc_c()), {}};
  for (const char* name : {"N", "C", "H", "W", "K", "R", "S"}) {
    out.source.defines.push_back({std::string("CONV_") + name, text(params.at(name))});
  }
  out.source.defines.push_back({"CONV_STRIDE", text(params.at("stride"))});
  out.source.defines.push_back({"CONV_PAD", text(params.at("pad"))});
  out.source.defines.push_back({"CONV_DILATION", text(params.at("dilation"))});
  out.source.defines.push_back({"CONV_BLOCK", block});
  out.source.defines.push_back({"CONV_BIAS", text(param_or(params, "bias", 0))});
  out.source.defines.push_back({"CONV_RESIDUAL", text(param_or(params, "residual", 0))});
  out.source.defines.push_back({"CONV_ACT", text(param_or(params, "act", 0))});
  out.source.defines.push_back({"VENDOR_LIBRARY", kOneDnnLibrary});
  return out;
}

}  // namespace kestrel::ops::detail
