// gemm: C[M][N] = act(A[M][K] * B[K][N] + bias + residual), fp32 row-major, the epilogue
// optional. The op's knob space, constraints and default; the kernel itself is
// ops/gemm/gemm.c, the reference ops/gemm/gemm_ref.c.
#include "activation.h"
#include "builtin_ops.h"
#include "knob_util.h"
#include "vendor_kernels.h"

namespace kestrel::ops {
namespace {

using detail::tiles_for;

// Cache blocks include multiples of every mr (5, 7, 10, 14 too) and nr (80, 96 too).
const std::vector<std::int64_t> kMc = {8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 140, 168, 192, 224, 256, 384, 512};
const std::vector<std::int64_t> kNc = {16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 960, 1024, 1920,
                                       2048, 4096};
const std::vector<std::int64_t> kKc = {16, 32, 64, 128, 256, 384, 512, 768, 1024};
const std::vector<std::int64_t> kMr = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16};
const std::vector<std::int64_t> kNr = {1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96};
constexpr std::int64_t kMaxDim = 65536;
// Vector registers of the largest common register files (AVX-512: 32 zmm, AArch64: 32 q).
// The micro-tile's accumulators, its row of B and one broadcast must fit, or it spills on
// every target; gemm.c also refuses tiles that do not fit the actual target's registers
// when VEC is the target's register width (e.g. 16 ymm on AVX2 for vec=8).
constexpr std::int64_t kRegisterBudget = 32;
constexpr std::int64_t kMaxPackedA = 256 * 1024;  // floats (1 MiB)
constexpr std::int64_t kMaxPackedB = 4 << 20;     // floats (16 MiB)
constexpr double kTypicalCores = 8;               // for the load-balance features

// Vectors per row of the micro-tile: four when 4- or 8-float vectors have 32 registers.
std::int64_t vectors_per_row(const TargetTraits& target) {
  return target.vector_registers >= 32 && std::min<std::int64_t>(target.vector_floats, 16) < 16 ? 4 : 2;
}

// The share of `padded` that is padding beyond `used` (0 when nothing is padded).
double waste(double used, double padded) { return padded > 0 ? (padded - used) / padded : 0.0; }

class GemmOp final : public Op {
 public:
  std::string_view name() const override { return "gemm"; }

  std::string_view description() const override {
    return "fp32 matrix multiply C[M][N] = act(A[M][K] * B[K][N] + bias + residual), row-major (the epilogue "
           "optional); packed (or in-place) A/B panels and an MR x NR broadcast-FMA register micro-kernel on vector "
           "types, the epilogue fused into its last store";
  }

  std::vector<ParamSpec> params() const override {
    return {
        {"M", "rows of A and C", 1, kMaxDim, 0},
        {"N", "columns of B and C", 1, kMaxDim, 0},
        {"K", "columns of A, rows of B (the reduction length)", 1, kMaxDim, 0},
        {"bias", "1: add a bias per column of C (tensor bias[N])", 0, 1, 0, true},
        {"residual", "1: add a tensor of C's shape (residual[M][N])", 0, 1, 0, true},
        detail::activation_param("activation applied last"),
        {"panels", "P > 0: B arrives packed as P-wide column panels B[ceil(N/P)][K][P], the columns past N zero "
                   "(a model's constant weights, packed once when it is loaded); the micro-tile is then P wide "
                   "(nr=P) and the kernel packs no B",
         0, 96, 0, true},
    };
  }

  void validate(const Params& p) const override {
    const auto specs = params();
    for (const auto& spec : specs) {
      auto it = p.find(spec.name);
      if (it == p.end() && spec.optional) continue;
      if (it == p.end()) throw OpError("gemm: missing parameter " + spec.name + " (" + spec.help + ")");
      if (it->second < spec.min || it->second > spec.max) {
        throw OpError("gemm: parameter " + spec.name + "=" + std::to_string(it->second) + " is outside " +
                      std::to_string(spec.min) + ".." + std::to_string(spec.max));
      }
    }
    for (const auto& entry : p) {
      if (std::none_of(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == entry.first; })) {
        throw OpError("gemm: unknown parameter " + entry.first + " (parameters: M,N,K and optional bias,residual,act,panels)");
      }
    }
    if (const std::int64_t panels = detail::param_or(p, "panels", 0);
        panels != 0 && std::find(kNr.begin(), kNr.end(), panels) == kNr.end()) {
      std::string widths;
      for (auto nr : kNr) widths += (widths.empty() ? "" : ", ") + std::to_string(nr);
      throw OpError("gemm: panels=" + std::to_string(panels) + " is not a micro-tile width nr can take (" + widths + ")");
    }
    for (const auto& tensor : tensors(p)) {
      if (tensor.elements() > (std::int64_t{1} << 31)) {
        throw OpError("gemm: tensor " + tensor.name + " has " + std::to_string(tensor.elements()) +
                      " elements, more than the 2^31 supported");
      }
    }
  }

