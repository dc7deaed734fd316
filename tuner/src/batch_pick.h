// A diversity-aware batch pick, shared by the model-guided strategies ("sa", "bo"): from
// a pool of scored candidates, the batch is chosen greedily by score with a penalty for
// being close, in knob digits (Hamming distance over the space's mixed-radix digits), to
// the points already picked for the batch and to the points already measured. Without it
// a batch is the model's top points, which sit side by side around one optimum of the
// model (on the two-basin test space ~3x more batch pairs one knob apart than in a batch
// with the penalty) and spend a whole batch on one guess.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kestrel/tuner/space.h"

namespace kestrel::tuner::detail {

struct Scored {
  std::uint64_t index = 0;
  double score = 0;  // higher is better
};

inline std::size_t hamming(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  std::size_t differ = 0;
  for (std::size_t k = 0; k < a.size() && k < b.size(); ++k) differ += a[k] != b[k];
  return differ;
}

// How close two points are for the penalty: 1 one knob apart, 1/2 two knobs apart, 0
// farther.
inline double closeness(std::size_t distance) {
  return distance >= 3 ? 0.0 : (3.0 - static_cast<double>(distance)) / 2.0;
}

struct DiversityWeights {
  // Penalties in standard deviations of the pool's scores: per picked point of the batch
  // (summed), and for the closest measured point (at most once).
  double batch = 1.0;
  double measured = 0.25;
};

// Up to `count` points of `pool` (indices distinct), best first by penalised score.
inline std::vector<std::uint64_t> pick_diverse(const Space& space, const std::vector<Scored>& pool, std::size_t count,
                                               const std::vector<std::uint64_t>& measured,
                                               DiversityWeights weights = {}) {
  std::vector<std::uint64_t> out;
  if (pool.empty() || count == 0) return out;
  double mean = 0;
  for (const auto& s : pool) mean += s.score;
  mean /= static_cast<double>(pool.size());
  double variance = 0;
  for (const auto& s : pool) variance += (s.score - mean) * (s.score - mean);
  double deviation = std::sqrt(variance / static_cast<double>(pool.size()));
  if (!(deviation > 1e-12)) deviation = 1.0;

  std::vector<std::vector<std::uint32_t>> digits;
  std::vector<double> base(pool.size());
  digits.reserve(pool.size());
  std::vector<std::vector<std::uint32_t>> measured_digits;
  measured_digits.reserve(measured.size());
  for (auto index : measured) measured_digits.push_back(space.digits(index));
  for (std::size_t i = 0; i < pool.size(); ++i) {
    digits.push_back(space.digits(pool[i].index));
    double near = 0;
    for (const auto& m : measured_digits) {
      near = std::max(near, closeness(hamming(digits[i], m)));
      if (near >= 1.0) break;
    }
    base[i] = (pool[i].score - mean) / deviation - weights.measured * near;
  }
  std::vector<double> penalty(pool.size(), 0.0);
  std::vector<bool> used(pool.size(), false);
  while (out.size() < count && out.size() < pool.size()) {
    std::size_t pick = pool.size();
    double best = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (used[i]) continue;
      double value = base[i] - penalty[i];
      // Ties go to the smaller index, for reproducibility.
      if (value > best || (value == best && pick < pool.size() && pool[i].index < pool[pick].index)) {
        best = value;
        pick = i;
      }
    }
    if (pick == pool.size()) break;
    used[pick] = true;
    out.push_back(pool[pick].index);
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (!used[i]) penalty[i] += weights.batch * closeness(hamming(digits[i], digits[pick]));
    }
  }
  return out;
}

}  // namespace kestrel::tuner::detail
