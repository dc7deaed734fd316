// batch_matmul: C[b][M][N] = op(A[b]) * op(B[b]) for b < batch, fp32 row-major, with
// optional transposes (attention: QK^T is trans_b=1, PV none). The op's knob space,
// register-budget constraints from the target's traits and a traits-derived default; the
// kernel is ops/gemm/batch_matmul.c, the reference ops/gemm/batch_matmul_ref.c.
#include "builtin_ops.h"
#include "knob_util.h"
#include "vendor_kernels.h"

namespace kestrel::ops {
namespace {

using detail::tiles_for;

const std::vector<std::int64_t> kMr = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16};
const std::vector<std::int64_t> kNr = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
const std::vector<std::int64_t> kKc = {16, 32, 64, 128, 192, 256, 384, 512, 768, 1024};
const std::vector<std::int64_t> kMb = {1, 2, 4, 8, 16, 32, 64};
constexpr std::int64_t kMaxDim = 65536;
constexpr std::int64_t kMaxBatch = 65535;  // also the largest CUDA grid z
constexpr std::int64_t kMaxPackedB = 64 << 20;  // floats (256 MiB) of packed B with split=1
constexpr double kTypicalCores = 8;             // for the load-balance features

double waste(double used, double padded) { return padded > 0 ? (padded - used) / padded : 0.0; }

class BatchMatmulOp final : public Op {
 public:
  std::string_view name() const override { return "batch_matmul"; }

  std::string_view description() const override {
    return "fp32 batched matrix multiply C[b][M][N] = op(A[b]) * op(B[b]), row-major, optional transposes "
           "(attention QK^T / PV); B packed into NR-wide panels, an MR x NR broadcast-FMA register micro-kernel, "
           "threads over batch matrices and row blocks";
  }

  std::vector<ParamSpec> params() const override {
    return {
        {"batch", "number of matrix products (e.g. attention heads x sequences)", 1, kMaxBatch, 0},
        {"M", "rows of op(A) and C", 1, kMaxDim, 0},
        {"N", "columns of op(B) and C", 1, kMaxDim, 0},
        {"K", "the reduction length: columns of op(A), rows of op(B)", 1, kMaxDim, 0},
        {"trans_a", "1: A is stored [batch][K][M] (op(A) = A^T)", 0, 1, 0, true},
        {"trans_b", "1: B is stored [batch][N][K] (op(B) = B^T, e.g. K^T in attention)", 0, 1, 0, true},
    };
  }

  void validate(const Params& p) const override {
    const auto specs = params();
    for (const auto& spec : specs) {
      auto it = p.find(spec.name);
      if (it == p.end()) {
        if (spec.optional) continue;
        throw OpError("batch_matmul: missing parameter " + spec.name + " (" + spec.help + ")");
      }
      if (it->second < spec.min || it->second > spec.max) {
        throw OpError("batch_matmul: parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                      std::to_string(spec.min) + ".." + std::to_string(spec.max));
      }
    }
    for (const auto& entry : p) {
      bool known = std::any_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == entry.first; });
      if (!known) {
        throw OpError("batch_matmul: unknown parameter " + entry.first +
                      " (parameters: batch,M,N,K and optional trans_a,trans_b)");
      }
    }
    for (const auto& tensor : tensors(p)) {
      if (tensor.elements() > (std::int64_t{1} << 31)) {
        throw OpError("batch_matmul: tensor " + tensor.name + " has " + std::to_string(tensor.elements()) +
                      " elements, more than the 2^31 supported");
      }
    }
  }

  std::vector<TensorSpec> tensors(const Params& p) const override {
    const std::int64_t batch = p.at("batch"), m = p.at("M"), n = p.at("N"), k = p.at("K");
    const bool ta = detail::param_or(p, "trans_a", 0) != 0, tb = detail::param_or(p, "trans_b", 0) != 0;
    return {
        {"A", DType::f32, Role::input, ta ? std::vector<std::int64_t>{batch, k, m} : std::vector<std::int64_t>{batch, m, k}},
        {"B", DType::f32, Role::input, tb ? std::vector<std::int64_t>{batch, n, k} : std::vector<std::int64_t>{batch, k, n}},
        {"C", DType::f32, Role::output, {batch, m, n}},
    };
  }

  double flops(const Params& p) const override {
    return 2.0 * static_cast<double>(p.at("batch")) * static_cast<double>(p.at("M")) *
           static_cast<double>(p.at("N")) * static_cast<double>(p.at("K"));
  }

