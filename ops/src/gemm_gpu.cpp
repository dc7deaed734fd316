// gemm for GPUs (CUDA and OpenCL): a variant of the CPU gemm op with its own knob space
// (block tile, thread tile, shared/local memory staging, vector loads, unrolling) and a
// launch geometry computed from the knobs. Workload, tensors, FLOPs, reference kernel
// and tolerance are those of the CPU op. Kernels: ops/gpu/gemm.cu, ops/gpu/gemm.cl.
#include "builtin_ops.h"
#include "gpu_knobs.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::tiles_for;

const std::vector<std::int64_t> kBm = {8, 16, 32, 64, 128};
const std::vector<std::int64_t> kBn = {8, 16, 32, 64, 128};
const std::vector<std::int64_t> kBk = {4, 8, 16, 32, 64};
const std::vector<std::int64_t> kTm = {1, 2, 4, 8};
const std::vector<std::int64_t> kTn = {1, 2, 4, 8, 16};
constexpr std::int64_t kMaxAccumulators = 64;  // registers per thread for the C tile

class GemmGpuOp final : public detail::GpuVariant {
 public:
  GemmGpuOp() : GpuVariant(make_gemm_op()) {}

  std::string_view description() const override {
    return "fp32 matrix multiply C[M][N] = A[M][K] * B[K][N], row-major, for CUDA and OpenCL: block tiles of "
           "bm x bn, thread tiles of tm x tn, optional shared/local memory staging of bk-deep tiles";
  }

  std::vector<Knob> knobs(const Params& p) const override {
    std::int64_t m = p.at("M"), n = p.at("N"), k = p.at("K");
    return {
        {"bm", tiles_for(kBm, m), "rows of C per block / work-group"},
        {"bn", tiles_for(kBn, n), "columns of C per block / work-group"},
        {"bk", tiles_for(kBk, k), "depth of the A and B tiles staged per step (with stage=1)"},
        {"tm", kTm, "rows of the thread tile (accumulators per thread: tm*tn)"},
        {"tn", kTn, "columns of the thread tile; multiple of vec (tm*tn <= 64)"},
        {"stage", {0, 1}, "1 = stage A and B tiles in shared/local memory, 0 = read global memory directly"},
        {"vec", {1, 2, 4}, "floats per vector load (float2/float4)"},
        {"unroll", {1, 2, 4, 8}, "unroll count of the inner k loop"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    // gemm.cu / gemm.cl take A, B and C only: the CPU op's epilogue parameters (which this
    // variant shares) would otherwise be ignored.
    for (const char* epilogue : {"bias", "residual", "act"}) {
      if (const auto value = detail::param_or(p, epilogue, 0); value != 0) {
        return std::string("the CUDA/OpenCL gemm has no epilogue: ") + epilogue + "=" + std::to_string(value) +
               " runs on the CPU gemm only (leave bias, residual and act out for a GPU)";
      }
    }
    std::int64_t bm = c.at("bm"), bn = c.at("bn"), bk = c.at("bk"), tm = c.at("tm"), tn = c.at("tn"),
                 vec = c.at("vec");
    if (bm % tm != 0) return "bm=" + std::to_string(bm) + " is not a multiple of tm=" + std::to_string(tm);
    if (bn % tn != 0) return "bn=" + std::to_string(bn) + " is not a multiple of tn=" + std::to_string(tn);
    if (tn % vec != 0) return "tn=" + std::to_string(tn) + " is not a multiple of vec=" + std::to_string(vec);
    if (c.at("stage") == 1 && bk % vec != 0) {
      return "bk=" + std::to_string(bk) + " is not a multiple of vec=" + std::to_string(vec);
    }
    if (tm * tn > kMaxAccumulators) {
      return "thread tile " + std::to_string(tm) + "x" + std::to_string(tn) + " needs " + std::to_string(tm * tn) +
             " accumulators per thread, more than " + std::to_string(kMaxAccumulators);
    }
    std::int64_t threads = (bm / tm) * (bn / tn);
    if (threads > detail::kMaxGpuThreads) {
      return "block of " + std::to_string(threads) + " threads ((bm/tm)*(bn/tn)) exceeds " +
             std::to_string(detail::kMaxGpuThreads);
    }
    if (shared_bytes(c) > detail::kMaxGpuSharedBytes) {
      return "staged tiles need " + std::to_string(shared_bytes(c)) + " bytes of shared memory, more than " +
             std::to_string(detail::kMaxGpuSharedBytes);
    }
    return {};
  }

  Config default_config(const Params& p, const TargetTraits&) const override {
    auto bm_domain = knobs(p)[0].values, bn_domain = knobs(p)[1].values, bk_domain = knobs(p)[2].values;
    std::int64_t bm = detail::largest_at_most(bm_domain, 32), bn = detail::largest_at_most(bn_domain, 32);
    std::int64_t tm = std::min<std::int64_t>(4, bm), tn = std::min<std::int64_t>(4, bn);
    return {{"bm", bm}, {"bn", bn}, {"bk", detail::largest_at_most(bk_domain, 8)}, {"tm", tm}, {"tn", tn},
            {"stage", 1}, {"vec", tn >= 4 ? 4 : 1}, {"unroll", 4}};
  }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cuda && backend != Backend::opencl) {
      throw OpError("this gemm variant has no " + std::string(to_string(backend)) + " kernel (backends: cuda, opencl)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) throw OpError("invalid gemm configuration: " + reason);
    KernelSource out;
    out.backend = backend;
    out.file_name = backend == Backend::cuda ? "gemm.cu" : "gemm.cl";
    out.text = std::string(backend == Backend::cuda ? embedded::gemm_cu() : embedded::gemm_cl());
    detail::add_defines(out.defines, "GEMM_", p);
    detail::add_defines(out.defines, "GEMM_", c);
    std::int64_t bm = c.at("bm"), bn = c.at("bn");
    out.launch.entry = "gemm";
    out.launch.grid = {ceil_div(p.at("N"), bn), ceil_div(p.at("M"), bm), 1};
    out.launch.block = {bn / c.at("tn"), bm / c.at("tm"), 1};
    out.launch.shared_bytes = shared_bytes(c);
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    auto add = [&out](const char* name, double value) { out.emplace_back(std::string("gemm_gpu.") + name, value); };
    const double m = static_cast<double>(p.at("M")), n = static_cast<double>(p.at("N"));
    const double bm = static_cast<double>(c.at("bm")), bn = static_cast<double>(c.at("bn"));
    const double tm = static_cast<double>(c.at("tm")), tn = static_cast<double>(c.at("tn"));
    const double blocks = std::ceil(m / bm) * std::ceil(n / bn);
    add("threads_per_block", (bm / tm) * (bn / tn));
    add("blocks", blocks);
    add("accumulators", tm * tn);
    add("shared_bytes", static_cast<double>(shared_bytes(c)));
    add("waste", 1.0 - (m * n) / (blocks * bm * bn));
    add("thread_intensity", 2.0 * tm * tn / (tm + tn));
    add("block_intensity", 2.0 * bm * bn / (bm + bn));
    return out;
  }

 private:
  static std::int64_t shared_bytes(const Config& c) {
    return c.at("stage") == 1 ? (c.at("bm") + c.at("bn")) * c.at("bk") * 4 : 0;
  }
};

}  // namespace

std::unique_ptr<Op> make_gemm_gpu_op() { return std::make_unique<GemmGpuOp>(); }

}  // namespace kestrel::ops