  // A, B, then the epilogue's bias [N] and residual [M][N] when the workload has them, C.
  std::vector<TensorSpec> tensors(const Params& p) const override {
    std::int64_t m = p.at("M"), n = p.at("N"), k = p.at("K"), panels = detail::param_or(p, "panels", 0);
    std::vector<TensorSpec> out = {
        {"A", DType::f32, Role::input, {m, k}},
        panels > 0 ? TensorSpec{"B", DType::f32, Role::input, {(n + panels - 1) / panels, k, panels}}
                   : TensorSpec{"B", DType::f32, Role::input, {k, n}},
    };
    if (detail::param_or(p, "bias", 0) != 0) out.push_back({"bias", DType::f32, Role::input, {n}});
    if (detail::param_or(p, "residual", 0) != 0) out.push_back({"residual", DType::f32, Role::input, {m, n}});
    out.push_back({"C", DType::f32, Role::output, {m, n}});
    return out;
  }

  double flops(const Params& p) const override {
    return 2.0 * static_cast<double>(p.at("M")) * static_cast<double>(p.at("N")) * static_cast<double>(p.at("K"));
  }

  std::vector<Knob> knobs(const Params& p) const override {
    std::int64_t m = p.at("M"), n = p.at("N"), k = p.at("K"), panels = detail::param_or(p, "panels", 0);
    // B in panels fixes the micro-tile's width and leaves nothing of B to pack.
    return {
        {"mc", tiles_for(kMc, m), "rows of A per cache block (packed into L2); multiple of mr"},
        {"nc", tiles_for(kNc, n), "columns of B per cache block (the packed B panel, L3); multiple of nr"},
        {"kc", tiles_for(kKc, k), "reduction length per cache block (the panels' depth, L1/L2)"},
        {"mr", tiles_for(kMr, m), "rows of the register micro-tile"},
        {"nr", panels > 0 ? std::vector<std::int64_t>{panels} : tiles_for(kNr, n),
         "columns of the register micro-tile; multiple of vec (the panels' width when B arrives in panels)"},
        {"vec", {1, 4, 8, 16}, "floats per vector register (1 = scalar)"},
        {"unroll", {1, 2, 4, 8}, "unroll count of the micro-kernel's k loop"},
        {"order", {0, 1, 2}, "cache-block loop nest: 0 = jc,pc,ic (B block reused), 1 = ic,pc,jc (A block reused), "
                             "2 = jc,ic,pc (C block finished at once)"},
        {"pack_a", {0, 1}, "1 = copy each mc x kc block of A into mr-row panels, 0 = broadcast from A in place"},
        {"pack_b", panels > 0 ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{0, 1},
         "1 = copy each kc x nc block of B into contiguous panels, 0 = read B in place (B in panels: 1, packed "
         "already)"},
        {"split", {0, 1, 2, 3}, "threads take: 0 = row blocks (mc), 1 = column blocks (nc), 2 = both (each packing "
                                "its own B blocks), 3 = B shared: each kc x nc block of B packed once by all threads, "
                                "then row blocks (needs order=0)"},
    };
  }

