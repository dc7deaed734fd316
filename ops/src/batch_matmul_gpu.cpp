// batch_matmul for GPUs (CUDA and OpenCL): a variant of the CPU op with its own small knob
// space (block tile, thread tile, staged depth, unrolling) and a launch geometry with the
// batch on the grid's third dimension. Workload, tensors, FLOPs, reference kernel and
// tolerance are the CPU op's. Kernels: ops/gpu/batch_matmul.cu, ops/gpu/batch_matmul.cl.
#include "builtin_ops.h"
#include "gpu_knobs.h"
#include "knob_util.h"

namespace kestrel::ops {
namespace {

using detail::ceil_div;
using detail::tiles_for;

const std::vector<std::int64_t> kBm = {16, 32, 64, 128};
const std::vector<std::int64_t> kBn = {16, 32, 64, 128};
const std::vector<std::int64_t> kBk = {8, 16, 32};
const std::vector<std::int64_t> kTm = {1, 2, 4, 8};
const std::vector<std::int64_t> kTn = {1, 2, 4, 8};
constexpr std::int64_t kMaxAccumulators = 64;  // registers per thread for the C tile

class BatchMatmulGpuOp final : public detail::GpuVariant {
 public:
  BatchMatmulGpuOp() : GpuVariant(make_batch_matmul_op()) {}

  std::string_view description() const override {
    return "fp32 batched matrix multiply C[b][M][N] = op(A[b]) * op(B[b]) for CUDA and OpenCL: bm x bn block "
           "tiles of tm x tn thread tiles, bk-deep tiles of A and B staged in shared/local memory, one grid layer "
           "per batch matrix";
  }

  std::vector<Knob> knobs(const Params& p) const override {
    const std::int64_t m = p.at("M"), n = p.at("N"), k = p.at("K");
    return {
        {"bm", tiles_for(kBm, m), "rows of C per block / work-group"},
        {"bn", tiles_for(kBn, n), "columns of C per block / work-group"},
        {"bk", tiles_for(kBk, k), "depth of the A and B tiles staged per step"},
        {"tm", kTm, "rows of the thread tile (accumulators per thread: tm*tn <= 64)"},
        {"tn", kTn, "columns of the thread tile"},
        {"unroll", {1, 4}, "unroll count of the inner k loop"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits&) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    const std::int64_t bm = c.at("bm"), bn = c.at("bn"), tm = c.at("tm"), tn = c.at("tn");
    if (bm % tm != 0) return "bm=" + std::to_string(bm) + " is not a multiple of tm=" + std::to_string(tm);
    if (bn % tn != 0) return "bn=" + std::to_string(bn) + " is not a multiple of tn=" + std::to_string(tn);
    if (tm * tn > kMaxAccumulators) {
      return "thread tile " + std::to_string(tm) + "x" + std::to_string(tn) + " needs " + std::to_string(tm * tn) +
             " accumulators per thread, more than " + std::to_string(kMaxAccumulators);
    }
    if (std::int64_t threads = (bm / tm) * (bn / tn); threads > detail::kMaxGpuThreads) {
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
    const auto kn = knobs(p);
    const std::int64_t bm = detail::largest_at_most(kn[0].values, 64), bn = detail::largest_at_most(kn[1].values, 64);
    return {{"bm", bm},
            {"bn", bn},
            {"bk", detail::largest_at_most(kn[2].values, 16)},
            {"tm", std::min<std::int64_t>(4, bm)},
            {"tn", std::min<std::int64_t>(4, bn)},
            {"unroll", 4}};
  }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cuda && backend != Backend::opencl) {
      throw OpError("this batch_matmul variant has no " + std::string(to_string(backend)) +
                    " kernel (backends: cuda, opencl)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid batch_matmul configuration: " + reason);
    }
    KernelSource out;
    out.backend = backend;
    out.file_name = backend == Backend::cuda ? "batch_matmul.cu" : "batch_matmul.cl";
    out.text = std::string(backend == Backend::cuda ? embedded::batch_matmul_cu() : embedded::batch_matmul_cl());
    detail::add_defines(out.defines, "BMM_", p);
    detail::add_defines(out.defines, "BMM_", c);
    const std::int64_t bm = c.at("bm"), bn = c.at("bn");
    out.launch.entry = "batch_matmul";
    out.launch.grid = {ceil_div(p.at("N"), bn), ceil_div(p.at("M"), bm), p.at("batch")};
    out.launch.block = {bn / c.at("tn"), bm / c.at("tm"), 1};
    out.launch.shared_bytes = shared_bytes(c);
    return out;
  }

  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    auto add = [&out](const char* name, double value) {
      out.emplace_back(std::string("batch_matmul_gpu.") + name, value);
    };
    const double m = static_cast<double>(p.at("M")), n = static_cast<double>(p.at("N"));
    const double bm = static_cast<double>(c.at("bm")), bn = static_cast<double>(c.at("bn"));
    const double tm = static_cast<double>(c.at("tm")), tn = static_cast<double>(c.at("tn"));
    const double blocks = std::ceil(m / bm) * std::ceil(n / bn) * static_cast<double>(p.at("batch"));
    add("threads_per_block", (bm / tm) * (bn / tn));
    add("blocks", blocks);
    add("accumulators", tm * tn);
    add("shared_bytes", static_cast<double>(shared_bytes(c)));
    add("waste", 1.0 - (m * n) / (std::ceil(m / bm) * bm * std::ceil(n / bn) * bn));
    add("thread_intensity", 2.0 * tm * tn / (tm + tn));
    add("block_intensity", 2.0 * bm * bn / (bm + bn));
    return out;
  }

 private:
  static std::int64_t shared_bytes(const Config& c) { return (c.at("bm") + c.at("bn")) * c.at("bk") * 4; }
};

}  // namespace

std::unique_ptr<Op> make_batch_matmul_gpu_op() { return std::make_unique<BatchMatmulGpuOp>(); }

}  // namespace kestrel::ops
