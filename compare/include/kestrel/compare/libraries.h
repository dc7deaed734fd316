// The vendor libraries `kestrel bench` compares Kestrel's kernels with: OpenBLAS
// (cblas_sgemm; batched matmul as a loop of cblas_sgemm; conv2d as im2col + sgemm per
// group) and oneDNN (matmul, on 3-D tensors for batched matmul; convolution, grouped and
// depthwise too, on plain NCHW and on the layout oneDNN picks). Both are optional build
// dependencies: without them
// the contenders are absent and library_status() says what to install.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel/ops/op.h"

namespace kestrel::compare {

// What a workload computes, in the libraries' terms. Found from the op's parameter names,
// so any op with gemm's (M, N, K and the epilogue's bias, residual, act), batch_matmul's
// (batch, M, N, K, trans_a, trans_b) or conv2d's parameters (groups included) is compared;
// depthwise_conv2d is the convolution with K = C and C groups.
struct Problem {
  enum class Kind { gemm, batch_matmul, conv2d } kind = Kind::gemm;
  std::int64_t m = 0, n = 0, k = 0;                               // gemm: C[m][n] = A[m][k] B[k][n]
  bool trans_a = false, trans_b = false;  // batch_matmul: A stored [batch][k][m], B [batch][n][k]
  // The epilogue of gemm and conv: C = act(A B + bias[n] + residual[m][n]) and
  // out = act(conv + bias[k] + residual[n][k][p][q]); act 0 none, 1 relu, 2 relu6, 3 gelu
  // (erf form).
  bool bias = false, residual = false;
  int act = 0;
  std::int64_t batch = 1, c = 0, h = 0, w = 0, out_c = 0, r = 0, s = 0, stride = 1, pad = 0, dilation = 1;  // conv
  std::int64_t groups = 1;  // conv: output channel k sums over the c/groups input channels of group k/(out_c/groups)
  std::int64_t p() const { return (h + 2 * pad - dilation * (r - 1) - 1) / stride + 1; }
  std::int64_t q() const { return (w + 2 * pad - dilation * (s - 1) - 1) / stride + 1; }
  // The canonical tensors: gemm A[m][k], B[k][n], [bias[n]], [residual[m][n]] -> C[m][n];
  // batch_matmul A[batch][m][k] (or [batch][k][m]), B[batch][k][n] (or [batch][n][k]) ->
  // C[batch][m][n]; conv input NCHW, weights K(C/groups)RS (OIHW, groups' filters one after
  // the other), [bias[K]], [residual NKPQ] -> output NKPQ.
  std::vector<std::vector<std::int64_t>> input_shapes() const;
  std::vector<std::int64_t> output_shape() const;
};

std::string_view to_string(Problem::Kind kind);  // "gemm", "batch_matmul", "conv2d"

// Null when the op's parameters are not gemm's, batch_matmul's or conv2d's.
std::optional<Problem> problem_for(const ops::Op& op, const ops::Params& params);

// True when the op's tensors are exactly the canonical ones (same order and shapes), so
// the libraries can read Kestrel's inputs and their outputs check Kestrel's.
bool canonical_layout(const ops::Op& op, const ops::Params& params, const Problem& problem);

// One library's implementation of a problem, ready to run on the inputs it was given.
class Contender {
 public:
  virtual ~Contender() = default;
  virtual std::string name() const = 0;         // "openblas", "onednn", "onednn-any"
  virtual std::string description() const = 0;  // what exactly is timed
  virtual void run() = 0;
  // The last run's output in the canonical layout (converting it if the library keeps
  // another one; the conversion is not part of run()).
  virtual std::span<const float> output() = 0;
};

// The contenders for a problem, built for `threads` threads (call set_library_threads
// first). `inputs` are the canonical inputs and must outlive the contenders. `notes`
// gets one line per library that is built in but cannot run this problem.
std::vector<std::unique_ptr<Contender>> make_contenders(const Problem& problem,
                                                        const std::vector<const float*>& inputs,
                                                        std::vector<std::string>& notes);

// Sets the thread count of every library built in (OpenBLAS, and OpenMP behind oneDNN).
void set_library_threads(unsigned threads);

struct LibraryStatus {
  bool openblas = false, onednn = false;
  std::string openblas_version;  // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  std::string onednn_version;    // e.g. "oneDNN 2.6.3 (OpenMP)"
  std::vector<std::string> missing;  // e.g. "OpenBLAS not built in (install libopenblas-dev and rebuild)"
  std::vector<std::string> notices;  // caveats about how a library runs here
};
LibraryStatus library_status();

}  // namespace kestrel::compare