  std::string check(const Params& p, const Config& c, const TargetTraits& target) const override {
    if (auto reason = detail::check_domains(knobs(p), c); !reason.empty()) return reason;
    std::int64_t mc = c.at("mc"), nc = c.at("nc"), kc = c.at("kc"), mr = c.at("mr"), nr = c.at("nr"),
                 vec = c.at("vec");
    if (nr % vec != 0) return "nr=" + std::to_string(nr) + " is not a multiple of vec=" + std::to_string(vec);
    if (std::int64_t registers = micro_tile_registers(mr, nr, vec, target); registers > target.vector_registers) {
      return "micro-tile " + std::to_string(mr) + "x" + std::to_string(nr) + " with vec=" + std::to_string(vec) +
             " needs " + std::to_string(registers) + " vector registers on " + std::string(to_string(target.isa)) +
             " (mr*nr/vec accumulators + nr/vec for B + 1 broadcast, " + std::to_string(target.vector_floats) +
             " floats per register), more than its " + std::to_string(target.vector_registers);
    }
    if (mc % mr != 0) return "mc=" + std::to_string(mc) + " is not a multiple of mr=" + std::to_string(mr);
    if (nc % nr != 0) return "nc=" + std::to_string(nc) + " is not a multiple of nr=" + std::to_string(nr);
    if (c.at("split") == 3 && c.at("order") != 0) {
      return "split=3 (shared B) runs the loop nest jc,pc,ic only: it needs order=0, not order=" +
             std::to_string(c.at("order"));
    }
    if (mc * kc > kMaxPackedA) {
      return "packed A block mc*kc=" + std::to_string(mc * kc) + " floats exceeds " + std::to_string(kMaxPackedA);
    }
    if (c.at("pack_b") == 1 && detail::param_or(p, "panels", 0) == 0 && kc * nc > kMaxPackedB) {
      return "packed B block kc*nc=" + std::to_string(kc * nc) + " floats exceeds " + std::to_string(kMaxPackedB);
    }
    return {};
  }

  Config default_config(const Params& p, const TargetTraits& target) const override {
    std::int64_t m = p.at("M"), n = p.at("N"), k = p.at("K");
    auto mc_domain = tiles_for(kMc, m), nc_domain = tiles_for(kNc, n);
    // The micro-tile from the register file: vectors of the target's width, two of them
    // per row (three on 32-register files without the width of AVX-512), and as many rows
    // as the accumulators, the row of B and the broadcast leave room for: 6x16 on AVX2
    // (15 of 16 ymm), 6x32 on AVX-512, 6x16 of 4-float vectors on NEON (29 of 32 q),
    // 6x8 on SSE and ARMv7 NEON. Skinny M (batch-1 layers): 4 rows, twice the columns.
    const bool skinny = m <= 16;
    const std::int64_t vec = std::min<std::int64_t>(target.vector_floats, 16);
    const std::int64_t columns = vec * vectors_per_row(target);
    const std::int64_t panels = detail::param_or(p, "panels", 0);
    std::int64_t nr = panels > 0 ? panels
                                 : detail::largest_at_most(tiles_for(kNr, n), std::min<std::int64_t>(columns * (skinny ? 2 : 1), n));
    std::int64_t tile_vec = vec;
    while (tile_vec > 1 && nr % tile_vec != 0) tile_vec /= 2;
    if (tile_vec == 2) tile_vec = 1;  // vec is 1, 4, 8 or 16
    const std::int64_t nv = nr / tile_vec;
    const std::int64_t room = (target.vector_registers - 1) / target.registers_per_vector(tile_vec) - nv;
    const std::int64_t mr_limit = std::max<std::int64_t>(1, std::min<std::int64_t>(skinny ? 4 : 6, room / std::max<std::int64_t>(nv, 1)));
    // The B panel (kc x nr) stays in half of L1 while the rows of A stream through it.
    std::int64_t kc_target = std::max<std::int64_t>(64, target.l1d_bytes / 2 / (4 * nr));
    Config config{{"kc", detail::largest_at_most(tiles_for(kKc, k), std::min<std::int64_t>(kc_target, 512))},
                  {"vec", tile_vec},
                  {"nr", nr},
                  {"unroll", 4},
                  {"order", 0},
                  {"pack_a", 0},
                  {"pack_b", skinny && panels == 0 ? 0 : 1},
                  {"split", 1}};
    // The largest mr <= min(mr_limit, M) with an mc <= 48 (or any mc) that it divides.
    auto mr_domain = tiles_for(kMr, m);
    for (auto mr = mr_domain.rbegin(); mr != mr_domain.rend(); ++mr) {
      if (*mr > mr_limit && *mr != mr_domain.front()) continue;
      std::int64_t mc = pick_multiple(mc_domain, *mr, 48);
      if (mc > 0) {
        config["mr"] = *mr;
        config["mc"] = mc;
        break;
      }
    }
    config["nc"] = balanced_nc(nc_domain, nr, n);
    return config;
  }

  std::vector<Backend> backends() const override { return {Backend::cpu}; }