  std::vector<Knob> knobs(const Params& p) const override {
    const std::int64_t m = p.at("M"), n = p.at("N"), k = p.at("K");
    const bool trans_b = detail::param_or(p, "trans_b", 0) != 0;
    return {
        {"mr", tiles_for(kMr, m), "rows of the register micro-tile"},
        {"nr", tiles_for(kNr, n), "columns of the register micro-tile; multiple of vec"},
        {"vec", {1, 4, 8, 16}, "floats per vector (1 = scalar); wider than the target's registers takes several"},
        {"kc", tiles_for(kKc, k), "reduction length per k block (the B panel's depth: kc x nr floats stay in L1)"},
        {"mb", kMb, "micro-panels of mr rows per row block (the unit of work with split=1; A block in L2)"},
        {"unroll", {1, 2, 4, 8}, "unroll count of the micro-kernel's k loop"},
        {"pack_b", trans_b ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{0, 1},
         "1 = copy each batch matrix of B into nr-wide panels, 0 = read B in place (a transposed B is always "
         "packed: 1 only)"},
        {"split", {0, 1}, "threads take: 0 = whole batch matrices (each packs its own B), 1 = (batch, row block) "
                          "pairs after every B is packed"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& traits) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    const std::int64_t mr = c.at("mr"), nr = c.at("nr"), vec = c.at("vec"), mb = c.at("mb"), m = p.at("M");
    if (nr % vec != 0) return "nr=" + std::to_string(nr) + " is not a multiple of vec=" + std::to_string(vec);
    if (std::int64_t registers = micro_tile_registers(mr, nr, vec, traits); registers > traits.vector_registers) {
      return "micro-tile " + std::to_string(mr) + "x" + std::to_string(nr) + " with vec=" + std::to_string(vec) +
             " needs " + std::to_string(registers) + " vector registers on " + std::string(to_string(traits.isa)) +
             " (mr*nr/vec accumulators + nr/vec for B + 1 broadcast, " + std::to_string(traits.vector_floats) +
             " floats per register), more than its " + std::to_string(traits.vector_registers);
    }
    if (mb > 1 && (mb / 2) * mr >= m) {
      return "mb=" + std::to_string(mb) + " row blocks of " + std::to_string(mb * mr) + " rows: mb=" +
             std::to_string(mb / 2) + " already covers M=" + std::to_string(m);
    }
    if (c.at("split") == 1 && c.at("pack_b") == 1) {
      const std::int64_t packed = p.at("batch") * detail::ceil_div(p.at("N"), nr) * nr * p.at("K");
      if (packed > kMaxPackedB) {
        return "split=1 packs every batch matrix of B at once: " + std::to_string(packed) + " floats exceeds " +
               std::to_string(kMaxPackedB);
      }
    }
    return {};
  }

  // Two vectors of the target's width per micro-tile row (three on AArch64's 32 registers
  // of 4 floats), as many rows as the register file holds (at most 8), the B panel kept in
  // half of L1 and the A block in half of L2, B packed, threads over whole batch matrices
  // when there are enough of them to share out evenly, else over row blocks.
  Config default_config(const Params& p, const TargetTraits& traits) const override {
    const std::int64_t batch = p.at("batch"), m = p.at("M"), k = p.at("K");
    const auto kn = knobs(p);
    const auto& mr_domain = kn[0].values;
    const auto& nr_domain = kn[1].values;
    const auto& kc_domain = kn[3].values;
    const std::int64_t vectors = traits.vector_registers >= 32 && traits.vector_floats == 4 ? 3 : 2;
    std::int64_t vec = 1, nr = nr_domain.front();
    for (std::int64_t v : {16, 8, 4, 1}) {  // the target's width, or narrower for small N
      if (v > traits.vector_floats) continue;
      std::int64_t best = 0;
      for (auto candidate : nr_domain) {
        if (candidate % v == 0 && candidate <= vectors * v) best = candidate;
      }
      if (best >= v) {
        vec = v;
        nr = best > 0 ? best : nr_domain.front();
        break;
      }
    }
    const std::int64_t nv = nr / vec, per_vector = traits.registers_per_vector(vec);
    const std::int64_t mr_fit = std::max<std::int64_t>(1, ((traits.vector_registers - 1) / per_vector - nv) / nv);
    const std::int64_t mr = detail::largest_at_most(mr_domain, std::min<std::int64_t>(8, mr_fit));
    // kc: the whole K when its B panel fits in half of L1, else the largest block that does.
    const std::int64_t kc_fit = std::max<std::int64_t>(16, traits.l1d_bytes / 2 / (nr * 4));
    std::int64_t kc = detail::largest_at_most(kc_domain, kc_fit);
    if (k <= kc_fit) {
      for (auto v : kc_domain) {
        if (v >= k) {
          kc = v;
          break;
        }
      }
    }
    const std::int64_t kc_eff = std::min(kc, k);
    std::int64_t mb = 1;
    for (auto v : kMb) {
      if (v > 1 && (v / 2) * mr >= m) break;
      if (v * mr * kc_eff * 4 <= traits.l2_bytes / 2) mb = v;
    }
    const std::int64_t cores = std::max(1, traits.cores);
    const bool whole_matrices = batch >= 4 * cores || batch % cores == 0;
    // Sharing (batch, row block) pairs: row blocks small enough for 4 pairs per core.
    while (!whole_matrices && mb > 1 && batch * detail::ceil_div(m, mb * mr) < 4 * cores) mb /= 2;
    return {{"mr", mr}, {"nr", nr}, {"vec", vec}, {"kc", kc}, {"mb", mb}, {"unroll", 4}, {"pack_b", 1},
            {"split", whole_matrices ? 0 : 1}};
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  // OpenBLAS: one cblas_sgemm per matrix of the batch, the transposes passed to it.
  std::vector<VendorKernel> vendor_kernels(const Params& p) const override {
    return {detail::openblas_gemm(p, p.at("batch"), p.at("M"), p.at("N"), p.at("K"),
                                  detail::param_or(p, "trans_a", 0) != 0, detail::param_or(p, "trans_b", 0) != 0)};
  }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("batch_matmul has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) {
      throw OpError("invalid batch_matmul configuration: " + reason);
    }
    KernelSource out{Backend::cpu, "batch_matmul.c", std::string(embedded::batch_matmul_c()), {}};
    detail::add_defines(out.defines, "BMM_", p);
    detail::add_defines(out.defines, "BMM_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "batch_matmul_ref.c", std::string(embedded::batch_matmul_ref_c()), {}};
    detail::add_defines(out.defines, "BMM_", p);
    return out;
  }

  double tolerance(const Params& p) const override { return detail::dot_tolerance(static_cast<double>(p.at("K"))); }

  // Parameters and knobs, then derived quantities; the same names in the same order for
  // every workload and configuration, all finite and >= 0.
  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    auto add = [&out](const char* name, double value) { out.emplace_back(std::string("batch_matmul.") + name, value); };
    const double batch = static_cast<double>(p.at("batch")), m = static_cast<double>(p.at("M")),
                 n = static_cast<double>(p.at("N")), k = static_cast<double>(p.at("K"));
    const std::int64_t mr = c.at("mr"), nr = c.at("nr"), vec = c.at("vec"), kc = c.at("kc"), mb = c.at("mb");
    const double kc_eff = std::min<double>(static_cast<double>(kc), k);
    const double mc = static_cast<double>(mb * mr);
    const double row_blocks = std::ceil(m / mc);
    const double m_computed = std::ceil(m / static_cast<double>(mr)) * static_cast<double>(mr);
    const double n_computed = std::ceil(n / static_cast<double>(nr)) * static_cast<double>(nr);
    const double accumulators = static_cast<double>(mr * std::max<std::int64_t>(nr / vec, 1));
    const double items = c.at("split") == 0 ? batch : batch * row_blocks;
    const double waves = std::ceil(items / kTypicalCores);
    add("flops", 2.0 * batch * m * n * k);
    add("accumulators", accumulators);
    add("vector_registers", static_cast<double>(mr * (nr / vec) + nr / vec + 1));
    add("vectors_per_row", static_cast<double>(nr / vec));
    add("b_panel_bytes", static_cast<double>(nr) * kc_eff * 4);
    add("a_block_bytes", std::min(mc, m) * kc_eff * 4);
    add("packed_b_bytes", c.at("pack_b") != 0 ? n_computed * k * 4 : 0.0);
    add("k_blocks", std::ceil(k / static_cast<double>(kc)));
    add("waste_mr", waste(m, m_computed));
    add("waste_nr", waste(n, n_computed));
    add("vector_utilisation", (m * n) / (m_computed * n_computed));
    add("micro_intensity", 2.0 * static_cast<double>(mr * nr) / static_cast<double>(mr + nr));
    add("k_iterations_per_unroll", kc_eff / static_cast<double>(c.at("unroll")));
    add("parallel_items", items);
    add("core_occupancy", std::min(items, kTypicalCores) / kTypicalCores);
    add("load_balance", items / (waves * kTypicalCores));
    add("flops_per_item", 2.0 * batch * m * n * k / items);
    return out;
  }

 private:
  // Vector registers the micro-kernel keeps live on `traits`: the accumulators and one row
  // of B (a vector wider than the target's registers takes several), and the broadcast.
  static std::int64_t micro_tile_registers(std::int64_t mr, std::int64_t nr, std::int64_t vec,
                                           const TargetTraits& traits) {
    return (mr * (nr / vec) + nr / vec) * traits.registers_per_vector(vec) + 1;
  }
};

}  // namespace

std::unique_ptr<Op> make_batch_matmul_op() { return std::make_unique<BatchMatmulOp>(); }

}  // namespace kestrel::ops
