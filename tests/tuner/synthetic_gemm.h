// A synthetic gemm machine for the zero-shot tests: a cost function of the workload and
// the configuration (vector width, micro-tile intensity, padding waste, the B panel in
// L1 and the B block in L2, the unroll count, packing) that carries across shapes as real
// machines do, records of it on several workloads, and a cross-workload model trained
// on them (once per test program).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "kestrel/host/target.h"
#include "kestrel/ops/op.h"
#include "kestrel/tuner/cross_model.h"
#include "kestrel/records/records.h"
#include "kestrel/tuner/space.h"

namespace kestrel::test {

// An AVX2 target (8 floats per vector, 16 registers): the class the synthetic model serves.
inline host::Target synthetic_target() { return host::parse_target("x86_64-linux-gnu", "znver3"); }

// Seconds per call of a gemm configuration on the synthetic machine.
inline double synthetic_gemm_seconds(const ops::Params& p, const ops::Config& c) {
  const double m = static_cast<double>(p.at("M")), n = static_cast<double>(p.at("N")),
               k = static_cast<double>(p.at("K"));
  const double mr = static_cast<double>(c.at("mr")), nr = static_cast<double>(c.at("nr")),
               kc = static_cast<double>(std::min(c.at("kc"), p.at("K"))),
               nc = static_cast<double>(std::min(c.at("nc"), p.at("N"))), vec = static_cast<double>(c.at("vec"));
  const double lanes = std::min(vec, 8.0) / 8.0;
  const double micro = std::min(1.0, (mr * nr) / (mr + nr) / 4.4);
  const double used = (m / (std::ceil(m / mr) * mr)) * (n / (std::ceil(n / nr) * nr));
  const double l1 = kc * nr * 4 <= 16 * 1024 ? 1.0 : 0.6;
  const double l2 = kc * nc * 4 <= 256 * 1024 ? 1.0 : 0.7;
  const double unroll = c.at("unroll") == 4 ? 1.0 : 0.85;
  const double packed = c.at("pack_b") == 1 ? 1.0 : 0.9;
  // Packing A pays off on no shape here (and its kernels take long to compile: the
  // end-to-end test measures the model's picks).
  const double in_place = c.at("pack_a") == 0 ? 1.0 : 0.7;
  const double gflops = 1 + 60 * lanes * micro * used * l1 * l2 * unroll * packed * in_place;
  return 2 * m * n * k / (gflops * 1e9);
}

// `per_workload` distinct random valid configurations of each workload, measured on the
// synthetic machine, as records of `target`.
inline std::vector<records::Record> synthetic_gemm_records(const ops::Op& gemm, const std::vector<ops::Params>& workloads,
                                                         const host::Target& target, std::size_t per_workload,
                                                         std::uint64_t seed = 1) {
  std::vector<records::Record> out;
  tuner::Rng rng(seed);
  for (const ops::Params& workload : workloads) {
    const tuner::Space space(gemm, workload, target.traits);
    std::unordered_set<std::uint64_t> seen;
    for (int attempts = 0; seen.size() < per_workload && attempts < 100'000; ++attempts) {
      auto index = space.sample_valid(rng);
      if (!index || !seen.insert(*index).second) continue;
      records::Record r;
      r.op = "gemm";
      r.workload = workload;
      r.target = target.id();
      r.device_class = {"test", "synthetic cpu", target.triple + "|synthetic cpu|1"};
      r.device = "cpu0";
      r.config = space.config(*index);
      r.cost = synthetic_gemm_seconds(workload, r.config);
      r.round_seconds = {r.cost, r.cost, r.cost};
      r.gflops = gemm.flops(workload) / r.cost / 1e9;
      r.session = "synthetic";
      out.push_back(std::move(r));
    }
  }
  return out;
}

// The workloads the synthetic model is trained on, and ones it never saw.
inline std::vector<ops::Params> synthetic_training_workloads() {
  return {{{"M", 64}, {"N", 64}, {"K", 64}},     {{"M", 128}, {"N", 256}, {"K", 128}},
          {{"M", 256}, {"N", 128}, {"K", 512}},  {{"M", 512}, {"N", 512}, {"K", 256}},
          {{"M", 96}, {"N", 384}, {"K", 192}},   {{"M", 1024}, {"N", 256}, {"K", 64}},
          {{"M", 48}, {"N", 768}, {"K", 320}},   {{"M", 200}, {"N", 96}, {"K", 1024}}};
}
inline std::vector<ops::Params> synthetic_unseen_workloads() {
  return {{{"M", 384}, {"N", 384}, {"K", 384}}, {{"M", 100}, {"N", 640}, {"K", 256}},
          {{"M", 768}, {"N", 192}, {"K", 96}}};
}

// A cross-workload model of the synthetic machine's gemm, trained once. Never destroyed:
// XGBoost's own globals may be gone by the time static objects are.
inline const tuner::CrossModel& synthetic_gemm_model() {
  static const tuner::CrossModel* model = [] {
    const ops::Registry registry = ops::builtin_ops();
    tuner::TrainOptions options;
    options.folds = 2;
    return new tuner::CrossModel(tuner::CrossModel::train(
        synthetic_gemm_records(registry.get("gemm"), synthetic_training_workloads(), synthetic_target(), 150),
        registry, options));
  }();
  return *model;
}

}  // namespace kestrel::test