  KernelSource source(Backend backend, const Params& p, const Config& c) const override {
    if (backend != Backend::cpu) {
      throw OpError("gemm has no " + std::string(to_string(backend)) + " kernel (backends: cpu)");
    }
    if (auto reason = check(p, c, detail::any_target()); !reason.empty()) throw OpError("invalid gemm configuration: " + reason);
    KernelSource out{Backend::cpu, "gemm.c", std::string(embedded::gemm_c()), {}};
    detail::add_defines(out.defines, "GEMM_", p);
    detail::add_defines(out.defines, "GEMM_", c);
    return out;
  }

  KernelSource reference(const Params& p) const override {
    KernelSource out{Backend::cpu, "gemm_ref.c", std::string(embedded::ref_math_h()) + std::string(embedded::gemm_ref_c()),
                     {}};
    detail::add_defines(out.defines, "GEMM_", p);
    return out;
  }

  double tolerance(const Params& p) const override { return detail::dot_tolerance(static_cast<double>(p.at("K"))); }

  // OpenBLAS's cblas_sgemm on A, B and C as they are (none for B in panels, which it
  // cannot read).
  std::vector<VendorKernel> vendor_kernels(const Params& p) const override {
    if (detail::param_or(p, "panels", 0) != 0) return {};
    return {detail::openblas_gemm(p, 1, p.at("M"), p.at("N"), p.at("K"), false, false)};
  }

  // Parameters and knobs, then quantities derived from both. Every name is emitted for
  // every workload and configuration, in this order; all values are finite and >= 0.
  // `panels` is left out: B in panels computes what pack_b=1 computes, without the
  // packing, and the shipped cost models were trained before the parameter existed.
  std::vector<std::pair<std::string, double>> features(const Params& p, const Config& c) const override {
    auto out = Op::features(p, c);
    std::erase_if(out, [](const auto& feature) { return feature.first == "param.panels"; });
    auto add = [&out](const char* name, double value) { out.emplace_back(std::string("gemm.") + name, value); };
    const double m = static_cast<double>(p.at("M")), n = static_cast<double>(p.at("N")),
                 k = static_cast<double>(p.at("K"));
    const std::int64_t mc = c.at("mc"), nc = c.at("nc"), kc = c.at("kc"), mr = c.at("mr"), nr = c.at("nr"),
                       vec = c.at("vec"), split = c.at("split");
    const bool pack_b = c.at("pack_b") != 0;
    // The blocks actually used (a block is never larger than its dimension).
    const double mc_eff = std::min<double>(static_cast<double>(mc), m);
    const double nc_eff = std::min<double>(static_cast<double>(nc), n);
    const double kc_eff = std::min<double>(static_cast<double>(kc), k);
    const double mb = std::ceil(m / static_cast<double>(mc)), nb = std::ceil(n / static_cast<double>(nc)),
                 kb = std::ceil(k / static_cast<double>(kc));
    // Rows and columns the micro-kernel computes, edge tiles padded to full tiles.
    const double m_computed = std::ceil(m / static_cast<double>(mr)) * static_cast<double>(mr);
    const double n_computed = std::ceil(n / static_cast<double>(nr)) * static_cast<double>(nr);
    const double accumulators = static_cast<double>(mr * std::max<std::int64_t>(nr / vec, 1));
    const bool pack_a = c.at("pack_a") != 0;
    const double items = split == 0 || split == 3 ? mb : split == 1 ? nb : mb * nb;
    const double waves = std::ceil(items / kTypicalCores);

    add("flops", 2.0 * m * n * k);
    // Footprints of the packed blocks and panels in bytes (L2, L3 and L1 respectively).
    add("packed_a_bytes", pack_a ? mc_eff * kc_eff * 4 : 0.0);
    add("b_block_bytes", kc_eff * nc_eff * 4);
    add("packed_b_bytes", pack_b ? kc_eff * nc_eff * 4 : 0.0);
    add("a_panel_bytes", static_cast<double>(mr) * kc_eff * 4);
    add("b_panel_bytes", static_cast<double>(nr) * kc_eff * 4);
    add("c_block_bytes", mc_eff * nc_eff * 4);
    // Register pressure of the micro-tile.
    add("accumulators", accumulators);
    add("accumulator_share", accumulators / static_cast<double>(kRegisterBudget));
    add("register_share", static_cast<double>(micro_tile_registers(mr, nr, vec)) / static_cast<double>(kRegisterBudget));
    add("vectors_per_row", static_cast<double>(nr / vec));
    // Padding waste: partially filled cache blocks, and micro-tiles computed on zeros.
    add("waste_mc", waste(m, mb * static_cast<double>(mc)));
    add("waste_nc", waste(n, nb * static_cast<double>(nc)));
    add("waste_kc", waste(k, kb * static_cast<double>(kc)));
    add("waste_mr", waste(m, m_computed));
    add("waste_nr", waste(n, n_computed));
    // Useful share of the vector lanes the micro-kernel computes, and the vector width.
    add("vector_utilisation", (m * n) / (m_computed * n_computed));
    add("vector_width_share", static_cast<double>(vec) / 16.0);
    // Arithmetic intensity: flops per float loaded by the micro-kernel ((2*mr*nr)/(mr+nr))
    // and per float moved by one cache block (A and B blocks in, C block in and out).
    add("micro_intensity", 2.0 * static_cast<double>(mr * nr) / static_cast<double>(mr + nr));
    add("block_intensity",
        2.0 * mc_eff * nc_eff * kc_eff / (mc_eff * kc_eff + kc_eff * nc_eff + 2.0 * mc_eff * nc_eff));
    add("k_iterations_per_unroll", kc_eff / static_cast<double>(c.at("unroll")));
    add("block_count", mb * nb * kb);
    // Parallelism: work items against a typical core count, and their balance.
    add("parallel_items", items);
    add("core_occupancy", std::min(items, kTypicalCores) / kTypicalCores);
    add("load_balance", items / (waves * kTypicalCores));
    add("flops_per_item", 2.0 * m * n * k / items);
    return out;
  }

 private:
  // Vector registers the micro-kernel keeps live: the accumulators, one row of B and the
  // broadcast of A.
  static std::int64_t micro_tile_registers(std::int64_t mr, std::int64_t nr, std::int64_t vec) {
    return mr * (nr / vec) + nr / vec + 1;
  }
  // The same on `target`, where a vector wider than its registers takes several.
  static std::int64_t micro_tile_registers(std::int64_t mr, std::int64_t nr, std::int64_t vec,
                                           const TargetTraits& target) {
    return (mr * (nr / vec) + nr / vec) * target.registers_per_vector(vec) + 1;
  }

  // The largest column block (a multiple of nr, at most 2048) whose blocks two threads
  // taking them in turn finish within 5% of the best such split; the smallest multiple of
  // nr in the domain when none is at most 2048.
  static std::int64_t balanced_nc(const std::vector<std::int64_t>& domain, std::int64_t nr, std::int64_t n) {
    auto span = [n](std::int64_t nc) {  // dynamic scheduling of the blocks on 2 threads
      std::int64_t loads[2] = {0, 0};
      for (std::int64_t jc = 0; jc < n; jc += nc) *(loads[0] <= loads[1] ? &loads[0] : &loads[1]) += std::min(nc, n - jc);
      return std::max(loads[0], loads[1]);
    };
    std::int64_t best_span = 0;
    for (auto nc : domain) {
      if (nc % nr == 0 && nc <= 2048 && (best_span == 0 || span(nc) < best_span)) best_span = span(nc);
    }
    std::int64_t best = 0;
    for (auto nc : domain) {
      if (nc % nr == 0 && nc <= 2048 && span(nc) * 100 <= best_span * 105) best = nc;
    }
    return best > 0 ? best : pick_multiple(domain, nr, 0);
  }

  // The largest value of `domain` that is a multiple of `step` and <= target, else the
  // smallest multiple of `step` in it, else 0.
  static std::int64_t pick_multiple(const std::vector<std::int64_t>& domain, std::int64_t step, std::int64_t target) {
    std::int64_t best = 0, smallest = 0;
    for (auto v : domain) {
      if (v % step != 0) continue;
      if (smallest == 0) smallest = v;
      if (v <= target) best = v;
    }
    return best > 0 ? best : smallest;
  }
};

}  // namespace

std::unique_ptr<Op> make_gemm_op() { return std::make_unique<GemmOp>(); }

std::int64_t gemm_tile_columns(const TargetTraits& traits) {
  const std::int64_t vec = std::min<std::int64_t>(traits.vector_floats, 16);
  return vec < 4 ? 0 : vec * vectors_per_row(traits);
}

}  // namespace kestrel::ops
